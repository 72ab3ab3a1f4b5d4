//! A small, strict parser for the safetensors container format.
//!
//! Layout: 8 bytes little-endian `u64` header length `n`, then `n` bytes of UTF-8 JSON
//! `{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}`, then the
//! data section; offsets are relative to the start of the data section. The parser never panics:
//! every length, product and offset is checked, and errors name the file and the tensor.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::Path;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::Value;

use crate::error::{Error, Result};

/// Largest header accepted (the same limit as the reference `safetensors` crate).
pub const MAX_HEADER_LEN: u64 = 100_000_000;

/// Element types of the safetensors format. Only [`F32`](Dtype::F32), [`F16`](Dtype::F16) and
/// [`BF16`](Dtype::BF16) can be converted to floats here; the others are parsed so that an
/// error can name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[non_exhaustive]
pub enum Dtype {
    /// 32-bit IEEE float.
    F32,
    /// 16-bit IEEE float.
    F16,
    /// bfloat16.
    BF16,
    /// 64-bit IEEE float.
    F64,
    /// Boolean stored as one byte.
    Bool,
    /// Unsigned 8-bit integer.
    U8,
    /// Signed 8-bit integer.
    I8,
    /// Unsigned 16-bit integer.
    U16,
    /// Signed 16-bit integer.
    I16,
    /// Unsigned 32-bit integer.
    U32,
    /// Signed 32-bit integer.
    I32,
    /// Unsigned 64-bit integer.
    U64,
    /// Signed 64-bit integer.
    I64,
    /// 8-bit float, e5m2.
    F8E5M2,
    /// 8-bit float, e4m3.
    F8E4M3,
    /// 8-bit float, e8m0 (scales).
    F8E8M0,
    /// 8-bit float, e4m3 "fnuz".
    F8E4M3Fnuz,
    /// 8-bit float, e5m2 "fnuz".
    F8E5M2Fnuz,
    /// 4-bit float (packed two per byte).
    F4,
    /// 6-bit float, e2m3 (packed).
    F6E2M3,
    /// 6-bit float, e3m2 (packed).
    F6E3M2,
    /// Complex number of two f32.
    C64,
}

const ALL_DTYPES: [Dtype; 22] = [
    Dtype::F32,
    Dtype::F16,
    Dtype::BF16,
    Dtype::F64,
    Dtype::Bool,
    Dtype::U8,
    Dtype::I8,
    Dtype::U16,
    Dtype::I16,
    Dtype::U32,
    Dtype::I32,
    Dtype::U64,
    Dtype::I64,
    Dtype::F8E5M2,
    Dtype::F8E4M3,
    Dtype::F8E8M0,
    Dtype::F8E4M3Fnuz,
    Dtype::F8E5M2Fnuz,
    Dtype::F4,
    Dtype::F6E2M3,
    Dtype::F6E3M2,
    Dtype::C64,
];

impl Dtype {
    /// The spelling used in safetensors headers (`"BF16"`, `"F8_E4M3"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Dtype::F32 => "F32",
            Dtype::F16 => "F16",
            Dtype::BF16 => "BF16",
            Dtype::F64 => "F64",
            Dtype::Bool => "BOOL",
            Dtype::U8 => "U8",
            Dtype::I8 => "I8",
            Dtype::U16 => "U16",
            Dtype::I16 => "I16",
            Dtype::U32 => "U32",
            Dtype::I32 => "I32",
            Dtype::U64 => "U64",
            Dtype::I64 => "I64",
            Dtype::F8E5M2 => "F8_E5M2",
            Dtype::F8E4M3 => "F8_E4M3",
            Dtype::F8E8M0 => "F8_E8M0",
            Dtype::F8E4M3Fnuz => "F8_E4M3FNUZ",
            Dtype::F8E5M2Fnuz => "F8_E5M2FNUZ",
            Dtype::F4 => "F4",
            Dtype::F6E2M3 => "F6_E2M3",
            Dtype::F6E3M2 => "F6_E3M2",
            Dtype::C64 => "C64",
        }
    }

    /// Parses the header spelling; `None` for anything that is not a safetensors dtype.
    pub fn parse(s: &str) -> Option<Dtype> {
        ALL_DTYPES.into_iter().find(|d| d.as_str() == s)
    }

    /// Size of one element in bits (4 and 6 for the packed sub-byte floats).
    pub fn bits(self) -> usize {
        match self {
            Dtype::F4 => 4,
            Dtype::F6E2M3 | Dtype::F6E3M2 => 6,
            Dtype::Bool
            | Dtype::U8
            | Dtype::I8
            | Dtype::F8E5M2
            | Dtype::F8E4M3
            | Dtype::F8E8M0
            | Dtype::F8E4M3Fnuz
            | Dtype::F8E5M2Fnuz => 8,
            Dtype::F16 | Dtype::BF16 | Dtype::U16 | Dtype::I16 => 16,
            Dtype::F32 | Dtype::U32 | Dtype::I32 => 32,
            Dtype::F64 | Dtype::U64 | Dtype::I64 | Dtype::C64 => 64,
        }
    }

    /// Bytes needed for `numel` elements; `None` on overflow or a partial trailing byte.
    pub fn byte_len(self, numel: usize) -> Option<usize> {
        let bits = numel.checked_mul(self.bits())?;
        (bits % 8 == 0).then_some(bits / 8)
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Element type and shape of one stored tensor.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TensorInfo {
    /// Element type.
    pub dtype: Dtype,
    /// Dimensions, outermost first (row-major).
    pub shape: Vec<usize>,
}

impl TensorInfo {
    /// Number of elements (the parser has checked that it does not overflow).
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// One tensor entry of a parsed header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderEntry {
    /// The name exactly as stored in the file.
    pub name: String,
    /// Dtype and shape.
    pub info: TensorInfo,
    /// Byte range of the tensor's data, **absolute** within the file.
    pub range: Range<usize>,
}

/// A validated safetensors header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Header {
    /// Tensors in header order.
    pub tensors: Vec<HeaderEntry>,
    /// The optional `__metadata__` map.
    pub metadata: BTreeMap<String, String>,
    /// Offset of the data section within the file (8 + header length).
    pub data_start: usize,
}

/// Parses and validates the header of a whole safetensors file held in `bytes`.
///
/// `file` is used only in error messages. Checks: length prefix, UTF-8, JSON shape, known dtypes,
/// shape products without overflow, offsets inside the data section, sizes equal to
/// dtype × shape, and no two tensors sharing bytes. Gaps between tensors are allowed.
pub fn parse_header(bytes: &[u8], file: &Path) -> Result<Header> {
    let path = || file.to_path_buf();
    let Some((prefix, rest)) = bytes.split_first_chunk::<8>() else {
        return Err(Error::FileTooShort {
            path: path(),
            len: bytes.len() as u64,
        });
    };
    let header_len = u64::from_le_bytes(*prefix);
    let available = rest.len() as u64;
    if header_len > available {
        return Err(Error::HeaderTooLong {
            path: path(),
            header_len,
            available,
        });
    }
    if header_len > MAX_HEADER_LEN {
        return Err(invalid(
            file,
            format!("header of {header_len} bytes exceeds the {MAX_HEADER_LEN}-byte limit"),
        ));
    }
    // header_len <= rest.len(), so the conversion and split cannot fail.
    let (json, data) = rest.split_at(header_len as usize);
    let text = std::str::from_utf8(json).map_err(|e| invalid(file, format!("header is not UTF-8: {e}")))?;
    let RawHeader(entries) = serde_json::from_str(text)
        .map_err(|e| invalid(file, format!("header is not a JSON object as expected: {e}")))?;

    let mut header = Header {
        data_start: 8 + header_len as usize,
        ..Header::default()
    };
    for (name, value) in entries {
        if name == "__metadata__" {
            header.metadata = parse_metadata(value, file)?;
            continue;
        }
        let (info, offsets) = parse_entry(&name, &value, file)?;
        let range = check_offsets(&name, &info, offsets, data.len(), file)?;
        let start = header.data_start;
        header.tensors.push(HeaderEntry {
            name,
            info,
            range: start + range.start..start + range.end,
        });
    }
    check_overlaps(&header.tensors, file)?;
    Ok(header)
}

fn invalid(file: &Path, reason: String) -> Error {
    Error::InvalidHeader {
        path: file.to_path_buf(),
        reason,
    }
}

/// The top-level JSON object, in file order; duplicate keys are an error (serde_json's `Map`
/// would silently keep the last one, hiding a second byte range from the overlap check).
struct RawHeader(Vec<(String, Value)>);

impl<'de> serde::Deserialize<'de> for RawHeader {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawHeader;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object of tensor entries")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<RawHeader, A::Error> {
                let mut seen = std::collections::HashSet::new();
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Value>()? {
                    if !seen.insert(k.clone()) {
                        return Err(serde::de::Error::custom(format!("duplicate key `{k}`")));
                    }
                    out.push((k, v));
                }
                Ok(RawHeader(out))
            }
        }
        d.deserialize_map(V)
    }
}

fn parse_metadata(value: Value, file: &Path) -> Result<BTreeMap<String, String>> {
    let Value::Object(map) = value else {
        return Err(invalid(file, "`__metadata__` is not an object".into()));
    };
    map.into_iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k, s)),
            other => Err(invalid(
                file,
                format!("`__metadata__.{k}` is {}, not a string", json_kind(&other)),
            )),
        })
        .collect()
}

fn parse_entry(name: &str, value: &Value, file: &Path) -> Result<(TensorInfo, [u64; 2])> {
    let bad = |what: String| invalid(file, format!("tensor `{name}`: {what}"));
    let Value::Object(obj) = value else {
        return Err(bad(format!("entry is {}, not an object", json_kind(value))));
    };
    let dtype_str = match obj.get("dtype") {
        Some(Value::String(s)) => s,
        Some(other) => return Err(bad(format!("`dtype` is {}", json_kind(other)))),
        None => return Err(bad("missing `dtype`".into())),
    };
    let Some(dtype) = Dtype::parse(dtype_str) else {
        return Err(Error::UnsupportedDtype {
            path: file.to_path_buf(),
            tensor: name.to_string(),
            dtype: format!("{dtype_str:?}"),
            allowed: "not a safetensors dtype".into(),
        });
    };
    let shape = match obj.get("shape") {
        Some(Value::Array(dims)) => dims
            .iter()
            .map(|d| {
                d.as_u64()
                    .and_then(|d| usize::try_from(d).ok())
                    .ok_or_else(|| bad(format!("shape entry {d} is not a non-negative integer")))
            })
            .collect::<Result<Vec<usize>>>()?,
        Some(other) => return Err(bad(format!("`shape` is {}", json_kind(other)))),
        None => return Err(bad("missing `shape`".into())),
    };
    let offsets = match obj.get("data_offsets") {
        Some(Value::Array(o)) if o.len() == 2 => {
            let get = |v: &Value| {
                v.as_u64()
                    .ok_or_else(|| bad(format!("data_offsets entry {v} is not a non-negative integer")))
            };
            [get(&o[0])?, get(&o[1])?]
        }
        Some(other) => {
            return Err(bad(format!(
                "`data_offsets` is {}, not [begin, end]",
                json_kind(other)
            )));
        }
        None => return Err(bad("missing `data_offsets`".into())),
    };
    Ok((TensorInfo { dtype, shape }, offsets))
}

/// Checks one entry's offsets against the data section; returns the relative byte range.
fn check_offsets(
    name: &str,
    info: &TensorInfo,
    [begin, end]: [u64; 2],
    data_len: usize,
    file: &Path,
) -> Result<Range<usize>> {
    if begin > end || end > data_len as u64 {
        return Err(Error::DataOutOfRange {
            path: file.to_path_buf(),
            tensor: name.to_string(),
            begin,
            end,
            data_len: data_len as u64,
        });
    }
    let expected = info
        .shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .and_then(|numel| info.dtype.byte_len(numel));
    let found = end - begin;
    if expected.map(|e| e as u64) != Some(found) {
        return Err(Error::SizeMismatch {
            path: file.to_path_buf(),
            tensor: name.to_string(),
            dtype: info.dtype,
            shape: info.shape.clone(),
            expected: expected.map_or_else(
                || "a size that overflows or is not a whole number of".into(),
                |e| e.to_string(),
            ),
            found,
        });
    }
    // end <= data_len, so both fit in usize.
    Ok(begin as usize..end as usize)
}

fn check_overlaps(tensors: &[HeaderEntry], file: &Path) -> Result<()> {
    let mut order: Vec<&HeaderEntry> = tensors.iter().filter(|t| !t.range.is_empty()).collect();
    order.sort_by_key(|t| t.range.start);
    for pair in order.windows(2) {
        if pair[1].range.start < pair[0].range.end {
            return Err(Error::OverlappingData {
                path: file.to_path_buf(),
                tensor: pair[1].name.clone(),
                other: pair[0].name.clone(),
            });
        }
    }
    Ok(())
}

/// A short description of a JSON value for error messages.
pub(crate) fn json_kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.len() <= 40 => format!("the string {s:?}"),
        Value::String(_) => "a string".into(),
        Value::Array(a) => format!("an array of {} items", a.len()),
        Value::Object(_) => "an object".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(header: &str, data: &[u8]) -> Vec<u8> {
        let mut v = (header.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(header.as_bytes());
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn dtype_names_round_trip() {
        for d in ALL_DTYPES {
            assert_eq!(Dtype::parse(d.as_str()), Some(d));
        }
        assert_eq!(Dtype::parse("bf16"), None);
    }

    #[test]
    fn sub_byte_sizes() {
        assert_eq!(Dtype::F4.byte_len(4), Some(2));
        assert_eq!(Dtype::F4.byte_len(3), None);
        assert_eq!(Dtype::F6E2M3.byte_len(4), Some(3));
        assert_eq!(Dtype::F32.byte_len(usize::MAX), None);
    }

    #[test]
    fn zero_sized_and_gaps_are_fine() {
        let h = r#"{"a":{"dtype":"F32","shape":[0,3],"data_offsets":[0,0]},
                    "b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}}"#;
        let parsed = parse_header(&file(h, &[0; 6]), Path::new("x")).unwrap();
        assert_eq!(parsed.tensors.len(), 2);
        assert_eq!(
            parsed.tensors[1].range,
            parsed.data_start + 4..parsed.data_start + 6
        );
    }

    #[test]
    fn duplicate_keys_rejected() {
        let h = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},
                    "a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}"#;
        let err = parse_header(&file(h, &[0; 2]), Path::new("x")).unwrap_err();
        assert!(matches!(err, Error::InvalidHeader { .. }), "{err}");
        assert!(err.to_string().contains("duplicate key `a`"), "{err}");
    }

    #[test]
    fn overflowing_shape_is_size_mismatch() {
        let h = r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}}"#;
        let err = parse_header(&file(h, &[0; 4]), Path::new("x")).unwrap_err();
        assert!(matches!(err, Error::SizeMismatch { .. }), "{err}");
    }

    #[test]
    fn metadata_must_be_strings() {
        let h = r#"{"__metadata__":{"format":1}}"#;
        let err = parse_header(&file(h, &[]), Path::new("x")).unwrap_err();
        assert!(err.to_string().contains("__metadata__.format"), "{err}");
        let h = r#"{"__metadata__":{"format":"pt"}}"#;
        let ok = parse_header(&file(h, &[]), Path::new("x")).unwrap();
        assert_eq!(ok.metadata["format"], "pt");
    }
}

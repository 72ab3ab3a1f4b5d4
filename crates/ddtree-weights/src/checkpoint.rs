//! Memory-mapped checkpoints: one file, a sharded index, or a directory of `*.safetensors`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::ops::{Deref, Range};
use std::path::{Component, Path, PathBuf};

use burn_tensor::backend::Backend;
use burn_tensor::{DType, Tensor, TensorData, get_device_settings};
use half::{bf16, f16};
use serde_json::Value;

use crate::convert::{FloatElem, Progress, decode};
use crate::error::{Error, Result};
use crate::safetensors::{Dtype, Header, TensorInfo, parse_header};

/// Bytes of one file: a read-only memory map, or an owned buffer (for in-memory checkpoints).
enum Storage {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Deref for Storage {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Storage::Mmap(m) => m,
            Storage::Owned(v) => v,
        }
    }
}

struct Shard {
    path: PathBuf,
    storage: Storage,
}

#[derive(Debug)]
struct Entry {
    info: TensorInfo,
    shard: usize,
    /// Absolute byte range in the shard's file.
    range: Range<usize>,
    raw_name: String,
}

/// A checkpoint: `model.safetensors`, or `model.safetensors.index.json` plus its shards, or any
/// `*.safetensors` file(s) in a directory. Files are memory-mapped; nothing is read until a
/// tensor is asked for.
///
/// Names are normalised: a leading `model.language_model.` or else `model.` is stripped
/// (`model.layers.0.mlp.up_proj.weight` → `layers.0.mlp.up_proj.weight`), and the vision tower
/// (`model.visual.*`, `visual.*`) and multi-token-prediction head (`mtp.*`) are dropped.
///
/// ```
/// use ddtree_weights::Checkpoint;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = std::env::temp_dir().join(format!("ddtree-weights-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir)?;
/// // A one-tensor safetensors file written by hand: length prefix, JSON header, data.
/// let header = br#"{"model.norm.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
/// let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
/// bytes.extend_from_slice(header);
/// bytes.extend_from_slice(&1.5f32.to_le_bytes());
/// bytes.extend_from_slice(&(-2.0f32).to_le_bytes());
/// std::fs::write(dir.join("model.safetensors"), &bytes)?;
///
/// let ckpt = Checkpoint::open(&dir)?;
/// assert_eq!(ckpt.names().collect::<Vec<_>>(), ["norm.weight"]);
/// assert_eq!(ckpt.to_f32("norm.weight", &[2])?, [1.5, -2.0]);
/// // Shapes are checked: asking for the wrong one is an error naming the tensor.
/// assert!(ckpt.to_f32("norm.weight", &[3]).is_err());
///
/// // The same values as a burn tensor on the CPU backend.
/// let t = ckpt.tensor::<burn_ndarray::NdArray<f32>, 1>("norm.weight", [2], &Default::default())?;
/// assert_eq!(t.into_data().to_vec::<f32>().unwrap(), [1.5, -2.0]);
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(())
/// # }
/// ```
pub struct Checkpoint {
    origin: PathBuf,
    shards: Vec<Shard>,
    tensors: BTreeMap<String, Entry>,
    progress: Progress,
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("origin", &self.origin)
            .field("files", &self.shards.iter().map(|s| &s.path).collect::<Vec<_>>())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

/// The normalised name, or `None` for tensors a text-only engine drops.
pub fn normalise_name(raw: &str) -> Option<&str> {
    const DROPPED: [&str; 3] = ["model.visual.", "visual.", "mtp."];
    if DROPPED.iter().any(|p| raw.starts_with(p)) {
        return None;
    }
    Some(
        raw.strip_prefix("model.language_model.")
            .or_else(|| raw.strip_prefix("model."))
            .unwrap_or(raw),
    )
}

impl Checkpoint {
    /// Opens a checkpoint directory (or, if `dir` is a file, that one file).
    ///
    /// Looks for, in order: `model.safetensors.index.json`, `model.safetensors`, a single
    /// `*.safetensors.index.json`, and finally every `*.safetensors` file in the directory.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let meta = fs::metadata(dir).map_err(Error::io(dir))?;
        if meta.is_file() {
            return Self::open_file(dir);
        }
        let index = dir.join("model.safetensors.index.json");
        if index.is_file() {
            return Self::open_index(&index);
        }
        let single = dir.join("model.safetensors");
        if single.is_file() {
            return Self::from_shards(dir, vec![map_file(&single)?], None);
        }
        let (mut indexes, mut files) = (Vec::new(), Vec::new());
        for entry in fs::read_dir(dir).map_err(Error::io(dir))? {
            let path = entry.map_err(Error::io(dir))?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.ends_with(".safetensors.index.json") {
                indexes.push(path);
            } else if name.ends_with(".safetensors") && path.is_file() {
                files.push(path);
            }
        }
        if let [index] = indexes.as_slice() {
            return Self::open_index(index);
        }
        if files.is_empty() {
            return Err(Error::NoCheckpoint {
                dir: dir.to_path_buf(),
            });
        }
        files.sort();
        let shards = files.iter().map(|f| map_file(f)).collect::<Result<_>>()?;
        Self::from_shards(dir, shards, None)
    }

    /// Opens one `.safetensors` file.
    pub fn open_file(file: impl AsRef<Path>) -> Result<Self> {
        let file = file.as_ref();
        Self::from_shards(file, vec![map_file(file)?], None)
    }

    /// Builds a checkpoint from the bytes of one safetensors file held in memory; `origin` is
    /// used in error messages. Useful for tests and for data that did not come from disk.
    pub fn from_bytes(bytes: Vec<u8>, origin: impl Into<PathBuf>) -> Result<Self> {
        let path = origin.into();
        let shard = Shard {
            path: path.clone(),
            storage: Storage::Owned(bytes),
        };
        Self::from_shards(&path, vec![shard], None)
    }

    /// Opens a sharded checkpoint from its `*.safetensors.index.json`.
    pub fn open_index(index: impl AsRef<Path>) -> Result<Self> {
        let index = index.as_ref();
        let dir = index.parent().unwrap_or(Path::new("."));
        let weight_map = read_weight_map(index)?;
        // One tensor per shard for the error message, shards in name order.
        let mut shard_names: BTreeMap<&str, &str> = BTreeMap::new();
        for (tensor, shard) in &weight_map {
            shard_names.entry(shard.as_str()).or_insert(tensor.as_str());
        }
        let mut shards = Vec::with_capacity(shard_names.len());
        for (shard, tensor) in &shard_names {
            let path = dir.join(shard);
            if !path.is_file() {
                return Err(Error::MissingShard {
                    index: index.to_path_buf(),
                    shard: path,
                    tensor: tensor.to_string(),
                });
            }
            shards.push(map_file(&path)?);
        }
        Self::from_shards(dir, shards, Some((index, &weight_map)))
    }

    fn from_shards(
        origin: &Path,
        shards: Vec<Shard>,
        index: Option<(&Path, &BTreeMap<String, String>)>,
    ) -> Result<Self> {
        let mut tensors: BTreeMap<String, Entry> = BTreeMap::new();
        let mut raw_in_shard: Vec<BTreeSet<String>> = Vec::with_capacity(shards.len());
        for (i, shard) in shards.iter().enumerate() {
            let Header { tensors: entries, .. } = parse_header(&shard.storage, &shard.path)?;
            let mut raws = BTreeSet::new();
            for e in entries {
                raws.insert(e.name.clone());
                let Some(name) = normalise_name(&e.name) else {
                    continue;
                };
                if let Some(prev) = tensors.get(name) {
                    return Err(if prev.raw_name == e.name {
                        Error::DuplicateTensor {
                            tensor: e.name,
                            first: shards[prev.shard].path.clone(),
                            second: shard.path.clone(),
                        }
                    } else {
                        Error::NameCollision {
                            path: shard.path.clone(),
                            name: name.to_string(),
                            first: prev.raw_name.clone(),
                            second: e.name,
                        }
                    });
                }
                let entry = Entry {
                    info: e.info,
                    shard: i,
                    range: e.range,
                    raw_name: e.name.clone(),
                };
                tensors.insert(name.to_string(), entry);
            }
            raw_in_shard.push(raws);
        }
        if let Some((index_path, weight_map)) = index {
            check_index_agrees(index_path, weight_map, &shards, &raw_in_shard)?;
        }
        let total: u64 = tensors.values().map(|e| e.range.len() as u64).sum();
        tracing::debug!(
            origin = %origin.display(),
            files = shards.len(),
            tensors = tensors.len(),
            bytes = total,
            "opened checkpoint"
        );
        Ok(Checkpoint {
            origin: origin.to_path_buf(),
            shards,
            tensors,
            progress: Progress::new(total),
        })
    }

    /// Turns the progress bar off (or back on; it still appears only on a terminal, for
    /// checkpoints over 256 MiB).
    pub fn with_progress(mut self, enabled: bool) -> Self {
        self.progress.set_enabled(enabled);
        self
    }

    /// The directory or file this checkpoint was opened from.
    pub fn path(&self) -> &Path {
        &self.origin
    }

    /// Normalised tensor names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// Number of (kept) tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether no tensor was kept.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// Whether a tensor of that normalised name exists.
    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// Dtype and shape of a tensor.
    pub fn info(&self, name: &str) -> Result<&TensorInfo> {
        self.entry(name).map(|(e, _)| &e.info)
    }

    /// The name as stored in the file (before normalisation).
    pub fn raw_name(&self, name: &str) -> Option<&str> {
        self.tensors.get(name).map(|e| e.raw_name.as_str())
    }

    /// The file holding a tensor.
    pub fn file_of(&self, name: &str) -> Option<&Path> {
        self.tensors
            .get(name)
            .map(|e| self.shards[e.shard].path.as_path())
    }

    /// The raw little-endian bytes of a tensor, checked to be of `dtype` and `shape`. The slice
    /// points into the memory map and may be unaligned.
    pub fn bytes(&self, name: &str, dtype: Dtype, shape: &[usize]) -> Result<&[u8]> {
        let (entry, shard) = self.checked(name, shape)?;
        if entry.info.dtype != dtype {
            return Err(Error::WrongDtype {
                path: shard.path.clone(),
                tensor: name.to_string(),
                requested: dtype,
                found: entry.info.dtype,
            });
        }
        Ok(&shard.storage[entry.range.clone()])
    }

    /// Raw values converted to f32 (from F32, F16 or BF16), shape checked.
    pub fn to_f32(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        self.values(name, shape)
    }

    /// Values converted to `T` (f32, f64, f16 or bf16) from F32, F16 or BF16, shape checked.
    fn values<T: FloatElem>(&self, name: &str, shape: &[usize]) -> Result<Vec<T>> {
        let (entry, shard) = self.checked(name, shape)?;
        let bytes = &shard.storage[entry.range.clone()];
        let out = decode(bytes, entry.info.dtype).ok_or_else(|| Error::UnsupportedDtype {
            path: shard.path.clone(),
            tensor: name.to_string(),
            dtype: entry.info.dtype.to_string(),
            allowed: "only F32, F16 and BF16 can be read as floats".into(),
        })?;
        self.progress.advance(bytes.len());
        Ok(out)
    }

    /// A burn tensor on `device`, shape checked against `shape`.
    ///
    /// The values are decoded once, straight into the device's default float dtype (burn 0.21's
    /// per-device policy, which is `B::FloatElem` unless the application changed it): a BF16
    /// checkpoint going to a bf16 device is copied without conversion.
    pub fn tensor<B: Backend, const D: usize>(
        &self,
        name: &str,
        shape: [usize; D],
        device: &B::Device,
    ) -> Result<Tensor<B, D>> {
        let (_, shard) = self.checked(name, &shape)?;
        if D == 0 {
            return Err(Error::ZeroRank {
                path: shard.path.clone(),
                tensor: name.to_string(),
            });
        }
        let dtype: DType = get_device_settings::<B>(device).float_dtype.into();
        let data = match dtype {
            DType::F64 => TensorData::new(self.values::<f64>(name, &shape)?, shape),
            DType::F16 => TensorData::new(self.values::<f16>(name, &shape)?, shape),
            DType::BF16 => TensorData::new(self.values::<bf16>(name, &shape)?, shape),
            // F32 and Flex32 (which burn fills from f32 in place).
            _ => TensorData::new(self.values::<f32>(name, &shape)?, shape),
        };
        Ok(Tensor::from_data(data, (device, dtype)))
    }

    fn entry(&self, name: &str) -> Result<(&Entry, &Shard)> {
        match self.tensors.get(name) {
            Some(e) => Ok((e, &self.shards[e.shard])),
            None => Err(Error::MissingTensor {
                path: self.origin.clone(),
                tensor: name.to_string(),
                hint: self.missing_hint(name),
            }),
        }
    }

    fn checked(&self, name: &str, shape: &[usize]) -> Result<(&Entry, &Shard)> {
        let (entry, shard) = self.entry(name)?;
        if entry.info.shape != shape {
            return Err(Error::ShapeMismatch {
                path: shard.path.clone(),
                tensor: name.to_string(),
                expected: shape.to_vec(),
                found: entry.info.shape.clone(),
            });
        }
        Ok((entry, shard))
    }

    fn missing_hint(&self, name: &str) -> String {
        if normalise_name(name) != Some(name) {
            let n = normalise_name(name).unwrap_or("(dropped)");
            return format!(" (names are normalised: ask for `{n}`)");
        }
        // The last two dotted components usually identify the parameter.
        let tail: Vec<&str> = name.rsplitn(3, '.').take(2).collect();
        let suffix = format!(".{}.{}", tail.get(1).unwrap_or(&""), tail[0]);
        let similar: Vec<&str> = self.names().filter(|n| n.ends_with(&suffix)).take(3).collect();
        if similar.is_empty() {
            format!(" ({} tensors)", self.tensors.len())
        } else {
            format!(
                " ({} tensors; similar: {})",
                self.tensors.len(),
                similar.join(", ")
            )
        }
    }
}

fn map_file(path: &Path) -> Result<Shard> {
    let file = fs::File::open(path).map_err(Error::io(path))?;
    let len = file.metadata().map_err(Error::io(path))?.len();
    if len < 8 {
        return Err(Error::FileTooShort {
            path: path.to_path_buf(),
            len,
        });
    }
    // SAFETY: the map is read-only and private to this process. Another process truncating the
    // file while it is mapped could fault reads, as with every mmap-based loader; checkpoints
    // are not expected to change while being served.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(Error::io(path))?;
    Ok(Shard {
        path: path.to_path_buf(),
        storage: Storage::Mmap(map),
    })
}

fn read_weight_map(index: &Path) -> Result<BTreeMap<String, String>> {
    let text = fs::read_to_string(index).map_err(Error::io(index))?;
    let bad = |reason: String| Error::InvalidIndex {
        path: index.to_path_buf(),
        reason,
    };
    let json: Value = serde_json::from_str(&text).map_err(|e| Error::ConfigParse {
        path: index.to_path_buf(),
        reason: e.to_string(),
    })?;
    let Some(Value::Object(map)) = json.get("weight_map") else {
        return Err(bad("no `weight_map` object".into()));
    };
    let mut out = BTreeMap::new();
    for (tensor, shard) in map {
        let Value::String(shard) = shard else {
            return Err(bad(format!("`weight_map.{tensor}` is not a file name")));
        };
        // Shards must sit beside the index: no absolute paths, no `..`.
        let plain = Path::new(shard)
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
        if shard.is_empty() || !plain {
            return Err(bad(format!(
                "`weight_map.{tensor}` = {shard:?} is not a file name beside the index"
            )));
        }
        out.insert(tensor.clone(), shard.clone());
    }
    Ok(out)
}

fn check_index_agrees(
    index: &Path,
    weight_map: &BTreeMap<String, String>,
    shards: &[Shard],
    raw_in_shard: &[BTreeSet<String>],
) -> Result<()> {
    let dir = index.parent().unwrap_or(Path::new("."));
    for (tensor, shard_name) in weight_map {
        let path = dir.join(shard_name);
        let found = shards
            .iter()
            .zip(raw_in_shard)
            .any(|(s, raws)| s.path == path && raws.contains(tensor));
        if !found {
            return Err(Error::InvalidIndex {
                path: index.to_path_buf(),
                reason: format!(
                    "it puts tensor `{tensor}` in {}, which does not contain it",
                    path.display()
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::normalise_name;

    #[test]
    fn normalisation() {
        let cases = [
            (
                "model.layers.0.mlp.up_proj.weight",
                Some("layers.0.mlp.up_proj.weight"),
            ),
            ("model.embed_tokens.weight", Some("embed_tokens.weight")),
            ("model.language_model.norm.weight", Some("norm.weight")),
            ("lm_head.weight", Some("lm_head.weight")),
            ("fc.weight", Some("fc.weight")),
            ("hidden_norm.weight", Some("hidden_norm.weight")),
            ("model.visual.blocks.0.attn.qkv.weight", None),
            ("visual.merger.mlp.0.weight", None),
            ("mtp.fc.weight", None),
            ("modelx.weight", Some("modelx.weight")),
        ];
        for (raw, want) in cases {
            assert_eq!(normalise_name(raw), want, "{raw}");
        }
    }
}

//! Element conversion out of (possibly unaligned) little-endian bytes, and the load progress bar.

use std::io::IsTerminal;
use std::sync::OnceLock;

use half::{bf16, f16};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::safetensors::Dtype;

/// Float types that stored F32 / F16 / BF16 values can be converted into.
pub(crate) trait FloatElem: bytemuck::Pod {
    /// The stored dtype that is bit-identical to `Self`, if any (copy instead of convert).
    const SAME: Option<Dtype>;
    fn from_f32(v: f32) -> Self;
    fn from_f16(v: f16) -> Self;
    fn from_bf16(v: bf16) -> Self;
}

impl FloatElem for f32 {
    const SAME: Option<Dtype> = Some(Dtype::F32);
    fn from_f32(v: f32) -> Self {
        v
    }
    fn from_f16(v: f16) -> Self {
        v.to_f32()
    }
    fn from_bf16(v: bf16) -> Self {
        v.to_f32()
    }
}

impl FloatElem for f64 {
    const SAME: Option<Dtype> = None;
    fn from_f32(v: f32) -> Self {
        v.into()
    }
    fn from_f16(v: f16) -> Self {
        v.to_f64()
    }
    fn from_bf16(v: bf16) -> Self {
        v.to_f64()
    }
}

impl FloatElem for f16 {
    const SAME: Option<Dtype> = Some(Dtype::F16);
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
    fn from_f16(v: f16) -> Self {
        v
    }
    fn from_bf16(v: bf16) -> Self {
        f16::from_f32(v.to_f32())
    }
}

impl FloatElem for bf16 {
    const SAME: Option<Dtype> = Some(Dtype::BF16);
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
    fn from_f16(v: f16) -> Self {
        bf16::from_f32(v.to_f32())
    }
    fn from_bf16(v: bf16) -> Self {
        v
    }
}

fn le2(c: &[u8]) -> u16 {
    u16::from_le_bytes([c[0], c[1]])
}

fn le4(c: &[u8]) -> [u8; 4] {
    [c[0], c[1], c[2], c[3]]
}

/// Decodes little-endian `bytes` of `dtype` into `T`; `None` if `dtype` is not F32/F16/BF16.
///
/// `bytes` may start at any address (safetensors promises no alignment), so nothing here
/// reinterprets the slice in place: the same-type path copies into a fresh, aligned `Vec`
/// (`pod_collect_to_vec`), everything else reads element by element.
pub(crate) fn decode<T: FloatElem>(bytes: &[u8], dtype: Dtype) -> Option<Vec<T>> {
    // A byte copy equals the stored value only where the host is little-endian, as the file is.
    #[cfg(target_endian = "little")]
    if T::SAME == Some(dtype) {
        return Some(bytemuck::pod_collect_to_vec::<u8, T>(bytes));
    }
    // chunks_exact never yields a short chunk, so the indexing in le2/le4 cannot fail.
    Some(match dtype {
        Dtype::F32 => bytes
            .chunks_exact(4)
            .map(|c| T::from_f32(f32::from_le_bytes(le4(c))))
            .collect(),
        Dtype::F16 => bytes
            .chunks_exact(2)
            .map(|c| T::from_f16(f16::from_bits(le2(c))))
            .collect(),
        Dtype::BF16 => bytes
            .chunks_exact(2)
            .map(|c| T::from_bf16(bf16::from_bits(le2(c))))
            .collect(),
        _ => return None,
    })
}

/// Only loads bigger than this get a progress bar.
pub(crate) const PROGRESS_THRESHOLD_BYTES: u64 = 256 * 1024 * 1024;

/// A progress bar over all bytes of a checkpoint, created on the first conversion, shown only
/// when stderr is a terminal and the checkpoint is large (so tests and pipes stay quiet).
#[derive(Debug)]
pub(crate) struct Progress {
    total: u64,
    enabled: bool,
    bar: OnceLock<Option<ProgressBar>>,
}

impl Progress {
    pub(crate) fn new(total: u64) -> Self {
        Progress {
            total,
            enabled: total >= PROGRESS_THRESHOLD_BYTES,
            bar: OnceLock::new(),
        }
    }

    pub(crate) fn set_enabled(&mut self, enabled: bool) {
        self.enabled = enabled;
    }

    pub(crate) fn advance(&self, bytes: usize) {
        if !self.enabled {
            return;
        }
        let bar = self.bar.get_or_init(|| {
            std::io::stderr().is_terminal().then(|| {
                let style =
                    ProgressStyle::with_template("loading weights {bar:40} {bytes}/{total_bytes} ({eta})")
                        .unwrap_or_else(|_| ProgressStyle::default_bar());
                ProgressBar::with_draw_target(Some(self.total), ProgressDrawTarget::stderr())
                    .with_style(style)
            })
        });
        if let Some(bar) = bar {
            bar.inc(bytes as u64);
            if bar.position() >= self.total {
                bar.finish_and_clear();
            }
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(Some(bar)) = self.bar.get() {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_all_pairs_unaligned() {
        let vals = [1.5f32, -2.25, 0.0, 65504.0];
        // One leading byte so the slice starts at an odd address.
        let mut f32b = vec![0xAAu8];
        let mut f16b = vec![0xAAu8];
        let mut bf16b = vec![0xAAu8];
        for v in vals {
            f32b.extend_from_slice(&v.to_le_bytes());
            f16b.extend_from_slice(&f16::from_f32(v).to_bits().to_le_bytes());
            bf16b.extend_from_slice(&bf16::from_f32(v).to_bits().to_le_bytes());
        }
        let want_bf16: Vec<f32> = vals.iter().map(|&v| bf16::from_f32(v).to_f32()).collect();
        assert_eq!(decode::<f32>(&f32b[1..], Dtype::F32).unwrap(), vals);
        assert_eq!(decode::<f32>(&f16b[1..], Dtype::F16).unwrap(), vals);
        assert_eq!(decode::<f32>(&bf16b[1..], Dtype::BF16).unwrap(), want_bf16);
        let as_f64: Vec<f64> = decode(&bf16b[1..], Dtype::BF16).unwrap();
        assert_eq!(as_f64, want_bf16.iter().map(|&v| v as f64).collect::<Vec<_>>());
        let same: Vec<bf16> = decode(&bf16b[1..], Dtype::BF16).unwrap();
        assert_eq!(same, vals.map(bf16::from_f32));
        let to_half: Vec<f16> = decode(&f32b[1..], Dtype::F32).unwrap();
        assert_eq!(to_half, vals.map(f16::from_f32));
        assert!(decode::<f32>(&f32b[1..], Dtype::I32).is_none());
    }

    #[test]
    fn small_loads_have_no_bar() {
        let p = Progress::new(1024);
        p.advance(1024);
        assert!(p.bar.get().is_none());
    }
}

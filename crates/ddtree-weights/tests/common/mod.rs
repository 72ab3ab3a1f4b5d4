//! Helpers shared by the integration tests: temp dirs and safetensors writers.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use half::{bf16, f16};
use safetensors::tensor::TensorView;

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("ddtree-weights-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    pub fn write(&self, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
        let p = self.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A tensor to write: name, safetensors dtype, shape, little-endian bytes.
pub struct T {
    pub name: String,
    pub dtype: safetensors::Dtype,
    pub shape: Vec<usize>,
    pub bytes: Vec<u8>,
}

pub fn f32s(name: &str, shape: &[usize], vals: &[f32]) -> T {
    T {
        name: name.into(),
        dtype: safetensors::Dtype::F32,
        shape: shape.to_vec(),
        bytes: vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

pub fn f16s(name: &str, shape: &[usize], vals: &[f32]) -> T {
    T {
        name: name.into(),
        dtype: safetensors::Dtype::F16,
        shape: shape.to_vec(),
        bytes: vals
            .iter()
            .flat_map(|v| f16::from_f32(*v).to_bits().to_le_bytes())
            .collect(),
    }
}

pub fn bf16s(name: &str, shape: &[usize], vals: &[f32]) -> T {
    T {
        name: name.into(),
        dtype: safetensors::Dtype::BF16,
        shape: shape.to_vec(),
        bytes: vals
            .iter()
            .flat_map(|v| bf16::from_f32(*v).to_bits().to_le_bytes())
            .collect(),
    }
}

pub fn raw(name: &str, dtype: safetensors::Dtype, shape: &[usize], bytes: Vec<u8>) -> T {
    T {
        name: name.into(),
        dtype,
        shape: shape.to_vec(),
        bytes,
    }
}

/// A valid safetensors file written by the reference `safetensors` crate.
pub fn serialize(tensors: &[T]) -> Vec<u8> {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|t| {
            let view = TensorView::new(t.dtype, t.shape.clone(), &t.bytes).unwrap();
            (t.name.clone(), view)
        })
        .collect();
    safetensors::serialize(views, None).unwrap()
}

/// A file from an explicit header string and data section (for broken or unaligned files).
pub fn hand_made(header: &str, data: &[u8]) -> Vec<u8> {
    let mut v = (header.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(header.as_bytes());
    v.extend_from_slice(data);
    v
}

/// A small realistic set of tensors in the three float dtypes.
pub fn sample_tensors() -> Vec<T> {
    vec![
        bf16s(
            "model.embed_tokens.weight",
            &[3, 2],
            &[1.0, -2.0, 0.5, 0.25, 3.0, -0.125],
        ),
        f32s(
            "model.layers.0.mlp.up_proj.weight",
            &[2, 2],
            &[0.1, -0.2, 1e-8, 3.5e10],
        ),
        f16s("model.layers.0.input_layernorm.weight", &[2], &[1.5, -65504.0]),
        f32s("model.norm.weight", &[2], &[1.0, 2.0]),
        bf16s("lm_head.weight", &[3, 2], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]),
    ]
}

/// Asserts that `err`'s message names each of `parts`.
pub fn assert_names(err: &ddtree_weights::Error, parts: &[&str]) {
    let msg = err.to_string();
    for p in parts {
        assert!(msg.contains(p), "error message {msg:?} should name {p:?}");
    }
}

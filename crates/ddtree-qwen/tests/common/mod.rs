//! Shared helpers of the fixture tests: reading the expected tensors recorded with Hugging Face
//! transformers (`tools/make_qwen3_fixtures.py`) and comparing results.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use burn_tensor::Tensor;
use ddtree_kernels::{AncestorBits, KernelOps};
use ddtree_qwen::TreeBlock;
use safetensors::{Dtype, SafeTensors};

/// `fixtures/<name>` at the repository root.
pub fn fixture_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(name)
}

/// The expected outputs of one fixture model.
pub struct Expected {
    bytes: Vec<u8>,
}

impl Expected {
    pub fn load(model: &str) -> Self {
        let path = fixture_dir(model).join("expected.safetensors");
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Self { bytes }
    }

    fn view(&self) -> SafeTensors<'_> {
        SafeTensors::deserialize(&self.bytes).expect("valid expected.safetensors")
    }

    pub fn has(&self, name: &str) -> bool {
        self.view().names().contains(&name)
    }

    /// An int64 tensor as u32 token ids (or -1 → u32::MAX for a root's parent).
    pub fn ids(&self, name: &str) -> Vec<i64> {
        let view = self.view();
        let t = view.tensor(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(t.dtype(), Dtype::I64, "{name}");
        t.data()
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    pub fn tokens(&self, name: &str) -> Vec<u32> {
        self.ids(name).into_iter().map(|t| t as u32).collect()
    }

    /// A float32 tensor and its shape.
    pub fn floats(&self, name: &str) -> (Vec<f32>, Vec<usize>) {
        let view = self.view();
        let t = view.tensor(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(t.dtype(), Dtype::F32, "{name}");
        let values = t
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        (values, t.shape().to_vec())
    }

    /// Number of cases named `{prefix}{i}.{field}` (i = 0, 1, …).
    pub fn count(&self, prefix: &str, field: &str) -> usize {
        (0..)
            .take_while(|i| self.has(&format!("{prefix}{i}.{field}")))
            .count()
    }

    /// Recorded tree `j` (`tree{j}.*`), its depths checked against its parents.
    pub fn tree(&self, j: usize) -> TreeCase {
        let parents = self.ids(&format!("tree{j}.parents"));
        let depths: Vec<u32> = self
            .ids(&format!("tree{j}.depths"))
            .into_iter()
            .map(|d| d as u32)
            .collect();
        assert_eq!(
            depths,
            self::depths(&parents),
            "fixture depths agree with parents"
        );
        let (words, per_row) = ancestor_words(&parents);
        TreeCase {
            prefix: self.tokens(&format!("tree{j}.prefix_ids")),
            tokens: self.tokens(&format!("tree{j}.tree_ids")),
            depths,
            parents,
            words,
            per_row,
        }
    }
}

/// A recorded draft tree: the committed prefix it hangs from, its tokens and depths, and its
/// ancestor bit sets.
pub struct TreeCase {
    pub prefix: Vec<u32>,
    pub tokens: Vec<u32>,
    pub depths: Vec<u32>,
    pub parents: Vec<i64>,
    words: Vec<u64>,
    per_row: usize,
}

impl TreeCase {
    /// The tree as a model verifies it.
    pub fn block(&self) -> TreeBlock<'_> {
        TreeBlock {
            tokens: &self.tokens,
            depths: &self.depths,
            ancestors: AncestorBits::new(&self.words, self.per_row).unwrap(),
        }
    }
}

/// `max |actual − expected| / max |expected|`.
pub fn relative_error(actual: &[f32], expected: &[f32]) -> f32 {
    assert_eq!(actual.len(), expected.len(), "length mismatch");
    let scale = expected.iter().fold(0f32, |m, v| m.max(v.abs()));
    let diff = actual
        .iter()
        .zip(expected)
        .fold(0f32, |m, (a, e)| m.max((a - e).abs()));
    diff / scale.max(f32::MIN_POSITIVE)
}

pub fn to_f32<B: KernelOps, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().to_vec::<f32>().unwrap()
}

/// Ancestor bit sets (ancestors and self) from parent indices (root: negative).
pub fn ancestor_words(parents: &[i64]) -> (Vec<u64>, usize) {
    let n = parents.len();
    let words = n.div_ceil(64);
    let mut bits = vec![0u64; n * words];
    for i in 0..n {
        let p = parents[i];
        if p >= 0 {
            let p = p as usize;
            assert!(p < i, "parents precede children");
            let (lo, hi) = bits.split_at_mut(i * words);
            hi[..words].copy_from_slice(&lo[p * words..(p + 1) * words]);
        }
        bits[i * words + i / 64] |= 1 << (i % 64);
    }
    (bits, words)
}

/// Depths from parent indices.
pub fn depths(parents: &[i64]) -> Vec<u32> {
    let mut d = vec![0u32; parents.len()];
    for i in 0..parents.len() {
        if parents[i] >= 0 {
            d[i] = d[parents[i] as usize] + 1;
        }
    }
    d
}

/// The path root..=node of `node`.
pub fn path_to(parents: &[i64], node: usize) -> Vec<usize> {
    let mut path = vec![node];
    let mut cur = node;
    while parents[cur] >= 0 {
        cur = parents[cur] as usize;
        path.push(cur);
    }
    path.reverse();
    path
}

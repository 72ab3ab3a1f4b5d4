//! Qwen target models for DDTree speculative decoding.
//!
//! A target does four things for the speculative loop: **prefill** a prompt, **decode** one
//! token, **verify** a draft tree in one forward pass (each node at position
//! `committed + depth`, seeing the committed prefix, its ancestors and itself), and **commit** the
//! accepted path (its cache rows moved to contiguous positions). Every forward also returns the
//! hidden features of the layers the drafter reads (`capture_layers`; layer `L`'s output, which is
//! Hugging Face's `hidden_states[L + 1]`).
//!
//! Models: [`Qwen3`] (dense) and [`Qwen35`] (the Qwen3.5/3.6 hybrid of Gated DeltaNet and gated
//! attention layers, whose tree verify gives every node the recurrent state of its own path).
//! All run on any backend implementing [`ddtree_kernels::KernelOps`].

mod cursor;
mod decoder;
mod error;
mod gated_delta_net;
mod qwen3;
mod qwen35;
mod target;

use burn_tensor::Tensor;
use ddtree_kernels::{AncestorBits, KernelOps};

pub use error::{Error, Result};
pub use qwen3::Qwen3;
pub use qwen35::Qwen35;

/// How to load a target.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// Cache rows to preallocate; defaults to the config's `max_position_embeddings`.
    pub max_context: Option<usize>,
    /// Decoder layers whose outputs are returned as features, concatenated in this order (the
    /// drafter's `target_layer_ids`).
    pub capture_layers: Vec<usize>,
}

/// What one forward returns for its `n` rows.
#[derive(Clone, Debug)]
pub struct ForwardOutput<B: KernelOps> {
    /// `[n, vocab]` logits.
    pub logits: Tensor<B, 2>,
    /// `[n, hidden]` final-norm hidden states.
    pub hidden: Tensor<B, 2>,
    /// `[n, capture_layers.len() · hidden]` captured layer outputs, when any were requested.
    pub features: Option<Tensor<B, 2>>,
}

/// A compiled draft tree to verify: node 0 is the root (the last committed token's successor,
/// i.e. the bonus token), every parent precedes its children.
#[derive(Clone, Copy, Debug)]
pub struct TreeBlock<'a> {
    /// Token of each node.
    pub tokens: &'a [u32],
    /// Depth of each node (root 0).
    pub depths: &'a [u32],
    /// Per node, the nodes it sees: its ancestors and itself.
    pub ancestors: AncestorBits<'a>,
}

impl TreeBlock<'_> {
    fn check(&self, vocab: usize) -> Result<()> {
        let n = self.tokens.len();
        if self.depths.len() != n || self.ancestors.rows() != n {
            return Err(Error::InvalidTree(format!(
                "{n} tokens, {} depths and {} ancestor rows must agree",
                self.depths.len(),
                self.ancestors.rows()
            )));
        }
        if self.ancestors.words_per_row() * 64 < n {
            return Err(Error::InvalidTree(format!(
                "{} words per ancestor row cannot hold {n} nodes",
                self.ancestors.words_per_row()
            )));
        }
        if let Some(row) = (0..n).find(|&i| !self.ancestors.sees(i, i)) {
            return Err(Error::InvalidTree(format!("node {row} does not see itself")));
        }
        check_vocab(self.tokens, vocab)
    }

    /// Each node's parent (`-1` for a root), for recurrent layers. Checks what attention alone
    /// does not need: every node's ancestor set is its parent's (the visible node one level up)
    /// plus itself, so the tree the mask describes and the parent links agree.
    fn parents(&self) -> Result<Vec<i32>> {
        let (bits, words) = (self.ancestors.words(), self.ancestors.words_per_row());
        let row = |i: usize| &bits[i * words..(i + 1) * words];
        let mut parents = Vec::with_capacity(self.tokens.len());
        for (i, &depth) in self.depths.iter().enumerate() {
            let parent = (depth > 0)
                .then(|| {
                    (0..i)
                        .rev()
                        .find(|&j| self.ancestors.sees(i, j) && self.depths[j] + 1 == depth)
                })
                .flatten();
            let consistent = (depth == 0 || parent.is_some())
                && (0..words).all(|w| {
                    let inherited = parent.map_or(0, |p| row(p)[w]);
                    let own = if w == i / 64 { 1u64 << (i % 64) } else { 0 };
                    row(i)[w] == inherited | own
                });
            if !consistent {
                return Err(Error::InvalidTree(format!(
                    "node {i} (depth {depth}) must see exactly its parent's ancestors and itself"
                )));
            }
            parents.push(parent.map_or(-1, |p| p as i32));
        }
        Ok(parents)
    }
}

/// Every token must be a vocabulary id: checked before a block touches the cache.
fn check_vocab(tokens: &[u32], vocab: usize) -> Result<()> {
    match tokens.iter().find(|&&t| t as usize >= vocab) {
        Some(&token) => Err(Error::TokenOutOfVocab { token, vocab }),
        None => Ok(()),
    }
}

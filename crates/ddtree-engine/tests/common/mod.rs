//! Test drafters and model loading shared by the engine tests.
//!
//! The drafters here are stand-ins with known behaviour (the real DFlash drafter is tested
//! against the reference in ddtree-dflash): a random one, whose drafts are almost never accepted,
//! and an oracle that copies the target's own greedy choices at some depths, so whole blocks are
//! accepted and commits move many cache rows.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use burn_tensor::Tensor;
use ddtree_engine::{DraftOutput, Drafter, ModelError};
use ddtree_kernels::KernelOps;
use rand::rngs::StdRng;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};

pub type Features<B> = Option<Tensor<B, 2>>;

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(name)
}

/// Writes `k` distinct tokens with descending log-probs for each depth.
fn fill_random(rng: &mut StdRng, vocab: usize, depths: usize, k: usize, out: &mut DraftOutput) {
    let k = k.min(vocab);
    out.depths = depths;
    out.k = k;
    out.tokens.clear();
    out.log_probs.clear();
    for _ in 0..depths {
        let mut lp: Vec<f32> = (0..k).map(|_| -rng.random_range(0.0f32..8.0)).collect();
        lp.sort_by(|a, b| b.total_cmp(a));
        out.tokens
            .extend(sample(rng, vocab, k).into_iter().map(|t| t as u32));
        out.log_probs.extend(lp);
    }
}

/// Random top-K drafts: acceptance near 1.
pub struct RandomDrafter {
    pub vocab: usize,
    pub block_size: usize,
    pub rng: StdRng,
}

impl RandomDrafter {
    pub fn new(vocab: usize, block_size: usize, seed: u64) -> Self {
        Self {
            vocab,
            block_size,
            rng: StdRng::seed_from_u64(seed),
        }
    }
}

impl<B: KernelOps> Drafter<Features<B>> for RandomDrafter {
    fn block_size(&self) -> usize {
        self.block_size
    }

    fn reset(&mut self) {}

    fn draft(
        &mut self,
        _features: &Features<B>,
        _rows: &[usize],
        _bonus: u32,
        k: usize,
        out: &mut DraftOutput,
    ) -> Result<(), ModelError> {
        fill_random(&mut self.rng, self.vocab, self.block_size - 1, k, out);
        Ok(())
    }
}

/// Knows the target's greedy continuation `sequence` (prompt + output) and puts the true next
/// token at rank 0 of a depth with probability `hit_rate` (elsewhere random tokens), so long
/// prefixes of the block are accepted.
pub struct OracleDrafter {
    pub sequence: Vec<u32>,
    pub hit_rate: f64,
    pub vocab: usize,
    pub block_size: usize,
    pub rng: StdRng,
    context: usize,
}

impl OracleDrafter {
    pub fn new(sequence: Vec<u32>, hit_rate: f64, vocab: usize, block_size: usize, seed: u64) -> Self {
        Self {
            sequence,
            hit_rate,
            vocab,
            block_size,
            rng: StdRng::seed_from_u64(seed),
            context: 0,
        }
    }
}

impl<B: KernelOps> Drafter<Features<B>> for OracleDrafter {
    fn block_size(&self) -> usize {
        self.block_size
    }

    fn reset(&mut self) {
        self.context = 0;
    }

    fn draft(
        &mut self,
        _features: &Features<B>,
        rows: &[usize],
        _bonus: u32,
        k: usize,
        out: &mut DraftOutput,
    ) -> Result<(), ModelError> {
        // The engine hands over exactly the newly committed rows: the context grows by them.
        self.context += rows.len();
        let depths = self.block_size - 1;
        fill_random(&mut self.rng, self.vocab, depths, k, out);
        let k = out.k;
        for d in 1..=depths {
            // The bonus sits at position `context`; depth d proposes position context + d.
            let Some(&truth) = self.sequence.get(self.context + d) else {
                continue;
            };
            if self.rng.random_bool(self.hit_rate) {
                let row = &mut out.tokens[(d - 1) * k..d * k];
                if let Some(i) = row.iter().position(|&t| t == truth) {
                    row.swap(0, i);
                } else {
                    row[0] = truth;
                }
            }
        }
        Ok(())
    }
}

//! Picking tokens from logits on the host: argmax, and seeded temperature / top-k / top-p
//! sampling.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Index of the largest logit, the first one on ties; 0 for an empty row.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// Sampling settings. `temperature = 0` means greedy.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature (0 = greedy).
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens (0 = no limit).
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches `top_p` (1 = no limit).
    pub top_p: f32,
    /// Seed of the random generator.
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        }
    }
}

impl SamplingParams {
    /// Whether decoding is greedy.
    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0
    }
}

/// A seeded sampler. Every node of a verified tree draws its own sample from the target's
/// distribution at that node, which keeps sampled speculative decoding lossless.
#[derive(Debug)]
pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
    scratch: Vec<(f32, u32)>,
}

impl Sampler {
    /// A sampler seeded with `params.seed`.
    pub fn new(params: SamplingParams) -> Self {
        Self {
            params,
            rng: StdRng::seed_from_u64(params.seed),
            scratch: Vec::new(),
        }
    }

    /// Draws a token from `softmax(logits / temperature)` restricted by top-k and top-p.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.params.is_greedy() || logits.is_empty() {
            return argmax(logits);
        }
        let inv_t = 1.0 / self.params.temperature;
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        self.scratch.clear();
        self.scratch.extend(
            logits
                .iter()
                .enumerate()
                .map(|(i, &l)| (((l - max) * inv_t).exp(), i as u32)),
        );
        let limited = self.params.top_k > 0 && self.params.top_k < self.scratch.len();
        if limited || self.params.top_p < 1.0 {
            // Most likely first; ties by token id, so results are deterministic.
            self.scratch
                .sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            if limited {
                self.scratch.truncate(self.params.top_k);
            }
            if self.params.top_p < 1.0 {
                let total: f32 = self.scratch.iter().map(|p| p.0).sum();
                let mut mass = 0.0;
                let keep = self
                    .scratch
                    .iter()
                    .position(|p| {
                        mass += p.0;
                        mass >= self.params.top_p * total
                    })
                    .map_or(self.scratch.len(), |i| i + 1);
                self.scratch.truncate(keep);
            }
        }
        let total: f32 = self.scratch.iter().map(|p| p.0).sum();
        let mut u = self.rng.random::<f32>() * total;
        for &(p, token) in &self.scratch {
            if u < p {
                return token;
            }
            u -= p;
        }
        // Rounding left `u` past the last bucket: the last kept token.
        self.scratch.last().map_or(0, |p| p.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmax_takes_the_first_maximum() {
        assert_eq!(argmax(&[0.0, 3.0, 1.0, 3.0]), 1);
        assert_eq!(argmax(&[]), 0);
    }

    #[test]
    fn top_k_one_is_greedy_and_top_p_keeps_the_head() {
        let logits = [0.1, 2.0, 1.9, -3.0];
        let mut s = Sampler::new(SamplingParams {
            temperature: 1.0,
            top_k: 1,
            ..Default::default()
        });
        assert!((0..50).all(|_| s.sample(&logits) == 1));
        // p(1) ≈ 0.50, p(2) ≈ 0.45: top_p 0.5 keeps {1} or {1, 2}, never 0 or 3.
        let mut s = Sampler::new(SamplingParams {
            temperature: 1.0,
            top_p: 0.6,
            seed: 3,
            ..Default::default()
        });
        let draws: Vec<u32> = (0..200).map(|_| s.sample(&logits)).collect();
        assert!(draws.iter().all(|&t| t == 1 || t == 2));
        assert!(draws.contains(&1) && draws.contains(&2));
    }
}

//! Per-generation metrics, with the definitions the server documents.

use std::time::Duration;

/// Wall time spent in each stage of the decode rounds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StageTimes {
    /// Drafter passes (context update, block pass, top-K).
    pub draft: Duration,
    /// Tree building (best-first heap or chain) and compilation.
    pub tree_build: Duration,
    /// Target verify passes.
    pub verify: Duration,
    /// The walk and the target's commit.
    pub commit: Duration,
}

/// What one generation did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metrics {
    /// Drafter block size `b` (bonus included).
    pub block_size: usize,
    /// Tree nodes per round, root excluded: the budget, `b - 1` for a chain, 0 for AR.
    pub tree_budget: usize,
    /// Prompt tokens prefilled.
    pub prompt_tokens: usize,
    /// Verify rounds after the prefill.
    pub decode_rounds: usize,
    /// Mean tokens committed per round, the root (previous bonus) included, so ≥ 1; the token
    /// produced by the prefill is not a round and does not count.
    pub mean_acceptance_length: f64,
    /// Tokens emitted (after stop-token and `max_new_tokens` truncation).
    pub output_tokens: usize,
    /// `output_tokens` / `decode_time`.
    pub tokens_per_second: f64,
    /// From the start of the call to the first token (the prefill's pick).
    pub time_to_first_token: Duration,
    /// From the first token to the end (the decode rounds).
    pub decode_time: Duration,
    /// Draft nodes proposed to the verifier, summed over rounds.
    pub draft_tokens: usize,
    /// Draft nodes accepted, summed over rounds (`Σ (τ - 1)`).
    pub accepted_draft_tokens: usize,
    /// `acceptance_histogram[τ]` = rounds that committed τ tokens.
    pub acceptance_histogram: Vec<u64>,
    /// Time per stage.
    pub stages: StageTimes,
}

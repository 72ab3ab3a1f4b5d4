//! Acceptance statistics of one generation.

use crate::Walk;

/// Acceptance statistics over the rounds of one generation.
///
/// τ is the number of tokens a round commits, root included (τ ≥ 1); the mean τ is the
/// `mean_acceptance_length` every generation reports.
///
/// ```
/// use ddtree::AcceptanceStats;
///
/// let mut stats = AcceptanceStats::new();
/// for tau in [3, 1, 5] {
///     stats.record(tau);
/// }
/// assert_eq!(stats.rounds(), 3);
/// assert_eq!(stats.accepted_tokens(), 9);
/// assert_eq!(stats.mean_acceptance_length(), 3.0);
/// assert_eq!(stats.tau_histogram(), &[0, 1, 0, 1, 0, 1]);
/// // Rounds that accepted a node at depth 0 (all), 1, 2, 3, 4.
/// assert_eq!(stats.depth_acceptance_counts(), &[3, 2, 2, 1, 1]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AcceptanceStats {
    rounds: u64,
    accepted_tokens: u64,
    tau_histogram: Vec<u64>,
    depth_counts: Vec<u64>,
}

impl AcceptanceStats {
    /// No rounds yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a round that committed `tau` tokens (root included).
    pub fn record(&mut self, tau: usize) {
        self.rounds += 1;
        self.accepted_tokens += tau as u64;
        if self.tau_histogram.len() <= tau {
            self.tau_histogram.resize(tau + 1, 0);
        }
        self.tau_histogram[tau] += 1;
        // The accepted path holds one node at each depth 0..tau.
        if self.depth_counts.len() < tau {
            self.depth_counts.resize(tau, 0);
        }
        for count in &mut self.depth_counts[..tau] {
            *count += 1;
        }
    }

    /// Records the round a [`Walk`] describes.
    pub fn record_walk(&mut self, walk: &Walk) {
        self.record(walk.acceptance_length());
    }

    /// Adds another generation's rounds to these.
    pub fn merge(&mut self, other: &AcceptanceStats) {
        self.rounds += other.rounds;
        self.accepted_tokens += other.accepted_tokens;
        add_counts(&mut self.tau_histogram, &other.tau_histogram);
        add_counts(&mut self.depth_counts, &other.depth_counts);
    }

    /// Rounds recorded.
    pub fn rounds(&self) -> u64 {
        self.rounds
    }

    /// Sum of τ over the rounds: tokens committed by the rounds, roots included.
    pub fn accepted_tokens(&self) -> u64 {
        self.accepted_tokens
    }

    /// Mean τ over the rounds; 0 when no round was recorded.
    pub fn mean_acceptance_length(&self) -> f64 {
        if self.rounds == 0 {
            return 0.0;
        }
        self.accepted_tokens as f64 / self.rounds as f64
    }

    /// `tau_histogram()[t]` = rounds with τ = `t`; as long as the largest τ seen, plus one.
    pub fn tau_histogram(&self) -> &[u64] {
        &self.tau_histogram
    }

    /// `depth_acceptance_counts()[d]` = rounds whose accepted path reached depth `d`
    /// (index 0, the root, counts every round); as long as the largest τ seen.
    pub fn depth_acceptance_counts(&self) -> &[u64] {
        &self.depth_counts
    }
}

fn add_counts(into: &mut Vec<u64>, from: &[u64]) {
    if into.len() < from.len() {
        into.resize(from.len(), 0);
    }
    for (sum, &count) in into.iter_mut().zip(from) {
        *sum += count;
    }
}

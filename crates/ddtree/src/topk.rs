//! The drafter's output as the tree builder reads it: per-depth top-K candidates.

use crate::TreeError;

/// A borrowed, row-major `[depths][k]` table of the drafter's top-K candidates: row `d - 1` holds
/// the candidates for depth `d` (`d = 1..=depths`), ranked by descending log-probability.
///
/// `depths` is `block_size - 1` (15 for the released drafters). The reference takes
/// `k = min(budget, vocab)`; the builder never looks past rank `budget - 1`, so a wider table
/// builds the same tree, while a narrower one limits each node's fan-out to `k`.
///
/// ```
/// use ddtree::DraftTopK;
///
/// // Two depths, two candidates each.
/// let tokens = [7, 9, 4, 5];
/// let log_probs = [-0.1, -2.5, -0.3, -1.4];
/// let draft = DraftTopK::new(2, 2, &tokens, &log_probs)?;
/// assert_eq!(draft.token(2, 1), Some(5));
/// assert_eq!(draft.log_prob(1, 0), Some(-0.1));
/// assert!(DraftTopK::new(2, 3, &tokens, &log_probs).is_err());
/// # Ok::<(), ddtree::TreeError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DraftTopK<'a> {
    depths: usize,
    k: usize,
    tokens: &'a [u32],
    log_probs: &'a [f32],
}

impl<'a> DraftTopK<'a> {
    /// Wraps `tokens` and `log_probs`, each `depths × k` long, row-major by depth.
    ///
    /// Any shape whose lengths agree is accepted, including `depths = 0` or `k = 0` (both build
    /// a root-only tree). Log-probs are taken as given: they should be sorted descending per row,
    /// but NaN, infinities and unsorted rows are handled exactly as the reference handles them.
    pub fn new(depths: usize, k: usize, tokens: &'a [u32], log_probs: &'a [f32]) -> Result<Self, TreeError> {
        let expected = depths
            .checked_mul(k)
            .ok_or(TreeError::TableTooLarge { depths, k })?;
        if tokens.len() != expected || log_probs.len() != expected {
            return Err(TreeError::TableShape {
                depths,
                k,
                expected,
                tokens: tokens.len(),
                log_probs: log_probs.len(),
            });
        }
        Ok(Self {
            depths,
            k,
            tokens,
            log_probs,
        })
    }

    /// Number of depths (`block_size - 1`).
    pub fn depths(&self) -> usize {
        self.depths
    }

    /// Candidates per depth.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Token of the candidate of rank `rank` (0-based) at depth `depth` (1-based), if in range.
    pub fn token(&self, depth: usize, rank: usize) -> Option<u32> {
        self.index(depth, rank).map(|i| self.tokens[i])
    }

    /// Log-prob of the candidate of rank `rank` (0-based) at depth `depth` (1-based), if in range.
    pub fn log_prob(&self, depth: usize, rank: usize) -> Option<f32> {
        self.index(depth, rank).map(|i| self.log_probs[i])
    }

    /// The whole token table, row-major.
    pub fn tokens(&self) -> &'a [u32] {
        self.tokens
    }

    /// The whole log-prob table, row-major.
    pub fn log_probs(&self) -> &'a [f32] {
        self.log_probs
    }

    fn index(&self, depth: usize, rank: usize) -> Option<usize> {
        (depth >= 1 && depth <= self.depths && rank < self.k).then(|| (depth - 1) * self.k + rank)
    }

    /// Unchecked-shape accessors for the builder, which keeps `depth`/`rank` in range.
    pub(crate) fn at(&self, depth: u32, rank: u32) -> (u32, f32) {
        let i = (depth as usize - 1) * self.k + rank as usize;
        (self.tokens[i], self.log_probs[i])
    }
}

//! The one error type of the crate.

/// What went wrong when building a tree or walking it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TreeError {
    /// The token and log-prob slices do not hold `depths × k` entries each.
    #[error(
        "a top-K table of {depths} depths × {k} candidates needs {expected} token ids and \
         {expected} log-probs, but got {tokens} token ids and {log_probs} log-probs"
    )]
    TableShape {
        /// Depths declared (`block_size - 1`).
        depths: usize,
        /// Candidates per depth declared.
        k: usize,
        /// `depths × k`.
        expected: usize,
        /// Length of the token slice given.
        tokens: usize,
        /// Length of the log-prob slice given.
        log_probs: usize,
    },
    /// `depths × k` does not fit in `usize`.
    #[error("a top-K table of {depths} depths × {k} candidates is too large to address")]
    TableTooLarge {
        /// Depths declared.
        depths: usize,
        /// Candidates per depth declared.
        k: usize,
    },
    /// The node budget is above [`MAX_BUDGET`](crate::MAX_BUDGET).
    #[error("tree budget {budget} is above the maximum of {max} nodes")]
    BudgetTooLarge {
        /// Budget asked for.
        budget: usize,
        /// Largest budget allowed.
        max: usize,
    },
    /// The posterior does not hold exactly one token per tree node.
    #[error("the posterior has {got} tokens, but the tree has {expected} nodes (root included)")]
    PosteriorLength {
        /// Length of the posterior given.
        got: usize,
        /// Nodes in the tree, root included.
        expected: usize,
    },
}

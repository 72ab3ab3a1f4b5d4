//! The engine's error type.

use thiserror::Error;

use crate::model::ModelError;

/// Everything a generation can fail with.
#[derive(Debug, Error)]
pub enum EngineError {
    /// The prompt has no tokens.
    #[error("the prompt is empty: at least one token is needed")]
    EmptyPrompt,
    /// The prompt leaves no room to generate.
    #[error("the prompt has {prompt} tokens but the maximum context is {max_context}: at most {} prompt tokens fit", max_context.saturating_sub(1))]
    PromptTooLong {
        /// Prompt tokens.
        prompt: usize,
        /// The target's maximum context.
        max_context: usize,
    },
    /// A prompt token is not a vocabulary id.
    #[error("token id {token} is outside the vocabulary of {vocab} tokens")]
    TokenOutOfVocab {
        /// The offending id.
        token: u32,
        /// The vocabulary size.
        vocab: usize,
    },
    /// The tree budget is above the builder's limit.
    #[error("tree budget {budget} is above the maximum of {max}")]
    BudgetTooLarge {
        /// Requested budget.
        budget: usize,
        /// The limit.
        max: usize,
    },
    /// A chain needs a drafter block of at least 2 tokens.
    #[error("the drafter's block size {0} is too small to draft a chain (at least 2)")]
    BlockTooSmall(usize),
    /// The target failed.
    #[error("target model: {0}")]
    Target(ModelError),
    /// The drafter failed.
    #[error("drafter: {0}")]
    Drafter(ModelError),
    /// The drafter's output or the posterior did not fit the tree.
    #[error(transparent)]
    Tree(#[from] ddtree::TreeError),
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, EngineError>;

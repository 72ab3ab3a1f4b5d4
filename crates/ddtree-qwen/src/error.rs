//! The error type of the target models.

use thiserror::Error;

/// Everything that can go wrong loading or running a target model.
#[derive(Debug, Error)]
pub enum Error {
    /// The checkpoint or its config could not be read.
    #[error(transparent)]
    Weights(#[from] ddtree_weights::Error),
    /// The config describes something this implementation does not support.
    #[error("unsupported model configuration: {0}")]
    Unsupported(String),
    /// A block would run past the preallocated cache.
    #[error(
        "context full: {committed} committed + {requested} new tokens exceed the maximum context of {capacity} tokens"
    )]
    ContextFull {
        /// Tokens already committed.
        committed: usize,
        /// Tokens in the rejected block.
        requested: usize,
        /// The cache capacity (`max_context`).
        capacity: usize,
    },
    /// A token id is not in the vocabulary.
    #[error("token id {token} is outside the vocabulary of {vocab} tokens")]
    TokenOutOfVocab {
        /// The offending id.
        token: u32,
        /// The vocabulary size.
        vocab: usize,
    },
    /// A block of zero tokens was given.
    #[error("a forward block needs at least one token")]
    EmptyBlock,
    /// A tree block's tokens, depths and ancestor rows disagree.
    #[error("invalid tree: {0}")]
    InvalidTree(String),
    /// `commit` was called with an invalid accepted path, or with no verified block pending.
    #[error("invalid commit: {0}")]
    InvalidCommit(String),
    /// A capture layer id is not a layer of the model.
    #[error("capture layer {layer} does not exist: the model has {layers} layers (ids 0..{layers})")]
    CaptureLayer {
        /// The requested id.
        layer: usize,
        /// The number of decoder layers.
        layers: usize,
    },
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, Error>;

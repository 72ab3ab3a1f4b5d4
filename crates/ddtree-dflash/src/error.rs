//! The drafter's error type.

use thiserror::Error;

/// Everything that can go wrong loading or running the drafter.
#[derive(Debug, Error)]
pub enum Error {
    /// The checkpoint or its config could not be read.
    #[error(transparent)]
    Weights(#[from] ddtree_weights::Error),
    /// The config describes something this implementation does not support.
    #[error("unsupported drafter configuration: {0}")]
    Unsupported(String),
    /// The target's embedding or LM head does not fit the drafter.
    #[error("the target does not fit this drafter: {0}")]
    TargetMismatch(String),
    /// Context plus block would run past the preallocated cache.
    #[error(
        "drafter context full: {context} context rows + {requested} new rows exceed the maximum of {capacity}"
    )]
    ContextFull {
        /// Context rows already cached.
        context: usize,
        /// Rows of the rejected call (new context + block).
        requested: usize,
        /// Cache capacity.
        capacity: usize,
    },
    /// A bonus token is not a vocabulary id.
    #[error("token id {token} is outside the vocabulary of {vocab} tokens")]
    TokenOutOfVocab {
        /// The offending id.
        token: u32,
        /// The vocabulary size.
        vocab: usize,
    },
    /// The context features have the wrong width.
    #[error(
        "context features are {got} wide; this drafter reads {expected} ({layers} target layers × hidden)"
    )]
    FeatureWidth {
        /// Width given.
        got: usize,
        /// Width expected.
        expected: usize,
        /// Number of target layers read.
        layers: usize,
    },
    /// The target returned no features (it was loaded without the drafter's capture layers).
    #[error(
        "the target returned no hidden features: load it with the drafter's target_layer_ids as capture layers"
    )]
    MissingFeatures,
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, Error>;

//! The two traits the loop is generic over (the target owns verify and commit, the drafter owns
//! drafting), and how a posterior token is picked from a row of logits.

use ddtree::DraftTree;

use crate::sampling::Sampler;

/// How the target turns a row of logits into a token.
#[derive(Debug)]
pub enum Picker<'a> {
    /// The argmax (first maximum on ties).
    Greedy,
    /// A draw from the tempered, truncated distribution.
    Sample(&'a mut Sampler),
}

impl Picker<'_> {
    /// Picks one token from a row of logits.
    pub fn pick(&mut self, logits: &[f32]) -> u32 {
        match self {
            Picker::Greedy => crate::sampling::argmax(logits),
            Picker::Sample(sampler) => sampler.sample(logits),
        }
    }

    /// Whether this is [`Picker::Greedy`] (a target may then take the argmax on its device).
    pub fn is_greedy(&self) -> bool {
        matches!(self, Picker::Greedy)
    }
}

/// Boxed error of a model, kept opaque to the engine.
pub type ModelError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The model whose output must be reproduced exactly.
///
/// The target keeps a cache of committed tokens. [`Target::verify`] appends a tree's rows after
/// it without committing them; [`Target::commit`] keeps the accepted rows.
pub trait Target {
    /// Hidden features of a block of rows, at the drafter's layers (an opaque handle).
    type Features;

    /// Vocabulary size.
    fn vocab_size(&self) -> usize;

    /// The most tokens the cache holds.
    fn max_context(&self) -> usize;

    /// Forgets everything (a new generation).
    fn reset(&mut self);

    /// Runs and commits `prompt`, picks the first new token from the last row, and returns the
    /// features of every prompt row.
    fn prefill(
        &mut self,
        prompt: &[u32],
        picker: &mut Picker<'_>,
    ) -> Result<(u32, Self::Features), ModelError>;

    /// Runs one forward over the tree's nodes (node `i` at position `committed + depth(i)`,
    /// seeing the committed prefix, its ancestors and itself); writes the posterior token of
    /// every node into `posterior` and returns every node's features. Nothing is committed.
    fn verify(
        &mut self,
        tree: &DraftTree,
        picker: &mut Picker<'_>,
        posterior: &mut Vec<u32>,
    ) -> Result<Self::Features, ModelError>;

    /// Commits the accepted nodes of the last verified tree (strictly increasing, root first).
    fn commit(&mut self, accepted: &[usize]) -> Result<(), ModelError>;
}

/// Per-depth top-K candidates of one draft pass: depth `d` (1-based) occupies row `d - 1` of
/// `tokens` and `log_probs`, `k` entries each, best first.
#[derive(Clone, Debug, Default)]
pub struct DraftOutput {
    /// Rows of candidate tokens.
    pub tokens: Vec<u32>,
    /// Rows of candidate log-probabilities, descending.
    pub log_probs: Vec<f32>,
    /// Number of depths filled (`block_size - 1`).
    pub depths: usize,
    /// Candidates per depth.
    pub k: usize,
}

/// The speculator: proposes per-depth distributions for the tokens after a bonus token.
pub trait Drafter<F> {
    /// Tokens per draft block, the bonus included (`b`); a pass proposes `b - 1` depths.
    fn block_size(&self) -> usize;

    /// Forgets the context (a new generation).
    fn reset(&mut self);

    /// Appends the target features of newly committed tokens (`rows` of `features`, in order) to
    /// the context, then drafts the block `[bonus, mask, …]` that follows the context, writing
    /// the top-`k` candidates of depths `1..block_size` into `out`.
    fn draft(
        &mut self,
        features: &F,
        rows: &[usize],
        bonus: u32,
        k: usize,
        out: &mut DraftOutput,
    ) -> Result<(), ModelError>;
}

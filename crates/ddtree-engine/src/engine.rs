//! The speculative loop: prefill, then rounds of draft → build → verify → walk → commit until a
//! stop token, the token limit, the context limit or the caller stops it.

use std::ops::ControlFlow;
use std::time::Instant;

use ddtree::{AcceptanceStats, DraftTopK, DraftTree, MAX_BUDGET, TreeBuilder, Walk};

use crate::error::{EngineError, Result};
use crate::metrics::{Metrics, StageTimes};
use crate::model::{DraftOutput, Drafter, Picker, Target};
use crate::sampling::{Sampler, SamplingParams};

/// How each round drafts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// No drafting: one target forward per token (a root-only tree).
    Autoregressive,
    /// Plain DFlash: the drafter's top-1 chain of `block_size - 1` tokens.
    Chain,
    /// DDTree: a best-first tree of `budget` nodes (budget 0 is autoregressive).
    Tree {
        /// Nodes excluding the root.
        budget: usize,
    },
}

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateParams {
    /// The most tokens to emit.
    pub max_new_tokens: usize,
    /// Tokens that end the generation (emitted, then nothing after them).
    pub stop_tokens: Vec<u32>,
    /// Drafting mode.
    pub mode: Mode,
    /// Greedy (temperature 0) or sampled decoding.
    pub sampling: SamplingParams,
    /// Record every round's tree and walk in [`Generation::trace`] (for tests and analysis).
    pub trace: bool,
}

impl Default for GenerateParams {
    fn default() -> Self {
        Self {
            max_new_tokens: 256,
            stop_tokens: Vec::new(),
            mode: Mode::Tree { budget: 64 },
            sampling: SamplingParams::default(),
            trace: false,
        }
    }
}

/// One round as it happened: the verified tree and the walk's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoundTrace {
    /// Committed tokens before the round (the root's position).
    pub start: usize,
    /// Node tokens, root first, in node order.
    pub tokens: Vec<u32>,
    /// Node depths (root 0).
    pub depths: Vec<u32>,
    /// Node parents (root -1).
    pub parents: Vec<i32>,
    /// The target's token at every node.
    pub posterior: Vec<u32>,
    /// Accepted node ids, root first.
    pub accepted: Vec<usize>,
    /// The next bonus token.
    pub bonus: u32,
}

/// What one round drafts, given the mode and the room left in the context.
#[derive(Clone, Copy, Debug)]
enum Plan {
    /// Verify the bonus token alone (autoregressive step).
    RootOnly,
    /// A top-1 chain of this many nodes.
    Chain(usize),
    /// A best-first tree of this many nodes.
    Tree(usize),
}

/// Why a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// A stop token was emitted (it is the last token).
    Stop,
    /// `max_new_tokens` were emitted, or the context is full.
    Length,
    /// The streaming callback asked to stop.
    Cancelled,
}

/// A finished generation.
#[derive(Clone, Debug)]
pub struct Generation {
    /// Emitted tokens, in order (a stop token included).
    pub tokens: Vec<u32>,
    /// Why it ended.
    pub finish_reason: FinishReason,
    /// Timings and acceptance.
    pub metrics: Metrics,
    /// Every round, when [`GenerateParams::trace`] was set.
    pub trace: Vec<RoundTrace>,
}

/// A target and a drafter, and the reusable scratch of the loop.
#[derive(Debug)]
pub struct Engine<T, D> {
    target: T,
    drafter: D,
    builder: TreeBuilder,
    tree: DraftTree,
    walk: Walk,
    draft: DraftOutput,
    posterior: Vec<u32>,
    accepted: Vec<usize>,
}

impl<T: Target, D: Drafter<T::Features>> Engine<T, D> {
    /// An engine over `target` and `drafter`.
    pub fn new(target: T, drafter: D) -> Self {
        Self {
            target,
            drafter,
            builder: TreeBuilder::new(),
            tree: DraftTree::new(),
            walk: Walk::new(),
            draft: DraftOutput::default(),
            posterior: Vec::new(),
            accepted: Vec::new(),
        }
    }

    /// The target.
    pub fn target(&self) -> &T {
        &self.target
    }

    /// The drafter.
    pub fn drafter(&self) -> &D {
        &self.drafter
    }

    /// Generates after `prompt`, calling `on_tokens` with every chunk of newly emitted tokens
    /// (return `ControlFlow::Break(())` to stop: the generation ends as
    /// [`FinishReason::Cancelled`] within the current round).
    pub fn generate(
        &mut self,
        prompt: &[u32],
        params: &GenerateParams,
        mut on_tokens: impl FnMut(&[u32]) -> ControlFlow<()>,
    ) -> Result<Generation> {
        self.check(prompt, params)?;
        let start = Instant::now();
        let block_size = self.drafter.block_size();
        let mut metrics = Metrics {
            block_size,
            tree_budget: match params.mode {
                Mode::Autoregressive => 0,
                Mode::Chain => block_size.saturating_sub(1),
                Mode::Tree { budget } => budget,
            },
            prompt_tokens: prompt.len(),
            ..Metrics::default()
        };
        let mut out = Vec::with_capacity(params.max_new_tokens);
        if params.max_new_tokens == 0 {
            return Ok(Generation {
                tokens: out,
                finish_reason: FinishReason::Length,
                metrics,
                trace: Vec::new(),
            });
        }
        let mut sampler = Sampler::new(params.sampling);
        let mut picker = if params.sampling.is_greedy() {
            Picker::Greedy
        } else {
            Picker::Sample(&mut sampler)
        };
        let mut stats = AcceptanceStats::new();
        let mut trace = Vec::new();
        let mut stages = StageTimes::default();

        self.target.reset();
        self.drafter.reset();
        let (mut bonus, mut features) = self
            .target
            .prefill(prompt, &mut picker)
            .map_err(EngineError::Target)?;
        metrics.time_to_first_token = start.elapsed();
        let decode_start = Instant::now();
        let mut committed = prompt.len();
        self.accepted.clear();
        self.accepted.extend(0..prompt.len());

        let mut finish = emit(&mut out, &[bonus], params, &mut on_tokens);
        while finish.is_none() {
            let room = self.target.max_context().saturating_sub(committed);
            if room == 0 {
                finish = Some(FinishReason::Length);
                break;
            }
            // The root takes one row; the tree gets what is left, at most its budget.
            let nodes = room - 1;
            let plan = match params.mode {
                _ if nodes == 0 => Plan::RootOnly,
                Mode::Autoregressive | Mode::Tree { budget: 0 } => Plan::RootOnly,
                Mode::Chain => Plan::Chain(block_size.saturating_sub(1).min(nodes)),
                Mode::Tree { budget } => Plan::Tree(budget.min(nodes)),
            };
            let t = Instant::now();
            let k = match plan {
                Plan::RootOnly => 0,
                Plan::Chain(_) => 1,
                Plan::Tree(budget) => budget.min(self.target.vocab_size()),
            };
            if k > 0 {
                self.drafter
                    .draft(&features, &self.accepted, bonus, k, &mut self.draft)
                    .map_err(EngineError::Drafter)?;
            }
            stages.draft += t.elapsed();

            let t = Instant::now();
            let top = match plan {
                Plan::RootOnly => DraftTopK::new(0, 0, &[], &[])?,
                _ => DraftTopK::new(
                    self.draft.depths,
                    self.draft.k,
                    &self.draft.tokens,
                    &self.draft.log_probs,
                )?,
            };
            match plan {
                Plan::RootOnly => self.builder.build(bonus, &top, 0, &mut self.tree)?,
                Plan::Chain(length) => self.builder.build_chain(bonus, &top, length, &mut self.tree)?,
                Plan::Tree(budget) => self.builder.build(bonus, &top, budget, &mut self.tree)?,
            }
            stages.tree_build += t.elapsed();

            let t = Instant::now();
            features = self
                .target
                .verify(&self.tree, &mut picker, &mut self.posterior)
                .map_err(EngineError::Target)?;
            stages.verify += t.elapsed();

            let t = Instant::now();
            self.tree.walk_into(&self.posterior, &mut self.walk)?;
            self.accepted.clear();
            self.accepted
                .extend(self.walk.accepted().iter().map(|&n| n as usize));
            self.target.commit(&self.accepted).map_err(EngineError::Target)?;
            stages.commit += t.elapsed();

            if params.trace {
                trace.push(RoundTrace {
                    start: committed,
                    tokens: self.tree.tokens().to_vec(),
                    depths: self.tree.depths().to_vec(),
                    parents: self.tree.parents().to_vec(),
                    posterior: self.posterior.clone(),
                    accepted: self.accepted.clone(),
                    bonus: self.walk.bonus_token(),
                });
            }
            stats.record_walk(&self.walk);
            metrics.draft_tokens += self.tree.num_draft_nodes();
            committed += self.accepted.len();
            bonus = self.walk.bonus_token();
            let mut fresh: Vec<u32> = self.accepted[1..]
                .iter()
                .map(|&n| self.tree.tokens()[n])
                .collect();
            fresh.push(bonus);
            finish = emit(&mut out, &fresh, params, &mut on_tokens);
        }

        metrics.decode_time = decode_start.elapsed();
        metrics.finish(&stats, out.len(), stages);
        Ok(Generation {
            tokens: out,
            finish_reason: finish.unwrap_or(FinishReason::Length),
            metrics,
            trace,
        })
    }

    fn check(&self, prompt: &[u32], params: &GenerateParams) -> Result<()> {
        if prompt.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        let max_context = self.target.max_context();
        if prompt.len() >= max_context {
            return Err(EngineError::PromptTooLong {
                prompt: prompt.len(),
                max_context,
            });
        }
        let vocab = self.target.vocab_size();
        if let Some(&token) = prompt.iter().find(|&&t| t as usize >= vocab) {
            return Err(EngineError::TokenOutOfVocab { token, vocab });
        }
        if let Mode::Tree { budget } = params.mode
            && budget > MAX_BUDGET
        {
            return Err(EngineError::BudgetTooLarge {
                budget,
                max: MAX_BUDGET,
            });
        }
        if matches!(params.mode, Mode::Chain) && self.drafter.block_size() < 2 {
            return Err(EngineError::BlockTooSmall(self.drafter.block_size()));
        }
        Ok(())
    }
}

/// Appends `fresh` to `out` up to a stop token or the token limit, reports the appended chunk,
/// and says whether (and why) the generation is over.
fn emit(
    out: &mut Vec<u32>,
    fresh: &[u32],
    params: &GenerateParams,
    on_tokens: &mut impl FnMut(&[u32]) -> ControlFlow<()>,
) -> Option<FinishReason> {
    let begin = out.len();
    let mut finish = None;
    for &token in fresh {
        out.push(token);
        if params.stop_tokens.contains(&token) {
            finish = Some(FinishReason::Stop);
            break;
        }
        if out.len() >= params.max_new_tokens {
            finish = Some(FinishReason::Length);
            break;
        }
    }
    match on_tokens(&out[begin..]) {
        ControlFlow::Break(()) if finish.is_none() => Some(FinishReason::Cancelled),
        _ => finish,
    }
}

impl Metrics {
    fn finish(&mut self, stats: &AcceptanceStats, output_tokens: usize, stages: StageTimes) {
        self.decode_rounds = stats.rounds() as usize;
        self.mean_acceptance_length = stats.mean_acceptance_length();
        self.accepted_draft_tokens = (stats.accepted_tokens() - stats.rounds()) as usize;
        self.acceptance_histogram = stats.tau_histogram().to_vec();
        self.output_tokens = output_tokens;
        let seconds = self.decode_time.as_secs_f64();
        self.tokens_per_second = if seconds > 0.0 {
            output_tokens as f64 / seconds
        } else {
            0.0
        };
        self.stages = stages;
    }
}

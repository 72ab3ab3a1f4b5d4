//! The DDTree speculative decoding loop, generic over a [`Target`] and a [`Drafter`] and free of
//! tensors. One generation:
//!
//! 1. **prefill** the prompt; pick the first token (the *bonus*);
//! 2. each round: **draft** the block after the bonus; **build** the tree (best-first heap under
//!    the budget, a top-1 chain, or the root alone); **verify** it in one target pass; **walk**
//!    the posterior from the root; **commit** the accepted path; emit its tokens and the new
//!    bonus;
//! 3. stop at a stop token, `max_new_tokens`, a full context, or when the caller says so.
//!
//! The three modes are the same loop: [`Mode::Autoregressive`] verifies a root-only tree,
//! [`Mode::Chain`] a top-1 chain (plain DFlash), [`Mode::Tree`] a DDTree. Greedy output is the
//! target's own in every mode; sampled output draws every node from the target's distribution.

mod engine;
mod error;
mod metrics;
mod model;
mod sampling;

pub use engine::{Engine, FinishReason, GenerateParams, Generation, Mode, RoundTrace};
pub use error::{EngineError, Result};
pub use metrics::{Metrics, StageTimes};
pub use model::{DraftOutput, Drafter, ModelError, Picker, Target};
pub use sampling::{Sampler, SamplingParams, argmax};

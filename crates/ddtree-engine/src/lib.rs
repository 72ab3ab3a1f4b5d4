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
//!
//! ```
//! use std::ops::ControlFlow;
//! use burn_ndarray::NdArray;
//! use ddtree_dflash::{DFlash, TargetHead};
//! use ddtree_engine::{Engine, GenerateParams, Mode};
//! use ddtree_qwen::{LoadOptions, Qwen3};
//!
//! let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures");
//! let device = Default::default();
//! let options = LoadOptions { max_context: Some(256), capture_layers: vec![0, 1] };
//! let target = Qwen3::<NdArray<f32>>::load_dir(format!("{fixtures}/qwen3-tiny-tied"), options, &device)?;
//! let head = TargetHead { embed_tokens: target.embed_tokens_weight(), lm_head: target.lm_head_weight() };
//! let drafter = DFlash::load_dir(format!("{fixtures}/dflash-tiny"), head, target.max_context(), &device)?;
//! let mut engine = Engine::new(target, drafter);
//!
//! let params = GenerateParams { max_new_tokens: 16, mode: Mode::Tree { budget: 16 }, ..Default::default() };
//! let mut streamed = Vec::new();
//! let generation = engine.generate(&[1, 2, 3], &params, |chunk| {
//!     streamed.extend_from_slice(chunk);
//!     ControlFlow::Continue(())
//! })?;
//! assert_eq!(generation.tokens, streamed);
//! assert!(generation.metrics.mean_acceptance_length >= 1.0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

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

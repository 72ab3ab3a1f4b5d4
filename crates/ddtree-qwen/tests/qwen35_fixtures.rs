//! The Qwen3.5/3.6 hybrid against Hugging Face transformers: logits, hidden states, cached decode,
//! per-node tree logits and greedy continuations recorded by `tools/make_qwen35_fixtures.py`
//! (f32, relative error ≤ 1e-4), on three checkpoints: the multimodal `model.language_model.`
//! layout (tied), the `model.` layout (untied, sharded) and Qwen3-Next's fused GDN projections; on
//! burn's CPU backend.

mod common;

type B = burn_ndarray::NdArray<f32>;

include!("qwen35_fixtures/checks.rs");

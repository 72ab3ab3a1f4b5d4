//! Qwen3 against Hugging Face transformers: logits, hidden states, decode, tree verify and greedy
//! continuations recorded by `tools/make_qwen3_fixtures.py` (f32, relative error ≤ 1e-4), on
//! burn's CPU backend.

mod common;

type B = burn_ndarray::NdArray<f32>;

include!("qwen3_fixtures/checks.rs");

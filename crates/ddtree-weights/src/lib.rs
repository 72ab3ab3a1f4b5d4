//! Loading Qwen3, Qwen3.5/3.6 and DFlash checkpoints.
//!
//! * [`Checkpoint`]: memory-mapped safetensors — `model.safetensors`, or
//!   `model.safetensors.index.json` plus shards, or any `*.safetensors` — with normalised names
//!   (`model.` / `model.language_model.` stripped; vision tower and MTP head dropped), shape
//!   checks, and conversion from F32/F16/BF16 to `f32` or straight into a burn tensor.
//! * Typed configs: [`Qwen3Config`], [`Qwen35Config`] (hybrid Gated-DeltaNet models, including
//!   the multimodal `text_config` nesting), [`DFlashConfig`] (drafters, `dflash_config` keys with
//!   top-level fallback), [`GenerationConfig`]; RoPE in both the `rope_theta` + `rope_scaling`
//!   and the transformers-5 `rope_parameters` layouts ([`RopeParameters`]).
//! * [`TokenizerFiles`]: `tokenizer.json`, the chat template and the special tokens.
//! * [`TensorSource`]: what the model loaders read tensors from — a [`Checkpoint`], or
//!   [`RandomWeights`] made on the device (benchmarks and tests of shapes).
//!
//! Every failure is an [`Error`] whose message names the file and, where relevant, the tensor or
//! config key. No input file can make this crate panic; the safetensors header parser and the
//! config parsers are fuzzed (`fuzz/fuzz_targets/safetensors_header.rs`, `config.rs`).
//!
//! ```
//! use ddtree_weights::{Checkpoint, Error};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = std::env::temp_dir().join(format!("ddtree-weights-libdoc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir)?;
//! // Write a tiny BF16 checkpoint by hand (safetensors: u64 header length, JSON header, data).
//! let header = br#"{"model.language_model.embed_tokens.weight":
//!                    {"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}}"#;
//! let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
//! bytes.extend_from_slice(header);
//! for v in [1.0f32, 2.0, -0.5, 0.25] {
//!     bytes.extend_from_slice(&half::bf16::from_f32(v).to_bits().to_le_bytes());
//! }
//! std::fs::write(dir.join("model.safetensors"), &bytes)?;
//!
//! let ckpt = Checkpoint::open(&dir)?;
//! assert!(ckpt.contains("embed_tokens.weight"));
//! assert_eq!(ckpt.to_f32("embed_tokens.weight", &[2, 2])?, [1.0, 2.0, -0.5, 0.25]);
//! match ckpt.to_f32("lm_head.weight", &[2, 2]) {
//!     Err(Error::MissingTensor { tensor, .. }) => assert_eq!(tensor, "lm_head.weight"),
//!     other => panic!("expected a missing-tensor error, got {other:?}"),
//! }
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

mod checkpoint;
mod config;
mod convert;
mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod safetensors;
mod source;
mod tokenizer;

pub use checkpoint::{Checkpoint, normalise_name};
pub use config::{
    DFlashConfig, DraftLayerType, GdnProjectionLayout, GenerationConfig, LayerType, MoeConfig, Qwen3Config,
    Qwen35Config, RopeKind, RopeParameters,
};
pub use error::{Error, Result};
pub use safetensors::{Dtype, TensorInfo};
pub use source::{RandomWeights, TensorSource};
pub use tokenizer::{SpecialToken, TokenizerConfig, TokenizerFiles};

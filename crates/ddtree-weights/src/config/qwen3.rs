//! `config.json` of Qwen3 dense models (`model_type: "qwen3"`).

use std::path::Path;

use serde::Serialize;

use super::common::{CommonDefaults, check_model_type, parse_common};
use super::rope::{RopeDefaults, RopeParameters};
use super::{Source, parse_json_object, read_json_object};
use crate::error::Result;

/// A Qwen3 dense model's configuration.
///
/// Missing optional keys take transformers' `Qwen3Config` defaults, except `head_dim`, which
/// defaults to `hidden_size / num_attention_heads` (real Qwen3 configs always carry it).
///
/// ```
/// use ddtree_weights::{Qwen3Config, RopeKind};
/// let cfg = Qwen3Config::from_json_str(
///     r#"{"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 4096,
///         "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
///         "num_key_value_heads": 8, "head_dim": 128, "rope_theta": 1000000}"#,
///     "config.json",
/// )?;
/// assert_eq!(cfg.rope.theta, 1e6);
/// assert_eq!(cfg.rope.kind, RopeKind::Default);
/// # Ok::<(), ddtree_weights::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Qwen3Config {
    /// `model_type` as written (`qwen3`), if present.
    pub model_type: Option<String>,
    /// Vocabulary size (rows of `embed_tokens`).
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// MLP inner width.
    pub intermediate_size: usize,
    /// Number of decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (default: `num_attention_heads`).
    pub num_key_value_heads: usize,
    /// Per-head dim.
    pub head_dim: usize,
    /// MLP activation (default `silu`).
    pub hidden_act: String,
    /// RMSNorm epsilon (default 1e-6).
    pub rms_norm_eps: f64,
    /// Context length the model was configured for (default 32768).
    pub max_position_embeddings: usize,
    /// Whether `lm_head` shares `embed_tokens` (default false).
    pub tie_word_embeddings: bool,
    /// Bias on q/k/v/o projections (default false).
    pub attention_bias: bool,
    /// RoPE (default θ 10000, full rotary).
    pub rope: RopeParameters,
    /// BOS token id(s), empty when absent.
    pub bos_token_id: Vec<u32>,
    /// EOS token id(s), empty when absent.
    pub eos_token_id: Vec<u32>,
    /// Padding token id.
    pub pad_token_id: Option<u32>,
    /// Sliding window, only when `use_sliding_window` is true (as transformers resolves it).
    pub sliding_window: Option<usize>,
    /// `dtype` / `torch_dtype` as written (e.g. `bfloat16`).
    pub dtype: Option<String>,
}

impl Qwen3Config {
    /// Reads a `config.json`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        Self::from_map(&read_json_object(path)?, path)
    }

    /// Parses JSON text; `origin` names the source in errors.
    pub fn from_json_str(json: &str, origin: impl AsRef<Path>) -> Result<Self> {
        let path = origin.as_ref();
        Self::from_map(&parse_json_object(json, path)?, path)
    }

    fn from_map(map: &serde_json::Map<String, serde_json::Value>, path: &Path) -> Result<Self> {
        let src = Source::new(path, map);
        let model_type = check_model_type(&src, &["qwen3"])?;
        let c = parse_common(
            &src,
            CommonDefaults {
                head_dim: None,
                max_position_embeddings: 32768,
                rope: RopeDefaults {
                    theta: 10000.0,
                    partial_rotary_factor: 1.0,
                },
            },
        )?;
        let sliding_window = if src.opt_bool("use_sliding_window")?.unwrap_or(false) {
            // transformers' Qwen3Config default window.
            Some(src.opt_usize("sliding_window")?.unwrap_or(4096))
        } else {
            None
        };
        Ok(Qwen3Config {
            model_type,
            vocab_size: c.vocab_size,
            hidden_size: c.hidden_size,
            intermediate_size: c.intermediate_size,
            num_hidden_layers: c.num_hidden_layers,
            num_attention_heads: c.num_attention_heads,
            num_key_value_heads: c.num_key_value_heads,
            head_dim: c.head_dim,
            hidden_act: c.hidden_act,
            rms_norm_eps: c.rms_norm_eps,
            max_position_embeddings: c.max_position_embeddings,
            tie_word_embeddings: c.tie_word_embeddings,
            attention_bias: c.attention_bias,
            rope: c.rope,
            bos_token_id: c.bos_token_id,
            eos_token_id: c.eos_token_id,
            pad_token_id: c.pad_token_id,
            sliding_window,
            dtype: c.dtype,
        })
    }
}

//! `config.json` of the hybrid Gated-DeltaNet models: Qwen3.5 / Qwen3.6 (`qwen3_5`, with the text
//! model under `text_config`, or flat `qwen3_5_text`) and Qwen3-Next (`qwen3_next`, flat).

use std::path::Path;

use serde::Serialize;

use super::common::{CommonDefaults, check_model_type, parse_common};
use super::rope::{RopeDefaults, RopeParameters};
use super::{Source, parse_json_object, read_json_object};
use crate::error::Result;

/// Kind of token mixer in one decoder layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum LayerType {
    /// Gated DeltaNet (`linear_attention`; legacy spelling `mamba`).
    LinearAttention,
    /// Gated full attention (`full_attention`; legacy spelling `attention`).
    FullAttention,
}

/// How the GDN input projections are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum GdnProjectionLayout {
    /// Qwen3.5 / 3.6: `in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a`, each contiguous.
    Separate,
    /// Qwen3-Next: `in_proj_qkvz` and `in_proj_ba`, grouped per key head.
    FusedGrouped,
}

/// Mixture-of-experts MLP settings (Qwen3-Next), present when `num_experts` > 0.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MoeConfig {
    /// Routed experts.
    pub num_experts: usize,
    /// Experts per token.
    pub num_experts_per_tok: usize,
    /// Inner width of one expert.
    pub moe_intermediate_size: usize,
    /// Inner width of the shared expert (0 = none).
    pub shared_expert_intermediate_size: usize,
    /// Whether top-k router probabilities are renormalised.
    pub norm_topk_prob: bool,
    /// Every `decoder_sparse_step`-th layer is MoE.
    pub decoder_sparse_step: usize,
    /// Layers that use a dense MLP anyway.
    pub mlp_only_layers: Vec<usize>,
}

/// A Qwen3.5 / Qwen3.6 / Qwen3-Next text model's configuration.
///
/// Keys are read from `text_config` when the file has one, falling back to the top level (the
/// multimodal wrapper keeps e.g. `tie_word_embeddings` there). Missing optional keys take the
/// defaults of transformers' `Qwen3_5TextConfig` / `Qwen3NextConfig`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Qwen35Config {
    /// The text model's `model_type` (`qwen3_5_text`, `qwen3_5` or `qwen3_next`).
    pub model_type: String,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// Dense MLP inner width.
    pub intermediate_size: usize,
    /// Number of decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads of the full-attention layers.
    pub num_attention_heads: usize,
    /// Key/value heads of the full-attention layers.
    pub num_key_value_heads: usize,
    /// Per-head dim of the full-attention layers (default 256).
    pub head_dim: usize,
    /// MLP activation (default `silu`).
    pub hidden_act: String,
    /// RMSNorm epsilon (default 1e-6).
    pub rms_norm_eps: f64,
    /// Context length (default 32768).
    pub max_position_embeddings: usize,
    /// Whether `lm_head` shares `embed_tokens` (default false).
    pub tie_word_embeddings: bool,
    /// Bias on attention projections (default false).
    pub attention_bias: bool,
    /// RoPE of the full-attention layers (partial: default `partial_rotary_factor` 0.25).
    pub rope: RopeParameters,
    /// BOS token id(s).
    pub bos_token_id: Vec<u32>,
    /// EOS token id(s).
    pub eos_token_id: Vec<u32>,
    /// Padding token id.
    pub pad_token_id: Option<u32>,
    /// `dtype` / `torch_dtype` as written.
    pub dtype: Option<String>,
    /// GDN causal conv kernel size (default 4).
    pub linear_conv_kernel_dim: usize,
    /// GDN key head dim (default 128).
    pub linear_key_head_dim: usize,
    /// GDN value head dim (default 128).
    pub linear_value_head_dim: usize,
    /// GDN key heads (default 16).
    pub linear_num_key_heads: usize,
    /// GDN value heads (default 32); a multiple of the key heads.
    pub linear_num_value_heads: usize,
    /// Sigmoid output gate on attention (`attn_output_gate`, default true).
    pub attn_output_gate: bool,
    /// Mixer of each layer, `num_hidden_layers` long.
    pub layer_types: Vec<LayerType>,
    /// How GDN projections are stored.
    pub gdn_layout: GdnProjectionLayout,
    /// MoE settings, when the model has experts.
    pub moe: Option<MoeConfig>,
}

const MODEL_TYPES: [&str; 3] = ["qwen3_5", "qwen3_5_text", "qwen3_next"];

impl Qwen35Config {
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

    /// Channels of the GDN conv: `2·Hk·Dk + Hv·Dv` (the `in_proj_qkv` output width).
    pub fn linear_conv_channels(&self) -> usize {
        2 * self.linear_num_key_heads * self.linear_key_head_dim
            + self.linear_num_value_heads * self.linear_value_head_dim
    }

    /// Indices of the full-attention layers.
    pub fn full_attention_layers(&self) -> impl Iterator<Item = usize> + '_ {
        self.layer_types
            .iter()
            .enumerate()
            .filter(|(_, t)| **t == LayerType::FullAttention)
            .map(|(i, _)| i)
    }

    fn from_map(map: &serde_json::Map<String, serde_json::Value>, path: &Path) -> Result<Self> {
        let top = Source::new(path, map);
        let src = match top.sub("text_config")? {
            Some(text) => text.then(&top),
            None => top.clone(),
        };
        let model_type = check_model_type(&src, &MODEL_TYPES)?.ok_or_else(|| src.missing("model_type"))?;
        // The outer wrapper's model_type counts too (`qwen3_5` around `qwen3_5_text`).
        let outer_type = check_model_type(&top, &MODEL_TYPES)?;
        let gdn_layout = if model_type == "qwen3_next" || outer_type.as_deref() == Some("qwen3_next") {
            GdnProjectionLayout::FusedGrouped
        } else {
            GdnProjectionLayout::Separate
        };
        let c = parse_common(
            &src,
            CommonDefaults {
                head_dim: Some(256),
                max_position_embeddings: 32768,
                rope: RopeDefaults {
                    theta: 10000.0,
                    partial_rotary_factor: 0.25,
                },
            },
        )?;
        let dim = |key: &str, default: usize| -> Result<usize> {
            match src.opt_usize(key)?.unwrap_or(default) {
                0 => Err(src.invalid(src.key_name(key), "must be at least 1")),
                v => Ok(v),
            }
        };
        let linear_num_key_heads = dim("linear_num_key_heads", 16)?;
        let linear_num_value_heads = dim("linear_num_value_heads", 32)?;
        if linear_num_value_heads % linear_num_key_heads != 0 {
            return Err(src.invalid(
                src.key_name("linear_num_value_heads"),
                format!(
                    "linear_num_value_heads ({linear_num_value_heads}) must be a multiple of \
                     linear_num_key_heads ({linear_num_key_heads})"
                ),
            ));
        }
        Ok(Qwen35Config {
            linear_conv_kernel_dim: dim("linear_conv_kernel_dim", 4)?,
            linear_key_head_dim: dim("linear_key_head_dim", 128)?,
            linear_value_head_dim: dim("linear_value_head_dim", 128)?,
            linear_num_key_heads,
            linear_num_value_heads,
            attn_output_gate: src.opt_bool("attn_output_gate")?.unwrap_or(true),
            layer_types: layer_types(&src, c.num_hidden_layers)?,
            gdn_layout,
            moe: moe(&src)?,
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
            dtype: c.dtype,
        })
    }
}

/// `layer_types` if given, else derived from `full_attention_interval` (default 4): layer `i`
/// is full attention iff `(i + 1) % interval == 0`, as transformers does.
fn layer_types(src: &Source<'_>, num_layers: usize) -> Result<Vec<LayerType>> {
    if let Some((names, key)) = src.opt_str_list("layer_types")? {
        if names.len() != num_layers {
            return Err(src.invalid(
                key,
                format!(
                    "has {} entries but num_hidden_layers is {num_layers}",
                    names.len()
                ),
            ));
        }
        return names
            .iter()
            .enumerate()
            .map(|(i, n)| match *n {
                "linear_attention" | "mamba" => Ok(LayerType::LinearAttention),
                "full_attention" | "attention" => Ok(LayerType::FullAttention),
                other => Err(src.invalid(
                    format!("{key}[{i}]"),
                    format!("unknown layer type {other:?}; expected linear_attention or full_attention"),
                )),
            })
            .collect();
    }
    let interval = src.opt_usize("full_attention_interval")?.unwrap_or(4);
    if interval == 0 {
        return Err(src.invalid(src.key_name("full_attention_interval"), "must be at least 1"));
    }
    Ok((0..num_layers)
        .map(|i| {
            if (i + 1) % interval == 0 {
                LayerType::FullAttention
            } else {
                LayerType::LinearAttention
            }
        })
        .collect())
}

fn moe(src: &Source<'_>) -> Result<Option<MoeConfig>> {
    let num_experts = src.opt_usize("num_experts")?.unwrap_or(0);
    if num_experts == 0 {
        return Ok(None);
    }
    let num_experts_per_tok = src.opt_usize("num_experts_per_tok")?.unwrap_or(10);
    if num_experts_per_tok == 0 || num_experts_per_tok > num_experts {
        return Err(src.invalid(
            src.key_name("num_experts_per_tok"),
            format!("must be between 1 and num_experts ({num_experts}), got {num_experts_per_tok}"),
        ));
    }
    let decoder_sparse_step = src.opt_usize("decoder_sparse_step")?.unwrap_or(1);
    if decoder_sparse_step == 0 {
        return Err(src.invalid(src.key_name("decoder_sparse_step"), "must be at least 1"));
    }
    Ok(Some(MoeConfig {
        num_experts,
        num_experts_per_tok,
        moe_intermediate_size: src.opt_usize("moe_intermediate_size")?.unwrap_or(512),
        shared_expert_intermediate_size: src.opt_usize("shared_expert_intermediate_size")?.unwrap_or(512),
        norm_topk_prob: src.opt_bool("norm_topk_prob")?.unwrap_or(true),
        decoder_sparse_step,
        mlp_only_layers: src.opt_usize_list("mlp_only_layers")?.unwrap_or_default(),
    }))
}

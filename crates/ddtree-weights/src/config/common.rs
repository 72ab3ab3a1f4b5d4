//! The decoder fields shared by Qwen3, Qwen3.5/3.6 text models and DFlash drafters.

use super::Source;
use super::rope::{RopeDefaults, RopeParameters, parse_rope};
use crate::error::Result;

/// No released model comes near this; the bound keeps a hostile `num_hidden_layers` from
/// turning into a huge `layer_types` allocation.
pub(crate) const MAX_LAYERS: usize = 1 << 12;

pub(crate) struct Common {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub hidden_act: String,
    pub rms_norm_eps: f64,
    pub max_position_embeddings: usize,
    pub tie_word_embeddings: bool,
    pub attention_bias: bool,
    pub rope: RopeParameters,
    pub bos_token_id: Vec<u32>,
    pub eos_token_id: Vec<u32>,
    pub pad_token_id: Option<u32>,
    pub dtype: Option<String>,
}

pub(crate) struct CommonDefaults {
    /// `None`: `hidden_size / num_attention_heads`.
    pub head_dim: Option<usize>,
    pub max_position_embeddings: usize,
    pub rope: RopeDefaults,
}

pub(crate) fn parse_common(src: &Source<'_>, d: CommonDefaults) -> Result<Common> {
    let positive = |key: &str, v: usize| {
        if v == 0 {
            Err(src.invalid(src.key_name(key), "must be at least 1"))
        } else {
            Ok(v)
        }
    };
    let req = |key: &str| -> Result<usize> { positive(key, src.req_usize(key)?) };
    let vocab_size = req("vocab_size")?;
    let hidden_size = req("hidden_size")?;
    let intermediate_size = req("intermediate_size")?;
    let num_hidden_layers = req("num_hidden_layers")?;
    if num_hidden_layers > MAX_LAYERS {
        return Err(src.invalid(
            src.key_name("num_hidden_layers"),
            format!("{num_hidden_layers} layers is more than the supported {MAX_LAYERS}"),
        ));
    }
    let num_attention_heads = req("num_attention_heads")?;
    let num_key_value_heads = positive(
        "num_key_value_heads",
        src.opt_usize("num_key_value_heads")?
            .unwrap_or(num_attention_heads),
    )?;
    if num_attention_heads % num_key_value_heads != 0 {
        return Err(src.invalid(
            src.key_name("num_key_value_heads"),
            format!(
                "num_attention_heads ({num_attention_heads}) must be a multiple of \
                 num_key_value_heads ({num_key_value_heads})"
            ),
        ));
    }
    let head_dim = match (src.opt_usize("head_dim")?, d.head_dim) {
        (Some(h), _) | (None, Some(h)) => positive("head_dim", h)?,
        (None, None) => {
            if hidden_size % num_attention_heads != 0 {
                return Err(src.invalid(
                    src.key_name("num_attention_heads"),
                    format!(
                        "head_dim is absent and hidden_size ({hidden_size}) is not a multiple \
                         of num_attention_heads ({num_attention_heads})"
                    ),
                ));
            }
            hidden_size / num_attention_heads
        }
    };
    let rms_norm_eps = src.opt_f64("rms_norm_eps")?.unwrap_or(1e-6);
    if !(rms_norm_eps.is_finite() && rms_norm_eps >= 0.0) {
        return Err(src.invalid(
            src.key_name("rms_norm_eps"),
            format!("must be a finite non-negative number, got {rms_norm_eps}"),
        ));
    }
    let max_position_embeddings = positive(
        "max_position_embeddings",
        src.opt_usize("max_position_embeddings")?
            .unwrap_or(d.max_position_embeddings),
    )?;
    let rope = parse_rope(src, d.rope, max_position_embeddings)?;
    let rotary = rope.rotary_dim(head_dim);
    if rotary < 2 || rotary % 2 != 0 {
        return Err(src.invalid(
            src.key_name("partial_rotary_factor"),
            format!(
                "head_dim {head_dim} × partial_rotary_factor {} gives {rotary} rotary dims; \
                 it must be even and at least 2",
                rope.partial_rotary_factor
            ),
        ));
    }
    let dtype = match src.opt_str("dtype")? {
        Some(s) => Some(s),
        None => src.opt_str("torch_dtype")?,
    };
    Ok(Common {
        vocab_size,
        hidden_size,
        intermediate_size,
        num_hidden_layers,
        num_attention_heads,
        num_key_value_heads,
        head_dim,
        hidden_act: src.opt_str("hidden_act")?.unwrap_or("silu").to_string(),
        rms_norm_eps,
        max_position_embeddings,
        tie_word_embeddings: src.opt_bool("tie_word_embeddings")?.unwrap_or(false),
        attention_bias: src.opt_bool("attention_bias")?.unwrap_or(false),
        rope,
        bos_token_id: src.token_ids("bos_token_id")?,
        eos_token_id: src.token_ids("eos_token_id")?,
        pad_token_id: src.opt_u32("pad_token_id")?,
        dtype: dtype.map(str::to_string),
    })
}

/// Checks a model_type against the accepted ones; absent is accepted.
pub(crate) fn check_model_type(src: &Source<'_>, allowed: &[&str]) -> Result<Option<String>> {
    let Some(t) = src.opt_str("model_type")? else {
        return Ok(None);
    };
    if allowed.contains(&t) {
        Ok(Some(t.to_string()))
    } else {
        Err(src.invalid(
            src.get("model_type")
                .map_or_else(|| src.key_name("model_type"), |(_, k)| k),
            format!("model_type {t:?} is not one of {allowed:?}"),
        ))
    }
}

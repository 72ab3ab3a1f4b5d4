//! RoPE parameters in both config layouts.
//!
//! * transformers ≥ 5: `rope_parameters: {rope_type, rope_theta, partial_rotary_factor, factor, …}`
//! * before: top-level `rope_theta` (+ `partial_rotary_factor`) and an optional `rope_scaling`
//!   dict whose type is under `rope_type` or the older `type`.

use serde::Serialize;

use super::Source;
use crate::error::Result;

/// Rotary position embedding parameters.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RopeParameters {
    /// Base θ (`rope_theta`).
    pub theta: f64,
    /// Scaling variant.
    pub kind: RopeKind,
    /// Fraction of each head's dims that rotate (`partial_rotary_factor`; 1.0 = all).
    pub partial_rotary_factor: f64,
    /// M-RoPE sections of the multimodal Qwen3.5 configs. For text-only input all position
    /// components are equal and M-RoPE reduces to ordinary 1-D RoPE.
    pub mrope_section: Option<Vec<usize>>,
    /// Whether the M-RoPE sections are interleaved (`mrope_interleaved`).
    pub mrope_interleaved: bool,
}

impl RopeParameters {
    /// Number of rotated dims per head: `head_dim × partial_rotary_factor`, truncated as
    /// transformers does (`int(head_dim * factor)`).
    pub fn rotary_dim(&self, head_dim: usize) -> usize {
        (head_dim as f64 * self.partial_rotary_factor) as usize
    }
}

/// The RoPE scaling variants of transformers' `ROPE_INIT_FUNCTIONS` that Qwen models use.
///
/// `original_max_position_embeddings` is resolved at parse time: when the config omits it,
/// transformers falls back to `max_position_embeddings`, and so does this parser.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum RopeKind {
    /// Plain RoPE (`default`, and `mrope` for text-only input).
    Default,
    /// Positions divided by `factor`.
    Linear {
        /// Scaling factor.
        factor: f64,
    },
    /// Dynamic NTK scaling.
    Dynamic {
        /// Scaling factor.
        factor: f64,
        /// Pre-training context length.
        original_max_position_embeddings: usize,
    },
    /// YaRN.
    Yarn {
        /// Scaling factor.
        factor: f64,
        /// Pre-training context length.
        original_max_position_embeddings: usize,
        /// High-frequency boundary in rotations (default 32).
        beta_fast: f64,
        /// Low-frequency boundary in rotations (default 1).
        beta_slow: f64,
        /// Explicit attention (cos/sin) scale; `None` means the YaRN default formula.
        attention_factor: Option<f64>,
        /// DeepSeek-style `mscale`, if present.
        mscale: Option<f64>,
        /// DeepSeek-style `mscale_all_dim`, if present.
        mscale_all_dim: Option<f64>,
        /// Whether the correction range is truncated to integers (transformers default true).
        truncate: Option<bool>,
    },
    /// Llama 3.1 frequency-band scaling.
    Llama3 {
        /// Scaling factor.
        factor: f64,
        /// Low-frequency factor.
        low_freq_factor: f64,
        /// High-frequency factor.
        high_freq_factor: f64,
        /// Pre-training context length.
        original_max_position_embeddings: usize,
    },
}

/// Per-model defaults for keys a config may omit.
pub(crate) struct RopeDefaults {
    pub(crate) theta: f64,
    pub(crate) partial_rotary_factor: f64,
}

/// Parses RoPE from `src` (whose first layer is the model's own config object).
pub(crate) fn parse_rope(
    src: &Source<'_>,
    defaults: RopeDefaults,
    max_position_embeddings: usize,
) -> Result<RopeParameters> {
    // Where the scaling keys live, if anywhere.
    let params: Option<Source<'_>> = match src.sub("rope_parameters")? {
        Some(p) => Some(per_layer_or_self(p)?),
        None => src.sub("rope_scaling")?,
    };
    // θ and the partial factor: inside the dict (v5), else top level (old), else the default.
    let lookup_f64 = |key: &str| -> Result<Option<(f64, String)>> {
        if let Some(p) = &params
            && let Some(v) = p.opt_f64(key)?
        {
            return Ok(Some((v, p.key_name(key))));
        }
        Ok(src.opt_f64(key)?.map(|v| (v, src.key_name(key))))
    };
    let (theta, theta_key) =
        lookup_f64("rope_theta")?.unwrap_or((defaults.theta, src.key_name("rope_theta")));
    if !(theta.is_finite() && theta > 1.0) {
        return Err(src.invalid(theta_key, format!("rope_theta must be > 1, got {theta}")));
    }
    let (partial_rotary_factor, prf_key) = lookup_f64("partial_rotary_factor")?.unwrap_or((
        defaults.partial_rotary_factor,
        src.key_name("partial_rotary_factor"),
    ));
    if !(partial_rotary_factor > 0.0 && partial_rotary_factor <= 1.0) {
        return Err(src.invalid(
            prf_key,
            format!("partial_rotary_factor must be in (0, 1], got {partial_rotary_factor}"),
        ));
    }

    let Some(p) = params else {
        return Ok(RopeParameters {
            theta,
            kind: RopeKind::Default,
            partial_rotary_factor,
            mrope_section: None,
            mrope_interleaved: false,
        });
    };
    let kind = parse_kind(&p, max_position_embeddings)?;
    Ok(RopeParameters {
        theta,
        kind,
        partial_rotary_factor,
        mrope_section: p.opt_usize_list("mrope_section")?,
        mrope_interleaved: p.opt_bool("mrope_interleaved")?.unwrap_or(false),
    })
}

/// transformers 5 may nest one dict per layer type (`{"full_attention": {...}, ...}`); the
/// attention layers of the models here use the `full_attention` entry.
fn per_layer_or_self(p: Source<'_>) -> Result<Source<'_>> {
    let flat = p.has_own("rope_type") || p.has_own("rope_theta") || p.has_own("type");
    if !flat && let Some(inner) = p.sub("full_attention")? {
        return Ok(inner);
    }
    Ok(p)
}

fn parse_kind(p: &Source<'_>, max_position_embeddings: usize) -> Result<RopeKind> {
    let (ty, ty_key) = match (p.opt_str("rope_type")?, p.opt_str("type")?) {
        (Some(t), _) => (t, p.key_name("rope_type")),
        (None, Some(t)) => (t, p.key_name("type")),
        (None, None) => ("default", p.key_name("rope_type")),
    };
    let factor = || -> Result<f64> {
        let f = p.opt_f64("factor")?.ok_or_else(|| p.missing("factor"))?;
        positive(p, "factor", f)
    };
    let original = || -> Result<usize> {
        Ok(p.opt_usize("original_max_position_embeddings")?
            .unwrap_or(max_position_embeddings))
    };
    Ok(match ty {
        "default" | "mrope" => RopeKind::Default,
        "linear" => RopeKind::Linear { factor: factor()? },
        "dynamic" => RopeKind::Dynamic {
            factor: factor()?,
            original_max_position_embeddings: original()?,
        },
        "yarn" => RopeKind::Yarn {
            factor: factor()?,
            original_max_position_embeddings: original()?,
            beta_fast: p.opt_f64("beta_fast")?.unwrap_or(32.0),
            beta_slow: p.opt_f64("beta_slow")?.unwrap_or(1.0),
            attention_factor: p.opt_f64("attention_factor")?,
            mscale: p.opt_f64("mscale")?,
            mscale_all_dim: p.opt_f64("mscale_all_dim")?,
            truncate: p.opt_bool("truncate")?,
        },
        "llama3" => {
            let req = |k: &str| -> Result<f64> {
                let v = p.opt_f64(k)?.ok_or_else(|| p.missing(k))?;
                positive(p, k, v)
            };
            RopeKind::Llama3 {
                factor: factor()?,
                low_freq_factor: req("low_freq_factor")?,
                high_freq_factor: req("high_freq_factor")?,
                original_max_position_embeddings: p
                    .opt_usize("original_max_position_embeddings")?
                    .ok_or_else(|| p.missing("original_max_position_embeddings"))?,
            }
        }
        other => {
            return Err(p.invalid(
                ty_key,
                format!(
                    "unsupported RoPE type {other:?}; supported: default, mrope, linear, dynamic, \
                     yarn, llama3"
                ),
            ));
        }
    })
}

fn positive(p: &Source<'_>, key: &str, v: f64) -> Result<f64> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(p.invalid(p.key_name(key), format!("must be a positive number, got {v}")))
    }
}

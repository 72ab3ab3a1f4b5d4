//! Rotary inverse frequencies from a config's RoPE parameters, following Hugging Face
//! transformers' `modeling_rope_utils` (values formed in f32 as it does).

use std::f64::consts::PI;

use super::rope::{RopeKind, RopeParameters};
use crate::error::{Error, Result};

impl RopeParameters {
    /// Inverse frequencies (one per rotated pair, `rotary_dim / 2` of them, with
    /// `rotary_dim = head_dim · partial_rotary_factor`) and the attention scaling that multiplies
    /// cos and sin (1 except for YaRN).
    ///
    /// ```
    /// # use ddtree_weights::{RopeKind, RopeParameters};
    /// let rope = RopeParameters {
    ///     theta: 10_000.0,
    ///     kind: RopeKind::Default,
    ///     partial_rotary_factor: 1.0,
    ///     mrope_section: None,
    ///     mrope_interleaved: false,
    /// };
    /// let (inv_freq, scaling) = rope.inv_freq(4)?;
    /// assert_eq!(inv_freq, vec![1.0, 0.01]); // 1 / 10000^(0/4), 1 / 10000^(2/4)
    /// assert_eq!(scaling, 1.0);
    /// # Ok::<(), ddtree_weights::Error>(())
    /// ```
    pub fn inv_freq(&self, head_dim: usize) -> Result<(Vec<f32>, f32)> {
        inv_freq(self, head_dim)
    }
}

fn inv_freq(rope: &RopeParameters, head_dim: usize) -> Result<(Vec<f32>, f32)> {
    let dim = rope.rotary_dim(head_dim);
    if dim < 2 || dim > head_dim {
        return Err(Error::UnsupportedRope(format!(
            "rotary dim {dim} (head_dim {head_dim} × partial_rotary_factor {}) must be in 2..={head_dim}",
            rope.partial_rotary_factor
        )));
    }
    let base = rope.theta as f32;
    // base ** (arange(0, dim, 2) / dim), in f32.
    let pos_freqs: Vec<f32> = (0..dim)
        .step_by(2)
        .map(|i| base.powf(i as f32 / dim as f32))
        .collect();
    let plain: Vec<f32> = pos_freqs.iter().map(|p| 1.0 / p).collect();
    match &rope.kind {
        RopeKind::Default => Ok((plain, 1.0)),
        RopeKind::Linear { factor } => Ok((plain.iter().map(|f| f / *factor as f32).collect(), 1.0)),
        RopeKind::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
        } => {
            let old_len = *original_max_position_embeddings as f32;
            let (factor, low, high) = (*factor as f32, *low_freq_factor as f32, *high_freq_factor as f32);
            let (low_wavelen, high_wavelen) = (old_len / low, old_len / high);
            let scaled = plain
                .iter()
                .map(|&f| {
                    let wavelen = 2.0 * PI as f32 / f;
                    if wavelen > low_wavelen {
                        f / factor
                    } else if wavelen < high_wavelen {
                        f
                    } else {
                        let smooth = (old_len / wavelen - low) / (high - low);
                        (1.0 - smooth) * f / factor + smooth * f
                    }
                })
                .collect();
            Ok((scaled, 1.0))
        }
        RopeKind::Yarn {
            factor,
            original_max_position_embeddings,
            beta_fast,
            beta_slow,
            attention_factor,
            mscale,
            mscale_all_dim,
            truncate,
        } => {
            let original = *original_max_position_embeddings as f64;
            let factor = *factor;
            let get_mscale = |scale: f64, m: f64| {
                if scale <= 1.0 {
                    1.0
                } else {
                    0.1 * m * scale.ln() + 1.0
                }
            };
            let attention = match (attention_factor, mscale, mscale_all_dim) {
                (Some(a), _, _) => *a,
                (None, Some(m), Some(m_all)) if *m != 0.0 && *m_all != 0.0 => {
                    get_mscale(factor, *m) / get_mscale(factor, *m_all)
                }
                _ => get_mscale(factor, 1.0),
            };
            let (beta_fast, beta_slow) = (*beta_fast, *beta_slow);
            let theta = rope.theta;
            let correction_dim =
                |rotations: f64| (dim as f64 * (original / (rotations * 2.0 * PI)).ln()) / (2.0 * theta.ln());
            let (mut low, mut high) = (correction_dim(beta_fast), correction_dim(beta_slow));
            if truncate.unwrap_or(true) {
                low = low.floor();
                high = high.ceil();
            }
            let (low, mut high) = (low.max(0.0), high.min(dim as f64 - 1.0));
            if low == high {
                high += 0.001;
            }
            let inv = pos_freqs
                .iter()
                .enumerate()
                .map(|(i, &p)| {
                    let ramp = ((i as f32 - low as f32) / (high as f32 - low as f32)).clamp(0.0, 1.0);
                    let extrapolation_weight = 1.0 - ramp;
                    let interpolation = 1.0 / (factor as f32 * p);
                    let extrapolation = 1.0 / p;
                    interpolation * (1.0 - extrapolation_weight) + extrapolation * extrapolation_weight
                })
                .collect();
            Ok((inv, attention as f32))
        }
        RopeKind::Dynamic { .. } => Err(Error::UnsupportedRope(
            "rope_type \"dynamic\" rescales with the sequence length; it is not supported".into(),
        )),
    }
}

//! `config.json` of z-lab DFlash block-diffusion drafters.

use std::path::Path;

use serde::Serialize;

use super::common::{CommonDefaults, parse_common};
use super::rope::{RopeDefaults, RopeParameters};
use super::{Source, parse_json_object, read_json_object};
use crate::error::Result;

/// Attention kind of one drafter layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum DraftLayerType {
    /// `full_attention`.
    FullAttention,
    /// `sliding_attention`.
    SlidingAttention,
}

/// A DFlash drafter's configuration: Qwen3-style decoder fields plus the DFlash keys.
///
/// `block_size`, `mask_token_id` and `target_layer_ids` are looked up in `dflash_config` first,
/// then at the top level (as the reference `_draft_value` does); `layer_types`,
/// `sliding_window`, `use_sliding_window`, `is_causal` and `num_target_layers` are top-level.
/// The drafter has no `embed_tokens` / `lm_head`: it borrows the target's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DFlashConfig {
    /// Vocabulary size (the target's).
    pub vocab_size: usize,
    /// Drafter width.
    pub hidden_size: usize,
    /// MLP inner width.
    pub intermediate_size: usize,
    /// Drafter decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads.
    pub num_key_value_heads: usize,
    /// Per-head dim (default `hidden_size / num_attention_heads`).
    pub head_dim: usize,
    /// MLP activation (default `silu`).
    pub hidden_act: String,
    /// RMSNorm epsilon (default 1e-6).
    pub rms_norm_eps: f64,
    /// Context length (default 32768).
    pub max_position_embeddings: usize,
    /// RoPE of the drafter (full rotary unless the config says otherwise).
    pub rope: RopeParameters,
    /// `dtype` / `torch_dtype` as written.
    pub dtype: Option<String>,
    /// Per-layer attention kind, if the config lists one.
    pub layer_types: Option<Vec<DraftLayerType>>,
    /// Sliding window of `sliding_attention` layers.
    pub sliding_window: Option<usize>,
    /// `use_sliding_window` as written.
    pub use_sliding_window: Option<bool>,
    /// `is_causal` as written; overrides the per-layer default (see [`layer_is_causal`]).
    ///
    /// [`layer_is_causal`]: DFlashConfig::layer_is_causal
    pub is_causal: Option<bool>,
    /// Layers of the target model.
    pub num_target_layers: Option<usize>,
    /// Tokens per draft block (default 16).
    pub block_size: usize,
    /// Id of the mask token filling the block after the bonus token.
    pub mask_token_id: u32,
    /// Target layers whose outputs (HF `hidden_states[id + 1]`) feed the drafter, in order.
    pub target_layer_ids: Vec<usize>,
}

impl DFlashConfig {
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

    /// The attention kind of layer `i` (full attention when the config lists none).
    pub fn layer_type(&self, i: usize) -> DraftLayerType {
        self.layer_types
            .as_ref()
            .and_then(|t| t.get(i).copied())
            .unwrap_or(DraftLayerType::FullAttention)
    }

    /// Whether layer `i` attends causally inside the block: `is_causal` when the config sets
    /// it, otherwise true exactly for `sliding_attention` layers (the newest z-lab reference).
    pub fn layer_is_causal(&self, i: usize) -> bool {
        self.is_causal
            .unwrap_or(self.layer_type(i) == DraftLayerType::SlidingAttention)
    }

    /// Width of the context-feature input of `fc`: `len(target_layer_ids) × target_hidden`.
    pub fn fc_in_features(&self, target_hidden_size: usize) -> usize {
        self.target_layer_ids.len() * target_hidden_size
    }

    fn from_map(map: &serde_json::Map<String, serde_json::Value>, path: &Path) -> Result<Self> {
        let top = Source::new(path, map);
        let draft = match top.sub("dflash_config")? {
            Some(d) => d.then(&top),
            None => top.clone(),
        };
        let c = parse_common(
            &top,
            CommonDefaults {
                head_dim: None,
                max_position_embeddings: 32768,
                rope: RopeDefaults {
                    theta: 10000.0,
                    partial_rotary_factor: 1.0,
                },
            },
        )?;
        let block_size = draft.opt_usize("block_size")?.unwrap_or(16);
        if block_size == 0 {
            return Err(top.invalid(draft.key_name("block_size"), "must be at least 1"));
        }
        let mask_token_id = draft
            .opt_u32("mask_token_id")?
            .ok_or_else(|| draft.missing("mask_token_id"))?;
        let mask_key = draft
            .get("mask_token_id")
            .map_or_else(|| draft.key_name("mask_token_id"), |(_, k)| k);
        if mask_token_id as usize >= c.vocab_size {
            return Err(top.invalid(
                mask_key,
                format!("{mask_token_id} is outside the vocabulary of {}", c.vocab_size),
            ));
        }
        let target_layer_ids = draft
            .opt_usize_list("target_layer_ids")?
            .ok_or_else(|| draft.missing("target_layer_ids"))?;
        let num_target_layers = top.opt_usize("num_target_layers")?;
        check_target_ids(&draft, &target_layer_ids, num_target_layers)?;
        Ok(DFlashConfig {
            layer_types: draft_layer_types(&top, c.num_hidden_layers)?,
            sliding_window: top.opt_usize("sliding_window")?,
            use_sliding_window: top.opt_bool("use_sliding_window")?,
            is_causal: top.opt_bool("is_causal")?,
            num_target_layers,
            block_size,
            mask_token_id,
            target_layer_ids,
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
            rope: c.rope,
            dtype: c.dtype,
        })
    }
}

fn check_target_ids(draft: &Source<'_>, ids: &[usize], num_target: Option<usize>) -> Result<()> {
    let key = draft
        .get("target_layer_ids")
        .map_or_else(|| draft.key_name("target_layer_ids"), |(_, k)| k);
    if ids.is_empty() {
        return Err(draft.invalid(key, "must name at least one target layer"));
    }
    if let Some(n) = num_target
        && let Some(bad) = ids.iter().find(|&&id| id >= n)
    {
        return Err(draft.invalid(
            key,
            format!("layer id {bad} is not below num_target_layers ({n})"),
        ));
    }
    Ok(())
}

fn draft_layer_types(top: &Source<'_>, num_layers: usize) -> Result<Option<Vec<DraftLayerType>>> {
    let Some((names, key)) = top.opt_str_list("layer_types")? else {
        return Ok(None);
    };
    if names.len() != num_layers {
        return Err(top.invalid(
            key,
            format!(
                "has {} entries but num_hidden_layers is {num_layers}",
                names.len()
            ),
        ));
    }
    names
        .iter()
        .enumerate()
        .map(|(i, n)| match *n {
            "full_attention" | "attention" => Ok(DraftLayerType::FullAttention),
            "sliding_attention" => Ok(DraftLayerType::SlidingAttention),
            other => Err(top.invalid(
                format!("{key}[{i}]"),
                format!("unknown layer type {other:?}; expected full_attention or sliding_attention"),
            )),
        })
        .collect::<Result<_>>()
        .map(Some)
}

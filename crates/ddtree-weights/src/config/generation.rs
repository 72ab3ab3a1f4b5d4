//! `generation_config.json`: stop tokens and sampling defaults.

use std::path::Path;

use serde::Serialize;

use super::{Source, parse_json_object, read_json_object};
use crate::error::Result;

/// The model's generation defaults.
///
/// ```
/// use ddtree_weights::GenerationConfig;
/// let g = GenerationConfig::from_json_str(
///     r#"{"bos_token_id": 151643, "eos_token_id": [151645, 151643], "do_sample": true,
///         "temperature": 0.6, "top_k": 20, "top_p": 0.95}"#,
///     "generation_config.json",
/// )?;
/// assert_eq!(g.eos_token_id, [151645, 151643]);
/// assert_eq!(g.top_k, Some(20));
/// # Ok::<(), ddtree_weights::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GenerationConfig {
    /// BOS token id.
    pub bos_token_id: Option<u32>,
    /// EOS token ids (one integer or a list in the file); empty when absent.
    pub eos_token_id: Vec<u32>,
    /// Padding token id.
    pub pad_token_id: Option<u32>,
    /// Whether sampling (rather than greedy decoding) is the default.
    pub do_sample: Option<bool>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Nucleus sampling mass.
    pub top_p: Option<f64>,
    /// Top-k cut-off.
    pub top_k: Option<usize>,
    /// Min-p cut-off.
    pub min_p: Option<f64>,
    /// Repetition penalty.
    pub repetition_penalty: Option<f64>,
}

impl GenerationConfig {
    /// Reads a `generation_config.json`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        Self::from_map(&read_json_object(path)?, path)
    }

    /// Parses JSON text; `origin` names the source in errors.
    pub fn from_json_str(json: &str, origin: impl AsRef<Path>) -> Result<Self> {
        let path = origin.as_ref();
        Self::from_map(&parse_json_object(json, path)?, path)
    }

    /// `dir/generation_config.json` if it exists (`Ok(None)` if not; errors if it is broken).
    pub fn load_optional(dir: impl AsRef<Path>) -> Result<Option<Self>> {
        let path = dir.as_ref().join("generation_config.json");
        if !path.exists() {
            return Ok(None);
        }
        Self::from_file(path).map(Some)
    }

    fn from_map(map: &serde_json::Map<String, serde_json::Value>, path: &Path) -> Result<Self> {
        let src = Source::new(path, map);
        let prob = |key: &str| -> Result<Option<f64>> {
            match src.opt_f64(key)? {
                Some(p) if !(0.0..=1.0).contains(&p) => {
                    Err(src.invalid(src.key_name(key), format!("must be between 0 and 1, got {p}")))
                }
                p => Ok(p),
            }
        };
        let temperature = src.opt_f64("temperature")?;
        if let Some(t) = temperature
            && !(t.is_finite() && t >= 0.0)
        {
            return Err(src.invalid(
                src.key_name("temperature"),
                format!("must be a finite non-negative number, got {t}"),
            ));
        }
        Ok(GenerationConfig {
            bos_token_id: src.opt_u32("bos_token_id")?,
            eos_token_id: src.token_ids("eos_token_id")?,
            pad_token_id: src.opt_u32("pad_token_id")?,
            do_sample: src.opt_bool("do_sample")?,
            temperature,
            top_p: prob("top_p")?,
            top_k: src.opt_usize("top_k")?,
            min_p: prob("min_p")?,
            repetition_penalty: src.opt_f64("repetition_penalty")?,
        })
    }
}

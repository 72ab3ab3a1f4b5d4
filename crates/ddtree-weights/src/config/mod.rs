//! Typed views of Hugging Face `config.json` / `generation_config.json` files.
//!
//! Each config is read from a `serde_json::Value` through [`Source`], which looks keys up in a
//! chain of JSON objects (e.g. `text_config` then the top level, or `dflash_config` then the top
//! level), treats `null` as absent, ignores unknown keys, and reports errors with the file and
//! the full key path (`text_config.num_attention_heads`).

mod common;
mod dflash;
mod generation;
mod qwen3;
mod qwen35;
mod rope;
mod rope_frequencies;

pub use dflash::{DFlashConfig, DraftLayerType};
pub use generation::GenerationConfig;
pub use qwen3::Qwen3Config;
pub use qwen35::{GdnProjectionLayout, LayerType, MoeConfig, Qwen35Config};
pub use rope::{RopeKind, RopeParameters};

use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::safetensors::json_kind;

/// Reads a JSON file into an object.
pub(crate) fn read_json_object(path: &Path) -> Result<Map<String, Value>> {
    let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
    parse_json_object(&text, path)
}

/// Parses JSON text that must be an object.
pub(crate) fn parse_json_object(text: &str, path: &Path) -> Result<Map<String, Value>> {
    let value: Value = serde_json::from_str(text).map_err(|e| Error::ConfigParse {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    match value {
        Value::Object(map) => Ok(map),
        other => Err(Error::ConfigWrongType {
            path: path.to_path_buf(),
            key: "(top level)".into(),
            expected: "a JSON object",
            found: json_kind(&other),
        }),
    }
}

/// A chain of JSON objects to look keys up in, first match wins.
#[derive(Clone)]
pub(crate) struct Source<'a> {
    pub(crate) path: &'a Path,
    /// `(object, prefix)`; the prefix (e.g. `"text_config."`) is only for messages.
    layers: Vec<(&'a Map<String, Value>, String)>,
}

impl<'a> Source<'a> {
    pub(crate) fn new(path: &'a Path, top: &'a Map<String, Value>) -> Self {
        Source {
            path,
            layers: vec![(top, String::new())],
        }
    }

    /// The object under `key` as a source of its own (prefix `key.`), if present.
    pub(crate) fn sub(&self, key: &str) -> Result<Option<Source<'a>>> {
        let Some((v, k)) = self.get(key) else {
            return Ok(None);
        };
        let obj = v
            .as_object()
            .ok_or_else(|| self.wrong_type(k.clone(), "an object", v))?;
        Ok(Some(Source {
            path: self.path,
            layers: vec![(obj, format!("{k}."))],
        }))
    }

    /// This source, falling back to `fallback` for keys it lacks.
    pub(crate) fn then(mut self, fallback: &Source<'a>) -> Source<'a> {
        self.layers.extend(fallback.layers.iter().cloned());
        self
    }

    /// Whether the first layer holds `key` (even as `null`).
    pub(crate) fn has_own(&self, key: &str) -> bool {
        self.layers[0].0.contains_key(key)
    }

    /// The key path used in messages when a key is absent everywhere.
    pub(crate) fn key_name(&self, key: &str) -> String {
        format!("{}{key}", self.layers[0].1)
    }

    /// The first non-null value of `key`, with its full key path.
    pub(crate) fn get(&self, key: &str) -> Option<(&'a Value, String)> {
        self.layers.iter().find_map(|(obj, prefix)| match obj.get(key) {
            None | Some(Value::Null) => None,
            Some(v) => Some((v, format!("{prefix}{key}"))),
        })
    }

    pub(crate) fn wrong_type(&self, key: String, expected: &'static str, v: &Value) -> Error {
        Error::ConfigWrongType {
            path: self.path.to_path_buf(),
            key,
            expected,
            found: json_kind(v),
        }
    }

    pub(crate) fn missing(&self, key: &str) -> Error {
        Error::ConfigMissingKey {
            path: self.path.to_path_buf(),
            key: self.key_name(key),
        }
    }

    pub(crate) fn invalid(&self, key: impl Into<String>, reason: impl Into<String>) -> Error {
        Error::ConfigInvalid {
            path: self.path.to_path_buf(),
            key: key.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn opt_usize(&self, key: &str) -> Result<Option<usize>> {
        self.get(key).map(|(v, k)| self.as_usize(v, k)).transpose()
    }

    pub(crate) fn req_usize(&self, key: &str) -> Result<usize> {
        self.opt_usize(key)?.ok_or_else(|| self.missing(key))
    }

    pub(crate) fn opt_u32(&self, key: &str) -> Result<Option<u32>> {
        self.get(key).map(|(v, k)| self.as_u32(v, k)).transpose()
    }

    pub(crate) fn opt_f64(&self, key: &str) -> Result<Option<f64>> {
        self.get(key)
            .map(|(v, k)| v.as_f64().ok_or_else(|| self.wrong_type(k, "a number", v)))
            .transpose()
    }

    pub(crate) fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        self.get(key)
            .map(|(v, k)| v.as_bool().ok_or_else(|| self.wrong_type(k, "a boolean", v)))
            .transpose()
    }

    pub(crate) fn opt_str(&self, key: &str) -> Result<Option<&'a str>> {
        self.get(key)
            .map(|(v, k)| v.as_str().ok_or_else(|| self.wrong_type(k, "a string", v)))
            .transpose()
    }

    /// A list of non-negative integers.
    pub(crate) fn opt_usize_list(&self, key: &str) -> Result<Option<Vec<usize>>> {
        let Some((v, k)) = self.get(key) else {
            return Ok(None);
        };
        let Value::Array(items) = v else {
            return Err(self.wrong_type(k, "a list of non-negative integers", v));
        };
        items
            .iter()
            .enumerate()
            .map(|(i, x)| self.as_usize(x, format!("{k}[{i}]")))
            .collect::<Result<_>>()
            .map(Some)
    }

    /// A list of strings.
    pub(crate) fn opt_str_list(&self, key: &str) -> Result<Option<(Vec<&'a str>, String)>> {
        let Some((v, k)) = self.get(key) else {
            return Ok(None);
        };
        let Value::Array(items) = v else {
            return Err(self.wrong_type(k, "a list of strings", v));
        };
        let list = items
            .iter()
            .enumerate()
            .map(|(i, x)| {
                x.as_str()
                    .ok_or_else(|| self.wrong_type(format!("{k}[{i}]"), "a string", x))
            })
            .collect::<Result<_>>()?;
        Ok(Some((list, k)))
    }

    /// Token ids given as one integer or a list of integers (`eos_token_id`); empty if absent.
    pub(crate) fn token_ids(&self, key: &str) -> Result<Vec<u32>> {
        match self.get(key) {
            None => Ok(Vec::new()),
            Some((Value::Array(items), k)) => items
                .iter()
                .enumerate()
                .map(|(i, x)| self.as_u32(x, format!("{k}[{i}]")))
                .collect(),
            Some((v, k)) => Ok(vec![self.as_u32(v, k)?]),
        }
    }

    fn as_usize(&self, v: &Value, key: String) -> Result<usize> {
        const EXPECTED: &str = "a non-negative integer";
        // Integral floats (`4096.0`) are accepted: some exporters write every number as a float.
        let n = match v {
            Value::Number(n) => n.as_u64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && (0.0..9.0e15).contains(f))
                    .map(|f| f as u64)
            }),
            _ => None,
        };
        n.and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| self.wrong_type(key, EXPECTED, v))
    }

    fn as_u32(&self, v: &Value, key: String) -> Result<u32> {
        let n = self.as_usize(v, key.clone())?;
        u32::try_from(n).map_err(|_| self.invalid(key, format!("token id {n} does not fit in u32")))
    }
}

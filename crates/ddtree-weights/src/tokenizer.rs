//! Tokenizer files: `tokenizer.json`, the chat template and the named special tokens.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;
use tokenizers::Tokenizer;

use crate::config::{Source, parse_json_object, read_json_object};
use crate::error::{Error, Result};
use crate::safetensors::json_kind;

/// The parts of `tokenizer_config.json` this crate uses.
///
/// ```
/// use ddtree_weights::TokenizerConfig;
/// let t = TokenizerConfig::from_json_str(
///     r#"{"eos_token": "<|im_end|>", "pad_token": {"content": "<|endoftext|>"},
///         "bos_token": null, "chat_template": "{{ messages }}"}"#,
///     "tokenizer_config.json",
/// )?;
/// assert_eq!(t.eos_token.as_deref(), Some("<|im_end|>"));
/// assert_eq!(t.pad_token.as_deref(), Some("<|endoftext|>"));
/// assert_eq!(t.bos_token, None);
/// assert_eq!(t.chat_template.as_deref(), Some("{{ messages }}"));
/// # Ok::<(), ddtree_weights::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TokenizerConfig {
    /// `chat_template`: the string, or the `default` entry of a `[{name, template}]` list.
    pub chat_template: Option<String>,
    /// `eos_token` content.
    pub eos_token: Option<String>,
    /// `bos_token` content.
    pub bos_token: Option<String>,
    /// `pad_token` content.
    pub pad_token: Option<String>,
}

impl TokenizerConfig {
    /// Reads a `tokenizer_config.json`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        Self::from_map(&read_json_object(path)?, path)
    }

    /// Parses JSON text; `origin` names the source in errors.
    pub fn from_json_str(json: &str, origin: impl AsRef<Path>) -> Result<Self> {
        let path = origin.as_ref();
        Self::from_map(&parse_json_object(json, path)?, path)
    }

    fn from_map(map: &serde_json::Map<String, Value>, path: &Path) -> Result<Self> {
        let src = Source::new(path, map);
        Ok(TokenizerConfig {
            chat_template: chat_template_value(&src)?,
            eos_token: special_token(&src, "eos_token")?,
            bos_token: special_token(&src, "bos_token")?,
            pad_token: special_token(&src, "pad_token")?,
        })
    }
}

/// A special token and its id in the tokenizer's vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpecialToken {
    /// The token text, e.g. `<|im_end|>`.
    pub content: String,
    /// Its id.
    pub id: u32,
}

/// Everything needed to turn chat messages into token ids and back.
#[derive(Debug, Clone)]
pub struct TokenizerFiles {
    /// The tokenizer from `tokenizer.json`.
    pub tokenizer: Tokenizer,
    /// The chat template, from `chat_template.jinja`, else `chat_template.json`, else
    /// `tokenizer_config.json`; `None` for models without one (see [`require_chat_template`]).
    ///
    /// [`require_chat_template`]: TokenizerFiles::require_chat_template
    pub chat_template: Option<String>,
    /// `eos_token` of tokenizer_config.json, resolved to its id.
    pub eos_token: Option<SpecialToken>,
    /// `bos_token` of tokenizer_config.json, resolved to its id.
    pub bos_token: Option<SpecialToken>,
    /// `pad_token` of tokenizer_config.json, resolved to its id.
    pub pad_token: Option<SpecialToken>,
    dir: PathBuf,
}

impl TokenizerFiles {
    /// Loads `tokenizer.json` (required), the chat template and `tokenizer_config.json`
    /// (optional) from a model directory.
    pub fn load(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let tok_path = dir.join("tokenizer.json");
        let bytes = std::fs::read(&tok_path).map_err(Error::io(&tok_path))?;
        let tokenizer = Tokenizer::from_bytes(&bytes).map_err(|e| Error::Tokenizer {
            path: tok_path.clone(),
            reason: e.to_string(),
        })?;

        let cfg_path = dir.join("tokenizer_config.json");
        let cfg = if cfg_path.exists() {
            TokenizerConfig::from_file(&cfg_path)?
        } else {
            TokenizerConfig::default()
        };
        let resolve = |key: &str, content: Option<String>| -> Result<Option<SpecialToken>> {
            let Some(content) = content else {
                return Ok(None);
            };
            match tokenizer.token_to_id(&content) {
                Some(id) => Ok(Some(SpecialToken { content, id })),
                None => Err(Error::ConfigInvalid {
                    path: cfg_path.clone(),
                    key: key.into(),
                    reason: format!("{content:?} is not a token of {}", tok_path.display()),
                }),
            }
        };
        let eos_token = resolve("eos_token", cfg.eos_token)?;
        let bos_token = resolve("bos_token", cfg.bos_token)?;
        let pad_token = resolve("pad_token", cfg.pad_token)?;
        Ok(TokenizerFiles {
            chat_template: find_chat_template(dir, cfg.chat_template)?,
            tokenizer,
            eos_token,
            bos_token,
            pad_token,
            dir: dir.to_path_buf(),
        })
    }

    /// The chat template, or [`Error::NoChatTemplate`] naming the directory.
    pub fn require_chat_template(&self) -> Result<&str> {
        self.chat_template
            .as_deref()
            .ok_or_else(|| Error::NoChatTemplate {
                dir: self.dir.clone(),
            })
    }
}

/// `chat_template.jinja` beats `chat_template.json`, which beats tokenizer_config.json's
/// `chat_template` (the order transformers ≥ 4.43 saves and loads them in).
fn find_chat_template(dir: &Path, from_config: Option<String>) -> Result<Option<String>> {
    let jinja = dir.join("chat_template.jinja");
    if jinja.exists() {
        return std::fs::read_to_string(&jinja)
            .map(Some)
            .map_err(Error::io(&jinja));
    }
    let json = dir.join("chat_template.json");
    if json.exists() {
        let map = read_json_object(&json)?;
        if let Some(t) = chat_template_value(&Source::new(&json, &map))? {
            return Ok(Some(t));
        }
    }
    Ok(from_config)
}

/// `chat_template` as a string, or the `default` entry of a list of `{name, template}`.
fn chat_template_value(src: &Source<'_>) -> Result<Option<String>> {
    let Some((v, key)) = src.get("chat_template") else {
        return Ok(None);
    };
    match v {
        Value::String(s) => Ok(Some(s.clone())),
        Value::Array(items) => {
            let mut names = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let name = item.get("name").and_then(Value::as_str);
                let template = item.get("template").and_then(Value::as_str);
                let (Some(name), Some(template)) = (name, template) else {
                    return Err(src.wrong_type(
                        format!("{key}[{i}]"),
                        "an object {\"name\": string, \"template\": string}",
                        item,
                    ));
                };
                if name == "default" {
                    return Ok(Some(template.to_string()));
                }
                names.push(name);
            }
            Err(src.invalid(key, format!("no template named \"default\" among {names:?}")))
        }
        other => Err(src.wrong_type(key, "a string or a list of {name, template}", other)),
    }
}

/// A special token given as a string or as an `AddedToken` object `{"content": …}`.
fn special_token(src: &Source<'_>, key: &str) -> Result<Option<String>> {
    let Some((v, k)) = src.get(key) else {
        return Ok(None);
    };
    match v {
        Value::String(s) => Ok(Some(s.clone())),
        Value::Object(o) => match o.get("content") {
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(src.wrong_type(format!("{k}.content"), "a string", other)),
            None => Err(Error::ConfigMissingKey {
                path: src.path.to_path_buf(),
                key: format!("{k}.content"),
            }),
        },
        other => Err(Error::ConfigWrongType {
            path: src.path.to_path_buf(),
            key: k,
            expected: "a string or {\"content\": string}",
            found: json_kind(other),
        }),
    }
}

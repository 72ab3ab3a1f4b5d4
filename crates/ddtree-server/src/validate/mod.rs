//! Request bodies → typed requests, with a `400` naming the field for everything out of range.
//!
//! Bodies are read as `serde_json::Value` and checked field by field (rather than derived with
//! serde) so every failure carries the field name, the allowed values and a string code, and so
//! `max_tokens` and `max_completion_tokens` can both be given.

use serde_json::{Map, Value};

use crate::error::{ApiError, json_kind};

mod chat;

pub use chat::chat_request;

/// The most stop strings one request may give.
pub const MAX_STOP_STRINGS: usize = 16;

/// What the loaded model and the server's flags allow.
#[derive(Clone, Debug)]
pub struct Limits {
    /// The served model name.
    pub served_model: String,
    /// Accept any `model` value (for clients that insist on sending one).
    pub accept_any_model: bool,
    /// Largest `tree_budget` a request may ask for.
    pub max_tree_budget: usize,
    /// Vocabulary size of the target.
    pub vocab_size: usize,
    /// The drafter's block size.
    pub block_size: usize,
    /// Reject unknown fields instead of ignoring them.
    pub strict: bool,
}

/// The drafting mode a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeRequest {
    /// `tree_budget: N` (0 is autoregressive).
    Tree(usize),
    /// `tree_budget: "chain"`: the drafter's top-1 chain (plain DFlash).
    Chain,
}

/// Parameters shared by chat and text completions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CommonParams {
    /// `model`, if given.
    pub model: Option<String>,
    /// `max_completion_tokens` / `max_tokens`.
    pub max_tokens: Option<usize>,
    /// `temperature` in [0, 2].
    pub temperature: Option<f32>,
    /// `top_p` in (0, 1].
    pub top_p: Option<f32>,
    /// `top_k` (0 or -1 = no limit).
    pub top_k: Option<usize>,
    /// `seed` (any 64-bit integer).
    pub seed: Option<u64>,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Extra stop token ids.
    pub stop_token_ids: Vec<u32>,
    /// `stream`.
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    /// `tree_budget` extension.
    pub mode: Option<ModeRequest>,
    /// `ignore_eos` extension: do not stop at the model's EOS tokens.
    pub ignore_eos: bool,
    /// Unknown fields (ignored and logged, or rejected in strict mode).
    pub unknown: Vec<String>,
}

/// One chat message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    /// `system`, `developer`, `user`, `assistant`, `tool`.
    pub role: String,
    /// Text content (text parts joined with `\n`); `None` when null.
    pub content: Option<String>,
    /// `reasoning_content` or `reasoning` of an assistant message.
    pub reasoning_content: Option<String>,
    /// `name`, if given.
    pub name: Option<String>,
}

/// A validated `POST /v1/chat/completions` body.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatRequest {
    /// Shared parameters.
    pub common: CommonParams,
    /// The conversation.
    pub messages: Vec<ChatMessage>,
    /// `add_generation_prompt` (default true).
    pub add_generation_prompt: bool,
    /// `chat_template_kwargs`, merged over `reasoning_effort`'s mapping.
    pub template_kwargs: Map<String, Value>,
    /// `separate_reasoning` (default true): split `<think>…</think>` into `reasoning_content`.
    pub separate_reasoning: bool,
}

/// A prompt of `POST /v1/completions`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prompt {
    /// Text, tokenized without special tokens added.
    Text(String),
    /// Token ids, used as they are.
    Tokens(Vec<u32>),
}

/// A validated `POST /v1/completions` body.
#[derive(Clone, Debug, PartialEq)]
pub struct CompletionRequest {
    /// Shared parameters.
    pub common: CommonParams,
    /// The prompt.
    pub prompt: Prompt,
}

const COMMON_FIELDS: &[&str] = &[
    "model",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "stop_token_ids",
    "n",
    "stream",
    "stream_options",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logprobs",
    "top_logprobs",
    "logit_bias",
    "tree_budget",
    "block_size",
    "ignore_eos",
    "best_of",
    // Accepted and ignored: they do not change the output.
    "user",
    "metadata",
    "store",
    "service_tier",
    "prompt_cache_key",
    "safety_identifier",
];

const COMPLETION_FIELDS: &[&str] = &["prompt", "echo", "suffix"];

pub(super) type Result<T> = std::result::Result<T, ApiError>;

/// Parses raw bytes as a JSON object (`400 invalid_json` / `invalid_body` otherwise).
pub fn parse_object(bytes: &[u8]) -> Result<Map<String, Value>> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        ApiError::invalid(
            "body",
            "invalid_json",
            format!("the request body is not valid JSON: {e}"),
        )
    })?;
    match value {
        Value::Object(map) => Ok(map),
        other => Err(ApiError::invalid(
            "body",
            "invalid_body",
            format!(
                "the request body must be a JSON object, got {}",
                json_kind(&other)
            ),
        )),
    }
}

/// Validates a text completions body.
pub fn completion_request(body: &Map<String, Value>, limits: &Limits) -> Result<CompletionRequest> {
    let common = common_params(body, limits, COMPLETION_FIELDS)?;
    if opt_bool(body, "echo")? == Some(true) {
        return Err(ApiError::unsupported(
            "echo",
            "`echo` is not supported (allowed: false)",
        ));
    }
    if !matches!(body.get("suffix"), None | Some(Value::Null)) {
        return Err(ApiError::unsupported("suffix", "`suffix` is not supported"));
    }
    let raw = match body.get("prompt") {
        None | Some(Value::Null) => {
            return Err(ApiError::missing("prompt", "a string or an array of token ids"));
        }
        Some(Value::Array(items)) if items.len() == 1 && (items[0].is_string() || items[0].is_array()) => {
            &items[0]
        }
        Some(Value::Array(items))
            if items.len() > 1 && items.iter().all(|v| v.is_string() || v.is_array()) =>
        {
            return Err(ApiError::unsupported(
                "prompt",
                "batched prompts are not supported: send one prompt",
            ));
        }
        Some(v) => v,
    };
    let prompt = match raw {
        Value::String(s) if s.is_empty() => {
            return Err(ApiError::value("prompt", "`prompt` must not be empty"));
        }
        Value::String(s) => Prompt::Text(s.clone()),
        Value::Array(ids) if ids.is_empty() => {
            return Err(ApiError::value("prompt", "`prompt` must not be empty"));
        }
        Value::Array(ids) => Prompt::Tokens(
            ids.iter()
                .enumerate()
                .map(|(i, v)| token_id(&format!("prompt[{i}]"), v, limits.vocab_size))
                .collect::<Result<_>>()?,
        ),
        other => {
            return Err(ApiError::wrong_type(
                "prompt",
                "a string or an array of token ids",
                other,
            ));
        }
    };
    Ok(CompletionRequest { common, prompt })
}

pub(super) fn common_params(
    body: &Map<String, Value>,
    limits: &Limits,
    endpoint_fields: &[&str],
) -> Result<CommonParams> {
    let mut p = CommonParams {
        unknown: body
            .keys()
            .filter(|k| !COMMON_FIELDS.contains(&k.as_str()) && !endpoint_fields.contains(&k.as_str()))
            .cloned()
            .collect(),
        ..CommonParams::default()
    };
    if limits.strict
        && let Some(k) = p.unknown.first()
    {
        return Err(ApiError::invalid(
            k.clone(),
            "unknown_parameter",
            format!("unrecognized request argument supplied: {k} (the server runs in strict mode)"),
        ));
    }
    p.model = match body.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => return Err(ApiError::wrong_type("model", "a string", other)),
    };
    let max_tokens = opt_int(body, "max_tokens")?;
    let max_completion = opt_int(body, "max_completion_tokens")?;
    for (name, v) in [
        ("max_tokens", max_tokens),
        ("max_completion_tokens", max_completion),
    ] {
        if let Some(n) = v
            && n <= 0
        {
            return Err(ApiError::value(
                name,
                format!("`{name}` must be at least 1, got {n}"),
            ));
        }
    }
    p.max_tokens = match (max_tokens, max_completion) {
        (Some(a), Some(b)) if a != b => {
            return Err(ApiError::value(
                "max_completion_tokens",
                format!(
                    "`max_tokens` ({a}) and `max_completion_tokens` ({b}) disagree: give one, or the same value"
                ),
            ));
        }
        (a, b) => a.or(b).map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
    };
    if let Some(t) = opt_f64(body, "temperature")? {
        if !(0.0..=2.0).contains(&t) {
            return Err(ApiError::value(
                "temperature",
                format!("`temperature` must be in [0, 2], got {t}"),
            ));
        }
        p.temperature = Some(t as f32);
    }
    if let Some(t) = opt_f64(body, "top_p")? {
        if !(t > 0.0 && t <= 1.0) {
            return Err(ApiError::value(
                "top_p",
                format!("`top_p` must be in (0, 1], got {t}"),
            ));
        }
        p.top_p = Some(t as f32);
    }
    if let Some(k) = opt_int(body, "top_k")? {
        if k < -1 {
            return Err(ApiError::value(
                "top_k",
                format!("`top_k` must be -1 or 0 (no limit) or a positive integer, got {k}"),
            ));
        }
        p.top_k = Some(usize::try_from(k).unwrap_or(0));
    }
    if let Some(m) = opt_f64(body, "min_p")? {
        if !(0.0..=1.0).contains(&m) {
            return Err(ApiError::value(
                "min_p",
                format!("`min_p` must be in [0, 1], got {m}"),
            ));
        }
        if m != 0.0 {
            return Err(ApiError::unsupported(
                "min_p",
                format!("`min_p` is not supported (allowed: 0), got {m}"),
            ));
        }
    }
    for name in ["presence_penalty", "frequency_penalty"] {
        if let Some(v) = opt_f64(body, name)? {
            if !(-2.0..=2.0).contains(&v) {
                return Err(ApiError::value(
                    name,
                    format!("`{name}` must be in [-2, 2], got {v}"),
                ));
            }
            if v != 0.0 {
                return Err(ApiError::unsupported(
                    name,
                    format!("`{name}` is not supported (allowed: 0), got {v}"),
                ));
            }
        }
    }
    if let Some(v) = opt_f64(body, "repetition_penalty")?
        && v != 1.0
    {
        return Err(ApiError::unsupported(
            "repetition_penalty",
            format!("`repetition_penalty` is not supported (allowed: 1), got {v}"),
        ));
    }
    p.seed = match body.get("seed") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) if n.is_u64() => n.as_u64(),
        Some(Value::Number(n)) if n.is_i64() => n.as_i64().map(|s| s as u64),
        Some(v @ Value::Number(_)) => {
            return Err(ApiError::value(
                "seed",
                format!("`seed` must be an integer in [-2^63, 2^64 - 1], got {v}"),
            ));
        }
        Some(other) => return Err(ApiError::wrong_type("seed", "an integer", other)),
    };
    p.stop = match body.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(ApiError::wrong_type(&format!("stop[{i}]"), "a string", other)),
            })
            .collect::<Result<_>>()?,
        Some(other) => {
            return Err(ApiError::wrong_type(
                "stop",
                "a string or an array of strings",
                other,
            ));
        }
    };
    if p.stop.iter().any(String::is_empty) {
        return Err(ApiError::value("stop", "stop strings must not be empty"));
    }
    if p.stop.len() > MAX_STOP_STRINGS {
        return Err(ApiError::value(
            "stop",
            format!(
                "at most {MAX_STOP_STRINGS} stop strings are allowed, got {}",
                p.stop.len()
            ),
        ));
    }
    p.stop_token_ids = match body.get("stop_token_ids") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| token_id(&format!("stop_token_ids[{i}]"), v, limits.vocab_size))
            .collect::<Result<_>>()?,
        Some(other) => {
            return Err(ApiError::wrong_type(
                "stop_token_ids",
                "an array of token ids",
                other,
            ));
        }
    };
    for name in ["n", "best_of"] {
        if let Some(n) = opt_int(body, name)?
            && n != 1
        {
            return Err(if n < 1 {
                ApiError::value(name, format!("`{name}` must be at least 1, got {n}"))
            } else {
                ApiError::unsupported(
                    name,
                    format!("`{name}` > 1 is not supported (allowed: 1), got {n}"),
                )
            });
        }
    }
    p.stream = opt_bool(body, "stream")?.unwrap_or(false);
    match body.get("stream_options") {
        None | Some(Value::Null) => {}
        Some(Value::Object(o)) => {
            if !p.stream {
                return Err(ApiError::value(
                    "stream_options",
                    "`stream_options` is only allowed when `stream` is true",
                ));
            }
            p.include_usage = opt_bool(o, "include_usage")
                .map_err(|e| ApiError {
                    param: Some("stream_options.include_usage".into()),
                    ..e
                })?
                .unwrap_or(false);
        }
        Some(other) => return Err(ApiError::wrong_type("stream_options", "an object", other)),
    }
    match body.get("logprobs") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => {
            return Err(ApiError::unsupported(
                "logprobs",
                "`logprobs` is not supported yet (allowed: false)",
            ));
        }
        Some(Value::Number(n)) if n.as_u64() == Some(0) && endpoint_fields == COMPLETION_FIELDS => {}
        Some(other) => return Err(ApiError::wrong_type("logprobs", "a boolean", other)),
    }
    match body.get("top_logprobs") {
        None | Some(Value::Null) => {}
        Some(Value::Number(n)) if n.as_u64() == Some(0) => {}
        Some(_) => {
            return Err(ApiError::unsupported(
                "top_logprobs",
                "`top_logprobs` is not supported yet (allowed: 0)",
            ));
        }
    }
    match body.get("logit_bias") {
        None | Some(Value::Null) => {}
        Some(Value::Object(o)) if o.is_empty() => {}
        Some(_) => {
            return Err(ApiError::unsupported(
                "logit_bias",
                "`logit_bias` is not supported yet",
            ));
        }
    }
    p.mode = match body.get("tree_budget") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s == "chain" => Some(ModeRequest::Chain),
        Some(Value::Number(n)) if n.is_u64() => {
            let b = n.as_u64().unwrap_or(u64::MAX);
            if b > limits.max_tree_budget as u64 {
                return Err(ApiError::value(
                    "tree_budget",
                    format!(
                        "`tree_budget` must be in [0, {}] (0 = autoregressive) or \"chain\", got {b}",
                        limits.max_tree_budget
                    ),
                ));
            }
            Some(ModeRequest::Tree(b as usize))
        }
        Some(v) => {
            return Err(ApiError::value(
                "tree_budget",
                format!(
                    "`tree_budget` must be an integer in [0, {}] (0 = autoregressive) or \"chain\", got {v}",
                    limits.max_tree_budget
                ),
            ));
        }
    };
    if let Some(b) = opt_int(body, "block_size")?
        && b != limits.block_size as i64
    {
        return Err(ApiError::value(
            "block_size",
            format!(
                "`block_size` is fixed by the loaded drafter at {}, got {b}",
                limits.block_size
            ),
        ));
    }
    p.ignore_eos = opt_bool(body, "ignore_eos")?.unwrap_or(false);
    Ok(p)
}

fn token_id(param: &str, v: &Value, vocab: usize) -> Result<u32> {
    match v.as_i64() {
        Some(id) if id >= 0 && (id as u64) < vocab as u64 => Ok(id as u32),
        Some(id) => Err(ApiError::value(
            param,
            format!(
                "token id {id} is outside the vocabulary: ids must be in [0, {vocab}) (vocab size {vocab})"
            ),
        )),
        None => Err(ApiError::wrong_type(param, "an integer token id", v)),
    }
}

/// A boolean field; absent and null are `None`.
pub fn opt_bool(body: &Map<String, Value>, key: &str) -> Result<Option<bool>> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(ApiError::wrong_type(key, "a boolean", other)),
    }
}

fn opt_f64(body: &Map<String, Value>, key: &str) -> Result<Option<f64>> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(f) if f.is_finite() => Ok(Some(f)),
            _ => Err(ApiError::value(key, format!("`{key}` must be a finite number"))),
        },
        Some(other) => Err(ApiError::wrong_type(key, "a number", other)),
    }
}

fn opt_int(body: &Map<String, Value>, key: &str) -> Result<Option<i64>> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) if n.is_i64() => Ok(n.as_i64()),
        Some(Value::Number(n)) if n.is_u64() => Ok(Some(i64::MAX)),
        Some(other) => Err(ApiError::wrong_type(key, "an integer", other)),
    }
}

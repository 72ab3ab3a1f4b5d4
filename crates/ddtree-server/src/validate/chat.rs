//! Chat completions bodies: messages, content parts, tools, template kwargs.

use serde_json::{Map, Value};

use super::{ChatMessage, ChatRequest, Limits, Result, common_params, opt_bool};
use crate::error::ApiError;

pub(super) const CHAT_FIELDS: &[&str] = &[
    "messages",
    "response_format",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "functions",
    "function_call",
    "chat_template_kwargs",
    "reasoning_effort",
    "add_generation_prompt",
    "separate_reasoning",
];

/// Validates a chat completions body.
pub fn chat_request(body: &Map<String, Value>, limits: &Limits) -> Result<ChatRequest> {
    let common = common_params(body, limits, CHAT_FIELDS)?;
    let messages = match body.get("messages") {
        None | Some(Value::Null) => {
            return Err(ApiError::missing("messages", "a non-empty array of messages"));
        }
        Some(Value::Array(items)) if items.is_empty() => {
            return Err(ApiError::value(
                "messages",
                "`messages` must contain at least one message",
            ));
        }
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, m)| message(i, m))
            .collect::<Result<Vec<_>>>()?,
        Some(other) => return Err(ApiError::wrong_type("messages", "an array of messages", other)),
    };
    for (name, allowed) in [
        ("response_format", "{\"type\": \"text\"}"),
        ("tools", "absent or empty"),
    ] {
        match (name, body.get(name)) {
            (_, None | Some(Value::Null)) => {}
            ("response_format", Some(Value::Object(o))) if o.get("type") == Some(&Value::from("text")) => {}
            ("tools", Some(Value::Array(a))) if a.is_empty() => {}
            _ => {
                return Err(ApiError::unsupported(
                    name,
                    format!("`{name}` is not supported by this server yet (allowed: {allowed})"),
                ));
            }
        }
    }
    for name in ["tool_choice", "function_call"] {
        match body.get(name) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s == "none" || s == "auto" => {}
            Some(_) => {
                return Err(ApiError::unsupported(
                    name,
                    format!("`{name}` is not supported: this server has no tool calling (allowed: \"none\")"),
                ));
            }
        }
    }
    if matches!(body.get("functions"), Some(Value::Array(a)) if !a.is_empty()) {
        return Err(ApiError::unsupported(
            "functions",
            "`functions` is not supported: this server has no tool calling",
        ));
    }
    let mut template_kwargs = match body.get("chat_template_kwargs") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(o)) => o.clone(),
        Some(other) => return Err(ApiError::wrong_type("chat_template_kwargs", "an object", other)),
    };
    if let Some(v) = template_kwargs.get("enable_thinking")
        && !v.is_boolean()
    {
        return Err(ApiError::wrong_type(
            "chat_template_kwargs.enable_thinking",
            "a boolean",
            v,
        ));
    }
    match body.get("reasoning_effort") {
        None | Some(Value::Null) => {}
        Some(Value::String(effort)) => {
            let thinking = match effort.as_str() {
                "none" => false,
                "low" | "medium" | "high" => true,
                _ => {
                    return Err(ApiError::value(
                        "reasoning_effort",
                        format!(
                            "`reasoning_effort` must be one of \"none\", \"low\", \"medium\", \"high\", got {effort:?}"
                        ),
                    ));
                }
            };
            match template_kwargs.get("enable_thinking") {
                Some(Value::Bool(b)) if *b != thinking => {
                    return Err(ApiError::value(
                        "reasoning_effort",
                        format!(
                            "`reasoning_effort` {effort:?} conflicts with `chat_template_kwargs.enable_thinking` = {b}"
                        ),
                    ));
                }
                _ => {
                    template_kwargs.insert("enable_thinking".into(), Value::Bool(thinking));
                }
            }
        }
        Some(other) => return Err(ApiError::wrong_type("reasoning_effort", "a string", other)),
    }
    Ok(ChatRequest {
        common,
        messages,
        add_generation_prompt: opt_bool(body, "add_generation_prompt")?.unwrap_or(true),
        template_kwargs,
        separate_reasoning: opt_bool(body, "separate_reasoning")?.unwrap_or(true),
    })
}

fn message(i: usize, m: &Value) -> Result<ChatMessage> {
    let at = |f: &str| format!("messages[{i}].{f}");
    let Value::Object(m) = m else {
        return Err(ApiError::wrong_type(&format!("messages[{i}]"), "an object", m));
    };
    let role = match m.get("role") {
        None | Some(Value::Null) => return Err(ApiError::missing(&at("role"), "a string")),
        Some(Value::String(r)) => r.clone(),
        Some(other) => return Err(ApiError::wrong_type(&at("role"), "a string", other)),
    };
    const ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];
    if !ROLES.contains(&role.as_str()) {
        return Err(ApiError::value(
            &at("role"),
            format!("unknown role {role:?}: allowed roles are {}", ROLES.join(", ")),
        ));
    }
    let content = match m.get("content") {
        None | Some(Value::Null) if role == "assistant" => None,
        None | Some(Value::Null) => {
            return Err(ApiError::missing(
                &at("content"),
                "a string or an array of text parts",
            ));
        }
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(parts)) => Some(text_parts(&at("content"), parts)?),
        Some(other) => {
            return Err(ApiError::wrong_type(
                &at("content"),
                "a string or an array of text parts",
                other,
            ));
        }
    };
    let mut reasoning_content = None;
    for key in ["reasoning_content", "reasoning"] {
        match m.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if role == "assistant" => {
                reasoning_content.get_or_insert_with(|| s.clone());
            }
            Some(Value::String(_)) => {
                return Err(ApiError::value(
                    &at(key),
                    format!("`{key}` is only allowed on assistant messages"),
                ));
            }
            Some(other) => return Err(ApiError::wrong_type(&at(key), "a string", other)),
        }
    }
    let name = match m.get("name") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => return Err(ApiError::wrong_type(&at("name"), "a string", other)),
    };
    if matches!(m.get("tool_calls"), Some(Value::Array(a)) if !a.is_empty()) {
        return Err(ApiError::unsupported(
            &at("tool_calls"),
            "tool calls are not supported by this server",
        ));
    }
    Ok(ChatMessage {
        role,
        content,
        reasoning_content,
        name,
    })
}

fn text_parts(param: &str, parts: &[Value]) -> Result<String> {
    let mut texts = Vec::with_capacity(parts.len());
    for (j, part) in parts.iter().enumerate() {
        let here = format!("{param}[{j}]");
        let Value::Object(p) = part else {
            return Err(ApiError::wrong_type(&here, "a content part object", part));
        };
        match p.get("type").and_then(Value::as_str) {
            Some("text") => match p.get("text") {
                Some(Value::String(t)) => texts.push(t.as_str()),
                Some(other) => return Err(ApiError::wrong_type(&format!("{here}.text"), "a string", other)),
                None => return Err(ApiError::missing(&format!("{here}.text"), "a string")),
            },
            Some(t @ ("image_url" | "input_audio" | "file" | "image" | "video" | "audio")) => {
                return Err(ApiError::unsupported(
                    &format!("{here}.type"),
                    format!("content parts of type {t:?} are not supported: this model reads text only"),
                ));
            }
            Some(t) => {
                return Err(ApiError::value(
                    &format!("{here}.type"),
                    format!("unknown content part type {t:?}: allowed is \"text\""),
                ));
            }
            None => return Err(ApiError::missing(&format!("{here}.type"), "\"text\"")),
        }
    }
    Ok(texts.join("\n"))
}

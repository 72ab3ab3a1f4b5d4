//! OpenAI-shaped errors: `{"error": {"message", "type", "param", "code"}}` with a string `code`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// Seconds a client should wait before retrying after a `503` (queue full or model loading).
pub const RETRY_AFTER_SECONDS: u64 = 1;

/// An error answered to a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// What was wrong and what is allowed.
    pub message: String,
    /// `invalid_request_error`, `authentication_error`, `not_found_error`, `server_error`, …
    pub kind: &'static str,
    /// The request field at fault, if any (`messages[0].role`).
    pub param: Option<String>,
    /// A stable string code (`invalid_json`, `context_length_exceeded`, …).
    pub code: &'static str,
}

/// The wire shape of [`ApiError`].
#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorInfo<'a>,
}

#[derive(Serialize)]
struct ErrorInfo<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: &'a str,
}

impl ApiError {
    /// A `400 invalid_request_error` naming `param`.
    pub fn invalid(param: impl Into<String>, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: Some(param.into()),
            code,
        }
    }

    /// A `400` for a field of the wrong JSON type.
    pub fn wrong_type(param: &str, expected: &str, found: &serde_json::Value) -> Self {
        Self::invalid(
            param,
            "invalid_type",
            format!("`{param}` must be {expected}, got {}", json_kind(found)),
        )
    }

    /// A `400` for a value out of its allowed range.
    pub fn value(param: &str, message: impl Into<String>) -> Self {
        Self::invalid(param, "invalid_value", message)
    }

    /// A `400 unsupported_parameter`.
    pub fn unsupported(param: &str, message: impl Into<String>) -> Self {
        Self::invalid(param, "unsupported_parameter", message)
    }

    /// A `400` for a required field that is absent or null.
    pub fn missing(param: &str, expected: &str) -> Self {
        Self::invalid(
            param,
            "missing_required_parameter",
            format!("`{param}` is required: {expected}"),
        )
    }

    /// An error with no `param`.
    pub fn new(
        status: StatusCode,
        kind: &'static str,
        code: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            status,
            message: message.into(),
            kind,
            param: None,
            code,
        }
    }

    /// `503 model_loading`: the model is not ready yet.
    pub fn loading() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable_error",
            "model_loading",
            "the model is still loading; retry shortly (GET /health answers 200 once it is ready)",
        )
    }

    /// `503 server_busy`: the queue is full.
    pub fn busy(max_queue: usize) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_busy_error",
            "server_busy",
            format!("the server is busy: {max_queue} requests are already waiting; retry later"),
        )
    }

    /// `500 internal_error` for a failure that is not the client's.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "internal_error",
            message,
        )
    }

    /// The JSON body.
    pub fn body(&self) -> String {
        serde_json::to_string(&ErrorBody {
            error: ErrorInfo {
                message: &self.message,
                kind: self.kind,
                param: self.param.as_deref(),
                code: self.code,
            },
        })
        .unwrap_or_else(|_| r#"{"error":{"message":"unserialisable error","type":"server_error","param":null,"code":"internal_error"}}"#.into())
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status.as_u16(), self.code, self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (
            self.status,
            [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))],
            self.body(),
        )
            .into_response();
        let headers = response.headers_mut();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// The JSON type of a value, in words (`a string`, `null`, …).
pub fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(n) if n.is_f64() => "a non-integer number",
        serde_json::Value::Number(_) => "an integer",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_has_the_openai_shape_with_a_string_code() {
        let e = ApiError::value("temperature", "`temperature` must be in [0, 2], got 3");
        let v: serde_json::Value = serde_json::from_str(&e.body()).unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["param"], "temperature");
        assert_eq!(v["error"]["code"], "invalid_value");
        assert_eq!(v["error"]["message"], "`temperature` must be in [0, 2], got 3");
        let e = ApiError::loading();
        let v: serde_json::Value = serde_json::from_str(&e.body()).unwrap();
        assert!(v["error"]["param"].is_null());
        assert_eq!(e.into_response().headers()["retry-after"], "1");
    }
}

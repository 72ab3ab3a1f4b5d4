//! API keys on every route but `/health` (and `/metrics` with `--public-metrics`), and CORS when
//! `--cors-origin` is given.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::routes::AppState;

/// The key a request presents: `Authorization: Bearer KEY`, else `X-Api-Key: KEY`.
pub fn presented_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        let (scheme, key) = v.trim().split_once(' ')?;
        return scheme.eq_ignore_ascii_case("bearer").then(|| key.trim());
    }
    headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// Whether `key` is one of `keys`, comparing every key in constant time.
pub fn key_matches(keys: &[String], key: &str) -> bool {
    keys.iter()
        .fold(subtle::Choice::from(0), |found, k| {
            found | k.as_bytes().ct_eq(key.as_bytes())
        })
        .into()
}

/// The API-key middleware.
pub async fn require_key(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let keys = &state.settings.api_keys;
    let path = request.uri().path();
    let open = keys.is_empty()
        || path == "/health"
        || (path == "/metrics" && state.settings.public_metrics)
        || request.method() == Method::OPTIONS;
    if open {
        return next.run(request).await;
    }
    match presented_key(request.headers()) {
        Some(key) if key_matches(keys, key) => next.run(request).await,
        presented => {
            let message = if presented.is_some() {
                "invalid API key: the key given in `Authorization: Bearer …` (or `X-Api-Key`) is not accepted"
            } else {
                "missing API key: send `Authorization: Bearer <key>` (or `X-Api-Key: <key>`)"
            };
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "invalid_api_key",
                message,
            )
            .into_response()
        }
    }
}

/// The CORS middleware: answers preflights and marks responses for allowed origins.
pub async fn cors(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let origins = &state.settings.cors_origins;
    let origin = request.headers().get(header::ORIGIN).cloned();
    let allowed = origin.as_ref().and_then(|o| {
        let o_str = o.to_str().ok()?;
        origins.iter().any(|a| a == "*" || a == o_str).then(|| {
            if origins.iter().any(|a| a == "*") {
                HeaderValue::from_static("*")
            } else {
                o.clone()
            }
        })
    });
    let Some(allow) = allowed else {
        return next.run(request).await;
    };
    let preflight = request.method() == Method::OPTIONS
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let mut response = if preflight {
        let mut r = StatusCode::NO_CONTENT.into_response();
        let h = r.headers_mut();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, OPTIONS"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static("authorization, content-type, x-api-key"),
        );
        h.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
        r
    } else {
        next.run(request).await
    };
    let h = response.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allow);
    h.insert(header::VARY, HeaderValue::from_static("Origin"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_read_from_bearer_or_x_api_key() {
        let mut h = HeaderMap::new();
        assert_eq!(presented_key(&h), None);
        h.insert("x-api-key", HeaderValue::from_static("k2"));
        assert_eq!(presented_key(&h), Some("k2"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("bearer  k1 "));
        assert_eq!(presented_key(&h), Some("k1"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(presented_key(&h), None);
        let keys = vec!["secret".to_string(), "other".to_string()];
        assert!(key_matches(&keys, "other"));
        assert!(!key_matches(&keys, "secre"));
        assert!(!key_matches(&keys, "secret2"));
        assert!(!key_matches(&[], "x"));
    }
}

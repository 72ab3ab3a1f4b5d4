//! The HTTP surface: routes, the shared state, and the JSON body reader that turns every bad
//! body into an OpenAI-shaped 4xx (never axum's plain-text 415/422).

mod chat;
mod completions;
mod generate;

use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde_json::{Map, Value, json};

use crate::cli::Settings;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::model::ModelInfo;
use crate::openai::ModelCard;
use crate::validate::{Limits, parse_object};
use crate::worker::Queue;

/// What every handler shares.
#[derive(Clone, Debug)]
pub struct AppState {
    /// Resolved flags.
    pub settings: Arc<Settings>,
    /// The model, once loaded.
    pub model: Arc<OnceLock<Arc<ModelInfo>>>,
    /// The engine queue.
    pub queue: Queue,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Unix seconds at start-up.
    pub created: u64,
}

impl AppState {
    /// The model, or `503 model_loading`.
    pub fn ready(&self) -> Result<Arc<ModelInfo>, ApiError> {
        self.model.get().cloned().ok_or_else(ApiError::loading)
    }

    /// Validation limits for the loaded model.
    pub fn limits(&self, model: &ModelInfo) -> Limits {
        Limits {
            served_model: self.settings.served_model_name.clone(),
            accept_any_model: self.settings.accept_any_model,
            max_tree_budget: self.settings.max_tree_budget,
            vocab_size: model.vocab_size,
            block_size: model.block_size,
            strict: self.settings.strict,
        }
    }
}

/// The router with every route, the JSON 404/405 fallbacks, auth and CORS.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/models", get(models))
        .route("/v1/models/{*id}", get(model))
        .route("/v1/chat/completions", post(chat::completions))
        .route("/v1/chat/completions/render", post(chat::render))
        .route("/v1/completions", post(completions::completions))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::auth::require_key,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), crate::auth::cors))
        .with_state(state)
}

async fn health(State(state): State<AppState>) -> Response {
    match state.ready() {
        Ok(_) => Json(json!({"status": "ok"})).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        state.metrics.render(),
    )
        .into_response()
}

fn card(state: &AppState, model: &ModelInfo) -> ModelCard {
    ModelCard {
        id: state.settings.served_model_name.clone(),
        object: "model",
        created: state.created,
        owned_by: "ddtree",
        max_model_len: model.max_context,
    }
}

async fn models(State(state): State<AppState>) -> Response {
    match state.ready() {
        Ok(m) => Json(json!({"object": "list", "data": [card(&state, &m)]})).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn model(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    let m = match state.ready() {
        Ok(m) => m,
        Err(e) => return e.into_response(),
    };
    if id == state.settings.served_model_name {
        Json(card(&state, &m)).into_response()
    } else {
        model_not_found(&state, &id).into_response()
    }
}

/// `404 model_not_found`.
pub fn model_not_found(state: &AppState, name: &str) -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        message: format!(
            "the model {name:?} does not exist: this server serves {:?}",
            state.settings.served_model_name
        ),
        kind: "not_found_error",
        param: Some("model".into()),
        code: "model_not_found",
    }
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found_error",
        "not_found",
        format!("no route for {method} {}", uri.path()),
    )
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request_error",
        "method_not_allowed",
        format!("{method} is not allowed on {}", uri.path()),
    )
}

/// A JSON response (axum's `json` feature is off: bodies are read by [`read_json`]).
pub struct Json<T>(pub T);

impl<T: serde::Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        match serde_json::to_string(&self.0) {
            Ok(body) => (
                [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))],
                body,
            )
                .into_response(),
            Err(e) => ApiError::internal(format!("serialising the response: {e}")).into_response(),
        }
    }
}

/// Reads a JSON object body: `415` unless `Content-Type: application/json`, `413` past
/// `limit` bytes, `400` for invalid JSON or a non-object.
pub async fn read_json(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<Map<String, Value>, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_request_error",
            "invalid_content_type",
            format!(
                "the request body must be JSON with `Content-Type: application/json`, got {:?}",
                content_type
            ),
        ));
    }
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            "payload_too_large",
            format!("the request body is larger than the server's limit of {limit} bytes"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let bytes = match Limited::new(body, limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => return Err(too_large()),
        Err(e) => {
            return Err(ApiError::invalid(
                "body",
                "invalid_body",
                format!("could not read the request body: {e}"),
            ));
        }
    };
    parse_object(&bytes)
}

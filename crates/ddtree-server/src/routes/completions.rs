//! `POST /v1/completions`: a text prompt (or token ids) continued as it is, without a chat
//! template or a reasoning split.

use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};

use super::generate::{Kind, Prepared, prepare, respond};
use super::{AppState, read_json};
use crate::error::ApiError;
use crate::validate::{Prompt, completion_request};

async fn prepared(state: &AppState, headers: &HeaderMap, body: Body) -> Result<Prepared, ApiError> {
    let model = state.ready()?;
    let body = read_json(headers, body, state.settings.max_body_bytes).await?;
    let request = completion_request(&body, &state.limits(&model))?;
    let ids = match &request.prompt {
        Prompt::Tokens(ids) => ids.clone(),
        Prompt::Text(text) => model
            .tokenizer
            .encode(text.as_str(), false)
            .map_err(|e| {
                ApiError::invalid(
                    "prompt",
                    "invalid_value",
                    format!("cannot tokenize the prompt: {e}"),
                )
            })?
            .get_ids()
            .to_vec(),
    };
    prepare(state, &model, &request.common, ids, None)
}

/// `POST /v1/completions`.
pub async fn completions(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let arrived = Instant::now();
    match prepared(&state, &headers, body).await {
        Ok(p) => respond(&state, Kind::Text, p, arrived).await,
        Err(e) => {
            state.metrics.rejected(e.status.as_u16());
            e.into_response()
        }
    }
}

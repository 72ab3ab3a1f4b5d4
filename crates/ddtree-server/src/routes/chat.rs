//! `POST /v1/chat/completions` and `POST /v1/chat/completions/render`.

use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::generate::{Kind, prepare, respond};
use super::{AppState, Json, read_json};
use crate::error::ApiError;
use crate::model::ModelInfo;
use crate::reasoning::ReasoningSplitter;
use crate::validate::{ChatRequest, chat_request};

/// A validated chat request, its rendered prompt and its ids.
struct Rendered {
    request: ChatRequest,
    text: String,
    ids: Vec<u32>,
}

async fn render_request(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Rendered, std::sync::Arc<ModelInfo>), ApiError> {
    let model = state.ready()?;
    let body = read_json(headers, body, state.settings.max_body_bytes).await?;
    let request = chat_request(&body, &state.limits(&model))?;
    let template = model.template.as_ref().ok_or_else(|| {
        ApiError::invalid(
            "messages",
            "no_chat_template",
            "this model has no chat template: use /v1/completions, or start the server with --chat-template FILE",
        )
    })?;
    let mut kwargs = state.settings.template_kwargs.clone();
    kwargs.extend(request.template_kwargs.clone());
    let text = template.render(&request.messages, request.add_generation_prompt, &kwargs)?;
    let ids = model
        .tokenizer
        .encode(text.as_str(), false)
        .map_err(|e| {
            ApiError::invalid(
                "messages",
                "invalid_value",
                format!("cannot tokenize the prompt: {e}"),
            )
        })?
        .get_ids()
        .to_vec();
    Ok((Rendered { request, text, ids }, model))
}

/// `POST /v1/chat/completions`.
pub async fn completions(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let arrived = Instant::now();
    let prepared = async {
        let (r, model) = render_request(&state, &headers, body).await?;
        let reasoning = r
            .request
            .separate_reasoning
            .then(|| ReasoningSplitter::for_prompt(&r.text).state());
        prepare(&state, &model, &r.request.common, r.ids, reasoning)
    }
    .await;
    match prepared {
        Ok(p) => respond(&state, Kind::Chat, p, arrived).await,
        Err(e) => {
            state.metrics.rejected(e.status.as_u16());
            e.into_response()
        }
    }
}

/// `POST /v1/chat/completions/render`: the prompt a chat request would run, without running it.
pub async fn render(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    match render_request(&state, &headers, body).await {
        Ok((r, _)) => {
            let reasoning_open =
                ReasoningSplitter::for_prompt(&r.text).state() == crate::reasoning::State::Reasoning;
            Json(json!({
                "prompt": r.text,
                "prompt_token_ids": r.ids,
                "reasoning_starts_open": reasoning_open,
            }))
            .into_response()
        }
        Err(e) => e.into_response(),
    }
}

//! The path shared by chat and text completions: context checks and engine parameters
//! ([`prepare`]), then the queue and the response, whole or streamed ([`respond`]).

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use ddtree_engine::{GenerateParams, Mode, SamplingParams};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::{AppState, Json, model_not_found};
use crate::error::ApiError;
use crate::model::ModelInfo;
use crate::openai::{
    AssistantMessage, ChatChoice, ChunkChoice, CompletionTokensDetails, Delta, Envelope, FINGERPRINT,
    TextChoice, Usage, UsageField,
};
use crate::pipeline::TextOptions;
use crate::reasoning::{Split, State};
use crate::sse;
use crate::validate::{CommonParams, ModeRequest};
use crate::worker::{Event, Job, Outcome};

/// Which endpoint answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Text,
}

/// A request ready for the queue.
#[derive(Debug)]
pub struct Prepared {
    /// Prompt ids.
    pub prompt: Vec<u32>,
    /// Engine parameters.
    pub params: GenerateParams,
    /// Text options.
    pub text: TextOptions,
    /// Stream the answer.
    pub stream: bool,
    /// Add the usage chunk to the stream.
    pub include_usage: bool,
}

/// Checks the model name and the context, and resolves the engine parameters.
pub fn prepare(
    state: &AppState,
    model: &ModelInfo,
    common: &CommonParams,
    prompt: Vec<u32>,
    reasoning: Option<State>,
) -> Result<Prepared, ApiError> {
    if !common.unknown.is_empty() {
        tracing::debug!("ignoring unknown request fields: {:?}", common.unknown);
    }
    if let Some(name) = &common.model
        && name != &state.settings.served_model_name
        && !state.settings.accept_any_model
    {
        return Err(model_not_found(state, name));
    }
    if prompt.is_empty() {
        return Err(ApiError::value(
            "prompt",
            "the prompt is empty: at least one token is needed",
        ));
    }
    let max = model.max_context;
    let p = prompt.len();
    if p >= max {
        return Err(ApiError::invalid(
            "messages",
            "context_length_exceeded",
            format!(
                "This model's maximum context length is {max} tokens. However, your prompt resulted in {p} tokens \
                 (at most {} prompt tokens leave room for one output token). Please reduce the length of the prompt.",
                max - 1
            ),
        ));
    }
    let room = max - p;
    let max_tokens = match common.max_tokens {
        None => room,
        Some(m) if m <= room => m,
        Some(_) if state.settings.clamp_max_tokens => room,
        Some(m) => {
            return Err(ApiError::invalid(
                "max_tokens",
                "context_length_exceeded",
                format!(
                    "This model's maximum context length is {max} tokens. However, you requested {} tokens ({p} in \
                     the prompt, {m} in the completion). Please reduce the length of the prompt or completion \
                     (at most {room} completion tokens fit).",
                    p.saturating_add(m)
                ),
            ));
        }
    };
    let defaults = model.sampling_defaults.unwrap_or((0.0, 1.0, 0));
    let sampling = SamplingParams {
        temperature: common.temperature.unwrap_or(defaults.0),
        top_p: common.top_p.unwrap_or(defaults.1),
        top_k: common.top_k.unwrap_or(defaults.2),
        seed: common.seed.unwrap_or_else(random_seed),
    };
    let mode = match common.mode.unwrap_or(state.settings.default_mode) {
        ModeRequest::Tree(0) => Mode::Autoregressive,
        ModeRequest::Tree(budget) => Mode::Tree { budget },
        ModeRequest::Chain => Mode::Chain,
    };
    let mut stop_tokens = common.stop_token_ids.clone();
    if !common.ignore_eos {
        stop_tokens.extend(&model.eos_ids);
    }
    stop_tokens.sort_unstable();
    stop_tokens.dedup();
    Ok(Prepared {
        prompt,
        params: GenerateParams {
            max_new_tokens: max_tokens,
            stop_tokens: stop_tokens.clone(),
            mode,
            sampling,
            trace: false,
        },
        text: TextOptions {
            stop: common.stop.clone(),
            reasoning,
            hidden: stop_tokens,
        },
        stream: common.stream,
        include_usage: common.include_usage,
    })
}

fn random_seed() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ COUNTER.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
}

fn request_id(kind: Kind) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let prefix = match kind {
        Kind::Chat => "chatcmpl",
        Kind::Text => "cmpl",
    };
    format!(
        "{prefix}-{:016x}{:08x}",
        random_seed(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// What every response and chunk of one request repeats.
#[derive(Clone, Debug)]
struct Head {
    kind: Kind,
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
}

impl Head {
    fn envelope<C>(&self, object: &'static str, choices: Vec<C>) -> Envelope<C> {
        Envelope {
            id: self.id.clone(),
            object,
            created: self.created,
            model: self.model.clone(),
            system_fingerprint: FINGERPRINT,
            choices,
            usage: if self.include_usage {
                UsageField::Null
            } else {
                UsageField::Absent
            },
            ddtree: None,
            metrics: None,
        }
    }

    fn chunk(&self, delta: Delta, finish: Option<&'static str>) -> String {
        match self.kind {
            Kind::Chat => sse::frame(&self.envelope(
                "chat.completion.chunk",
                vec![ChunkChoice {
                    index: 0,
                    delta,
                    finish_reason: finish,
                    logprobs: None,
                }],
            )),
            Kind::Text => sse::frame(&self.envelope(
                "text_completion",
                vec![TextChoice {
                    index: 0,
                    text: delta.content.unwrap_or_default(),
                    finish_reason: finish,
                    logprobs: None,
                }],
            )),
        }
    }

    fn chunk_object(&self) -> &'static str {
        match self.kind {
            Kind::Chat => "chat.completion.chunk",
            Kind::Text => "text_completion",
        }
    }

    /// The frames after the last delta: the finish chunk, the usage chunk (`include_usage`),
    /// `[DONE]`. The `ddtree` object rides the last JSON chunk.
    fn closing(&self, outcome: &Outcome) -> String {
        let on_finish = !self.include_usage;
        let reason = Some(outcome.finish_reason);
        let mut out = match self.kind {
            Kind::Chat => {
                let choice = ChunkChoice {
                    index: 0,
                    delta: Delta::default(),
                    finish_reason: reason,
                    logprobs: None,
                };
                sse::frame(&with_stats(
                    self.envelope(self.chunk_object(), vec![choice]),
                    outcome,
                    on_finish,
                ))
            }
            Kind::Text => {
                let choice = TextChoice {
                    index: 0,
                    text: String::new(),
                    finish_reason: reason,
                    logprobs: None,
                };
                sse::frame(&with_stats(
                    self.envelope(self.chunk_object(), vec![choice]),
                    outcome,
                    on_finish,
                ))
            }
        };
        if self.include_usage {
            let mut e = self.envelope::<ChunkChoice>(self.chunk_object(), vec![]);
            e.usage = UsageField::Some(usage(outcome));
            out.push_str(&sse::frame(&with_stats(e, outcome, true)));
        }
        out.push_str(sse::DONE);
        out
    }
}

fn with_stats<C>(mut e: Envelope<C>, outcome: &Outcome, attach: bool) -> Envelope<C> {
    if attach {
        e.ddtree = Some(outcome.stats.clone());
        e.metrics = Some(outcome.stats.vllm());
    }
    e
}

fn usage(o: &Outcome) -> Usage {
    Usage {
        prompt_tokens: o.prompt_tokens,
        completion_tokens: o.completion_tokens,
        total_tokens: o.prompt_tokens + o.completion_tokens,
        completion_tokens_details: o
            .reasoning_tokens
            .map(|r| CompletionTokensDetails { reasoning_tokens: r }),
        prompt_tokens_details: Default::default(),
    }
}

/// Queues the request and answers: one JSON body, or an event stream.
pub async fn respond(state: &AppState, kind: Kind, prepared: Prepared, arrived: Instant) -> Response {
    let (tx, rx) = unbounded_channel();
    let job = Job {
        prompt: prepared.prompt,
        params: prepared.params,
        text: prepared.text,
        events: tx,
        arrived,
        deadline: state.settings.request_timeout.map(|t| arrived + t),
    };
    if let Err(e) = state.queue.submit(job) {
        state.metrics.rejected(e.status.as_u16());
        return e.into_response();
    }
    let head = Head {
        kind,
        id: request_id(kind),
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        model: state.settings.served_model_name.clone(),
        include_usage: prepared.include_usage,
    };
    if prepared.stream {
        stream(head, rx)
    } else {
        whole(head, rx).await
    }
}

/// Waits for the whole generation. Dropping this future (the client went away) drops the
/// receiver, which stops the engine within a round.
async fn whole(head: Head, mut rx: UnboundedReceiver<Event>) -> Response {
    let mut text = Split::default();
    let outcome = loop {
        match rx.recv().await {
            Some(Event::Delta(d)) => text.append(d),
            Some(Event::Done(o)) => break o,
            Some(Event::Failed(e)) => return e.into_response(),
            None => return ApiError::internal("the engine worker dropped the request").into_response(),
        }
    };
    let mut head = head;
    head.include_usage = true;
    match head.kind {
        Kind::Chat => {
            let reasoning = (!text.reasoning.is_empty()).then_some(text.reasoning);
            let mut e = head.envelope(
                "chat.completion",
                vec![ChatChoice {
                    index: 0,
                    message: AssistantMessage {
                        role: "assistant",
                        content: text.content,
                        reasoning_content: reasoning.clone(),
                        reasoning,
                    },
                    finish_reason: outcome.finish_reason,
                    logprobs: None,
                }],
            );
            finish_envelope(&mut e, &outcome);
            Json(e).into_response()
        }
        Kind::Text => {
            let mut e = head.envelope(
                "text_completion",
                vec![TextChoice {
                    index: 0,
                    text: text.content,
                    finish_reason: Some(outcome.finish_reason),
                    logprobs: None,
                }],
            );
            finish_envelope(&mut e, &outcome);
            Json(e).into_response()
        }
    }
}

fn finish_envelope<C>(e: &mut Envelope<C>, outcome: &Outcome) {
    e.usage = UsageField::Some(usage(outcome));
    e.ddtree = Some(outcome.stats.clone());
    e.metrics = Some(outcome.stats.vllm());
}

fn delta(kind: Kind, split: Split) -> Delta {
    let nonempty = |s: String| (!s.is_empty()).then_some(s);
    match kind {
        Kind::Chat => {
            let reasoning = nonempty(split.reasoning);
            Delta {
                role: None,
                content: nonempty(split.content),
                reasoning_content: reasoning.clone(),
                reasoning,
            }
        }
        Kind::Text => Delta {
            content: Some(split.content),
            ..Delta::default()
        },
    }
}

/// The event stream: a role chunk, a chunk per round with new text, the closing frames.
fn stream(head: Head, rx: UnboundedReceiver<Event>) -> Response {
    let first = match head.kind {
        Kind::Chat => Some(head.chunk(
            Delta {
                role: Some("assistant"),
                content: Some(String::new()),
                ..Delta::default()
            },
            None,
        )),
        Kind::Text => None,
    };
    let frames = futures_util::stream::unfold(
        (head, rx, first, false),
        |(head, mut rx, first, done)| async move {
            if let Some(frame) = first {
                return Some((Ok::<_, Infallible>(frame), (head, rx, None, false)));
            }
            if done {
                return None;
            }
            loop {
                let frame = match rx.recv().await {
                    Some(Event::Delta(split)) => {
                        let d = delta(head.kind, split);
                        if d.content.as_deref().unwrap_or("").is_empty() && d.reasoning.is_none() {
                            continue;
                        }
                        return Some((Ok(head.chunk(d, None)), (head, rx, None, false)));
                    }
                    Some(Event::Done(outcome)) => head.closing(&outcome),
                    Some(Event::Failed(e)) => format!("{}{}", sse::frame_raw(&e.body()), sse::DONE),
                    None => format!(
                        "{}{}",
                        sse::frame_raw(&ApiError::internal("the engine worker dropped the request").body()),
                        sse::DONE
                    ),
                };
                return Some((Ok(frame), (head, rx, None, true)));
            }
        },
    );
    let mut response = Body::from_stream(frames).into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(sse::CONTENT_TYPE));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

//! The bounded FIFO queue in front of the single engine worker thread.
//!
//! HTTP handlers validate a request, then [`Queue::submit`] a [`Job`] holding an unbounded
//! channel back to the handler; a full queue is `503 server_busy` with `Retry-After`. The worker
//! owns the engine (it loads it, so the model never crosses threads), takes jobs in order, skips
//! those whose client has gone, and checks `is_closed()` in the engine's per-round callback so a
//! client that leaves frees the engine within one decode round, streaming or not.

use std::ops::ControlFlow;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use ddtree_engine::{EngineError, FinishReason, GenerateParams, Generation, Mode, SamplingParams};
use tokio::sync::mpsc::UnboundedSender;

use crate::error::ApiError;
use crate::metrics::{Metrics, RequestRecord};
use crate::model::{Generator, Loaded, ModelInfo};
use crate::openai::{DdtreeStats, SamplingInfo};
use crate::pipeline::{TextOptions, TextPipeline};
use crate::reasoning::Split;

/// One request for the engine.
#[derive(Debug)]
pub struct Job {
    /// Prompt token ids.
    pub prompt: Vec<u32>,
    /// Engine parameters.
    pub params: GenerateParams,
    /// Stop strings and the reasoning split.
    pub text: TextOptions,
    /// Where the results go; closed when the client has gone.
    pub events: UnboundedSender<Event>,
    /// When the request arrived.
    pub arrived: Instant,
    /// Give up after this instant.
    pub deadline: Option<Instant>,
}

/// What the worker sends back for a job.
#[derive(Debug)]
pub enum Event {
    /// Newly final text (one per decode round at most).
    Delta(Split),
    /// The generation ended normally.
    Done(Box<Outcome>),
    /// The generation failed (or timed out).
    Failed(ApiError),
}

/// The end of a generation.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// `stop` or `length`.
    pub finish_reason: &'static str,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Emitted tokens.
    pub completion_tokens: usize,
    /// Reasoning tokens (when split).
    pub reasoning_tokens: Option<usize>,
    /// The `ddtree` object.
    pub stats: DdtreeStats,
}

/// The sending side of the queue.
#[derive(Clone, Debug)]
pub struct Queue {
    tx: SyncSender<Job>,
    max_queue: usize,
    metrics: Arc<Metrics>,
}

impl Queue {
    /// Enqueues `job`, or answers `503 server_busy` when `max_queue` jobs already wait.
    pub fn submit(&self, job: Job) -> Result<(), ApiError> {
        self.metrics.add_waiting(1);
        match self.tx.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => {
                self.metrics.add_waiting(-1);
                Err(ApiError::busy(self.max_queue))
            }
            Err(TrySendError::Disconnected(_)) => {
                self.metrics.add_waiting(-1);
                Err(ApiError::internal("the engine worker has stopped"))
            }
        }
    }
}

/// Starts the worker thread: it runs `load`, publishes the model into `ready`, then serves the
/// queue. A failed load is reported through `on_load_error` and the thread ends.
pub fn spawn(
    load: Box<dyn FnOnce() -> Result<Loaded, String> + Send>,
    max_queue: usize,
    metrics: Arc<Metrics>,
    ready: Arc<OnceLock<Arc<ModelInfo>>>,
    on_load_error: Box<dyn FnOnce(String) + Send>,
) -> Queue {
    let (tx, rx) = sync_channel(max_queue);
    let queue = Queue {
        tx,
        max_queue,
        metrics: metrics.clone(),
    };
    std::thread::Builder::new()
        .name("ddtree-engine".into())
        .spawn(move || match load() {
            Ok((model, mut engine)) => {
                let model = Arc::new(model);
                metrics.set_block_size(model.block_size);
                let _ = ready.set(model.clone());
                tracing::info!("model ready");
                serve(&mut *engine, &model, &rx, &metrics);
            }
            Err(e) => on_load_error(e),
        })
        .map(|_| ())
        .unwrap_or_else(|e| tracing::error!("cannot start the engine thread: {e}"));
    queue
}

fn serve(engine: &mut dyn Generator, model: &ModelInfo, rx: &Receiver<Job>, metrics: &Metrics) {
    while let Ok(job) = rx.recv() {
        metrics.add_waiting(-1);
        metrics.add_running(1);
        let record = run(engine, model, job);
        metrics.add_running(-1);
        metrics.record(&record);
    }
}

/// Runs one job to its end and says what to count.
fn run(engine: &mut dyn Generator, model: &ModelInfo, job: Job) -> RequestRecord {
    let start = Instant::now();
    let queue_time = start - job.arrived;
    let mut record = RequestRecord {
        prompt_tokens: job.prompt.len(),
        queue_time: Some(queue_time),
        ..RequestRecord::default()
    };
    if job.events.is_closed() {
        return RequestRecord {
            status: 499,
            finish_reason: "abort",
            prompt_tokens: 0,
            ..record
        };
    }
    if job.deadline.is_some_and(|d| start >= d) {
        let _ = job.events.send(Event::Failed(timeout()));
        return RequestRecord {
            status: 504,
            finish_reason: "timeout",
            prompt_tokens: 0,
            ..record
        };
    }
    let mut pipe = TextPipeline::new(&job.text);
    let mut first_token: Option<Instant> = None;
    let (mut gone, mut timed_out) = (false, false);
    let result = engine.generate(&job.prompt, &job.params, &mut |chunk| {
        first_token.get_or_insert_with(Instant::now);
        let mut delta = Split::default();
        let stopped = pipe.push(&model.tokenizer, chunk, &mut delta);
        if (!delta.is_empty() && job.events.send(Event::Delta(delta)).is_err()) || job.events.is_closed() {
            gone = true;
            return ControlFlow::Break(());
        }
        if stopped {
            return ControlFlow::Break(());
        }
        if job.deadline.is_some_and(|d| Instant::now() >= d) {
            timed_out = true;
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    });
    let end = Instant::now();
    record.e2e = Some(end - job.arrived);
    record.ttft = first_token.map(|t| t - job.arrived);
    let generation = match result {
        Ok(g) => g,
        Err(e) => {
            let error = engine_error(&e);
            tracing::warn!("generation failed: {e}");
            record.status = error.status.as_u16();
            record.finish_reason = "error";
            let _ = job.events.send(Event::Failed(error));
            return record;
        }
    };
    let emitted = pipe.emitted();
    add_spec_counts(&mut record, &generation, emitted);
    if gone {
        record.status = 499;
        record.finish_reason = "abort";
        return record;
    }
    if timed_out {
        record.status = 504;
        record.finish_reason = "timeout";
        let _ = job.events.send(Event::Failed(timeout()));
        return record;
    }
    let mut tail = Split::default();
    pipe.finish(&model.tokenizer, &mut tail);
    if !tail.is_empty() {
        let _ = job.events.send(Event::Delta(tail));
    }
    let finish_reason = if pipe.stop_matched() || generation.finish_reason == FinishReason::Stop {
        "stop"
    } else {
        "length"
    };
    record.status = 200;
    record.finish_reason = finish_reason;
    if emitted > 1 {
        record.inter_token = Some(generation.metrics.decode_time / (emitted as u32 - 1));
    }
    let stats = stats(
        &generation,
        &job,
        emitted,
        queue_time,
        first_token.map(|t| t - job.arrived),
    );
    let outcome = Outcome {
        finish_reason,
        prompt_tokens: job.prompt.len(),
        completion_tokens: emitted,
        reasoning_tokens: pipe.reasoning_tokens(),
        stats,
    };
    let _ = job.events.send(Event::Done(Box::new(outcome)));
    record
}

fn add_spec_counts(record: &mut RequestRecord, g: &Generation, emitted: usize) {
    let m = &g.metrics;
    record.generation_tokens = emitted;
    record.drafts = if m.draft_tokens > 0 { m.decode_rounds } else { 0 };
    record.draft_tokens = m.draft_tokens;
    record.accepted_tokens = m.accepted_draft_tokens;
    record.acceptance_histogram = m.acceptance_histogram.clone();
}

fn stats(g: &Generation, job: &Job, emitted: usize, queue: Duration, ttft: Option<Duration>) -> DdtreeStats {
    let m = &g.metrics;
    let decode = m.decode_time.as_secs_f64();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    DdtreeStats {
        mode: match job.params.mode {
            Mode::Autoregressive | Mode::Tree { budget: 0 } => "autoregressive",
            Mode::Chain => "chain",
            Mode::Tree { .. } => "tree",
        },
        block_size: m.block_size,
        tree_budget: m.tree_budget,
        decode_rounds: m.decode_rounds,
        mean_acceptance_length: m.mean_acceptance_length,
        output_tokens: emitted,
        tokens_per_second: if decode > 0.0 {
            emitted as f64 / decode
        } else {
            0.0
        },
        num_draft_tokens: m.draft_tokens,
        num_accepted_draft_tokens: m.accepted_draft_tokens,
        acceptance_histogram: m.acceptance_histogram.clone(),
        queue_ms: ms(queue),
        ttft_ms: ttft.map_or(0.0, ms),
        decode_ms: ms(m.decode_time),
        sampling: sampling_info(&job.params.sampling),
    }
}

/// The sampling applied: greedy decoding reports no truncation and seed 0.
fn sampling_info(s: &SamplingParams) -> SamplingInfo {
    if s.is_greedy() {
        return SamplingInfo {
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            seed: 0,
        };
    }
    SamplingInfo {
        temperature: s.temperature,
        top_p: s.top_p,
        top_k: s.top_k,
        seed: s.seed,
    }
}

fn timeout() -> ApiError {
    ApiError::new(
        StatusCode::GATEWAY_TIMEOUT,
        "timeout_error",
        "request_timeout",
        "the request ran past the server's --request-timeout",
    )
}

/// Engine errors caused by the request are `400`s (they are validated before, so these are
/// defence in depth); the rest are the server's.
fn engine_error(e: &EngineError) -> ApiError {
    match e {
        EngineError::PromptTooLong { .. } => {
            ApiError::invalid("messages", "context_length_exceeded", e.to_string())
        }
        EngineError::EmptyPrompt | EngineError::TokenOutOfVocab { .. } => {
            ApiError::invalid("prompt", "invalid_value", e.to_string())
        }
        EngineError::BudgetTooLarge { .. } => ApiError::value("tree_budget", e.to_string()),
        _ => ApiError::internal(format!("generation failed: {e}")),
    }
}

//! Response types: the OpenAI shapes plus the `ddtree` extension object (every field is defined
//! in `docs/server.md`) and vLLM's `metrics.speculative_decoding`.

use serde::Serialize;

/// Token counts of one request.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Usage {
    /// Prompt tokens (after the chat template).
    pub prompt_tokens: usize,
    /// Emitted tokens (the stop token included; nothing after a stop string).
    pub completion_tokens: usize,
    /// `prompt_tokens + completion_tokens`.
    pub total_tokens: usize,
    /// Reasoning tokens, when the output was split.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<CompletionTokensDetails>,
    /// Cached prompt tokens (always 0: there is no prefix cache yet).
    pub prompt_tokens_details: PromptTokensDetails,
}

/// `usage.completion_tokens_details`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CompletionTokensDetails {
    /// Tokens generated while the reasoning block was open (its closing tag included).
    pub reasoning_tokens: usize,
}

/// `usage.prompt_tokens_details`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens served from a cache.
    pub cached_tokens: usize,
}

/// The sampling that was applied.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SamplingInfo {
    /// 0 = greedy.
    pub temperature: f32,
    /// Nucleus mass (1 = off).
    pub top_p: f32,
    /// Top-k cut (0 = off).
    pub top_k: usize,
    /// Seed of the sampler (meaningless when greedy).
    pub seed: u64,
}

/// The `ddtree` extension object.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DdtreeStats {
    /// `tree`, `chain` or `autoregressive`.
    pub mode: &'static str,
    /// Drafter block size (bonus included).
    pub block_size: usize,
    /// Draft nodes per round (root excluded): the budget, `block_size - 1` for a chain, 0 for
    /// autoregressive decoding.
    pub tree_budget: usize,
    /// Verify rounds after the prefill.
    pub decode_rounds: usize,
    /// Mean tokens committed per verify round, the root included (≥ 1); the prefill's token is
    /// not a round.
    pub mean_acceptance_length: f64,
    /// Emitted tokens (= `usage.completion_tokens`).
    pub output_tokens: usize,
    /// `output_tokens / decode_ms × 1000`.
    pub tokens_per_second: f64,
    /// Draft nodes verified, summed over rounds.
    pub num_draft_tokens: usize,
    /// Draft nodes accepted, summed over rounds (`Σ (τ − 1)`).
    pub num_accepted_draft_tokens: usize,
    /// `acceptance_histogram[τ]` = rounds that committed τ tokens.
    pub acceptance_histogram: Vec<u64>,
    /// Arrival to the start of the generation (time in the queue).
    pub queue_ms: f64,
    /// Arrival to the first token (queue and prefill).
    pub ttft_ms: f64,
    /// First token to the end (the decode rounds).
    pub decode_ms: f64,
    /// The sampling that was applied.
    pub sampling: SamplingInfo,
}

/// vLLM's per-request `metrics.speculative_decoding` object.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SpecDecodingMetrics {
    /// `1 + num_accepted_draft_tokens / num_spec_steps`.
    pub mean_acceptance_length: f64,
    /// `num_accepted_draft_tokens / num_draft_tokens`.
    pub draft_acceptance_rate: f64,
    /// Index j = steps that accepted exactly j draft tokens.
    pub acceptance_histogram: Vec<u64>,
    /// Verify steps.
    pub num_spec_steps: usize,
    /// Draft tokens accepted.
    pub num_accepted_draft_tokens: usize,
    /// Draft tokens verified.
    pub num_draft_tokens: usize,
}

/// The top-level `metrics` object.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ResponseMetrics {
    /// Speculative decoding statistics.
    pub speculative_decoding: SpecDecodingMetrics,
}

impl DdtreeStats {
    /// The same statistics in vLLM's shape.
    pub fn vllm(&self) -> ResponseMetrics {
        let steps = self.decode_rounds;
        ResponseMetrics {
            speculative_decoding: SpecDecodingMetrics {
                mean_acceptance_length: self.mean_acceptance_length,
                draft_acceptance_rate: if self.num_draft_tokens > 0 {
                    self.num_accepted_draft_tokens as f64 / self.num_draft_tokens as f64
                } else {
                    0.0
                },
                acceptance_histogram: self.acceptance_histogram.iter().skip(1).copied().collect(),
                num_spec_steps: steps,
                num_accepted_draft_tokens: self.num_accepted_draft_tokens,
                num_draft_tokens: self.num_draft_tokens,
            },
        }
    }
}

/// The assistant message of a chat completion.
#[derive(Clone, Debug, Serialize)]
pub struct AssistantMessage {
    /// Always `assistant`.
    pub role: &'static str,
    /// The answer.
    pub content: String,
    /// The reasoning (`null` when there was none).
    pub reasoning_content: Option<String>,
    /// The same as `reasoning_content` (vLLM's newer name).
    pub reasoning: Option<String>,
}

/// One choice of a chat completion.
#[derive(Clone, Debug, Serialize)]
pub struct ChatChoice {
    /// Always 0.
    pub index: usize,
    /// The message.
    pub message: AssistantMessage,
    /// `stop` or `length`.
    pub finish_reason: &'static str,
    /// Always null.
    pub logprobs: Option<()>,
}

/// One choice of a text completion.
#[derive(Clone, Debug, Serialize)]
pub struct TextChoice {
    /// Always 0.
    pub index: usize,
    /// The text (the whole text, or this chunk's piece when streaming).
    pub text: String,
    /// `stop`, `length`, or null in a stream's middle chunks.
    pub finish_reason: Option<&'static str>,
    /// Always null.
    pub logprobs: Option<()>,
}

/// A delta of a streamed chat completion.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Delta {
    /// `assistant` in the first chunk only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    /// Answer text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Reasoning text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// The same as `reasoning_content`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
}

/// One choice of a chat chunk.
#[derive(Clone, Debug, Serialize)]
pub struct ChunkChoice {
    /// Always 0.
    pub index: usize,
    /// What is new.
    pub delta: Delta,
    /// Set once, on the last content chunk.
    pub finish_reason: Option<&'static str>,
    /// Always null.
    pub logprobs: Option<()>,
}

/// A full response or a stream chunk: the envelope shared by both endpoints.
#[derive(Clone, Debug, Serialize)]
pub struct Envelope<C> {
    /// `chatcmpl-…` / `cmpl-…`, the same on every chunk.
    pub id: String,
    /// `chat.completion`, `chat.completion.chunk` or `text_completion`.
    pub object: &'static str,
    /// Unix seconds, the same on every chunk.
    pub created: u64,
    /// The served model name.
    pub model: String,
    /// Build id.
    pub system_fingerprint: &'static str,
    /// Zero or one choice.
    pub choices: Vec<C>,
    /// Present on full responses, on the final chunk of `include_usage` streams, and as
    /// `null` on the other chunks of those streams.
    #[serde(skip_serializing_if = "UsageField::is_absent")]
    pub usage: UsageField,
    /// The `ddtree` object (full responses and the last chunk of a stream).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ddtree: Option<DdtreeStats>,
    /// vLLM's per-request metrics (same places as `ddtree`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics: Option<ResponseMetrics>,
}

/// `usage` as absent, `null` or a value.
#[derive(Clone, Debug, Default)]
pub enum UsageField {
    /// Not serialised.
    #[default]
    Absent,
    /// `null`.
    Null,
    /// The counts.
    Some(Usage),
}

impl UsageField {
    fn is_absent(&self) -> bool {
        matches!(self, UsageField::Absent)
    }
}

impl Serialize for UsageField {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            UsageField::Absent | UsageField::Null => s.serialize_none(),
            UsageField::Some(u) => u.serialize(s),
        }
    }
}

/// The build id reported as `system_fingerprint`.
pub const FINGERPRINT: &str = concat!("ddtree-", env!("CARGO_PKG_VERSION"));

/// `GET /v1/models` entry.
#[derive(Clone, Debug, Serialize)]
pub struct ModelCard {
    /// The served name.
    pub id: String,
    /// Always `model`.
    pub object: &'static str,
    /// Unix seconds at start-up.
    pub created: u64,
    /// Always `ddtree`.
    pub owned_by: &'static str,
    /// The maximum context (prompt + output tokens).
    pub max_model_len: usize,
}

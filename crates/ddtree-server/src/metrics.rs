//! Prometheus metrics in the text exposition format, under the `ddtree_` prefix. Ratios are not
//! exported: derive them from counters in PromQL (vLLM's semantics, so the same queries work).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// Latency buckets in seconds.
const LATENCY_BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

#[derive(Clone, Debug)]
struct Histogram {
    bounds: Vec<f64>,
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &[f64]) -> Self {
        Self {
            bounds: bounds.to_vec(),
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe_n(&mut self, v: f64, n: u64) {
        for (b, c) in self.bounds.iter().zip(&mut self.counts) {
            if v <= *b {
                *c += n;
            }
        }
        self.sum += v * n as f64;
        self.count += n;
    }

    fn render(&self, name: &str, help: &str, out: &mut String) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {c}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{le=\"+Inf\"}} {}\n{name}_sum {}\n{name}_count {}",
            self.count, self.sum, self.count
        );
    }
}

/// What one finished generation adds to the counters.
#[derive(Clone, Debug, Default)]
pub struct RequestRecord {
    /// HTTP status (499 when the client went away).
    pub status: u16,
    /// `stop`, `length`, `abort`, `error`, `timeout`, or `none` (rejected before generating).
    pub finish_reason: &'static str,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Emitted tokens.
    pub generation_tokens: usize,
    /// Verify rounds that drafted (0 in autoregressive mode).
    pub drafts: usize,
    /// Draft tokens (tree nodes) verified.
    pub draft_tokens: usize,
    /// Draft tokens accepted.
    pub accepted_tokens: usize,
    /// `acceptance_histogram[τ]` = rounds that committed τ tokens.
    pub acceptance_histogram: Vec<u64>,
    /// Time in the queue.
    pub queue_time: Option<Duration>,
    /// Time to the first token (from arrival).
    pub ttft: Option<Duration>,
    /// Arrival to the end.
    pub e2e: Option<Duration>,
    /// Mean time per output token after the first.
    pub inter_token: Option<Duration>,
}

#[derive(Clone, Debug)]
struct Inner {
    requests: BTreeMap<(u16, &'static str), u64>,
    prompt_tokens: u64,
    generation_tokens: u64,
    drafts: u64,
    draft_tokens: u64,
    accepted_tokens: u64,
    accepted_per_pos: Vec<u64>,
    acceptance_length: Histogram,
    ttft: Histogram,
    e2e: Histogram,
    queue: Histogram,
    itl: Histogram,
}

/// The server's metrics registry.
#[derive(Debug)]
pub struct Metrics {
    inner: Mutex<Inner>,
    running: AtomicI64,
    waiting: AtomicI64,
    block_size: AtomicI64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// An empty registry.
    pub fn new() -> Self {
        Self {
            inner: Mutex::new(Inner {
                requests: BTreeMap::new(),
                prompt_tokens: 0,
                generation_tokens: 0,
                drafts: 0,
                draft_tokens: 0,
                accepted_tokens: 0,
                accepted_per_pos: Vec::new(),
                acceptance_length: Histogram::new(&[]),
                ttft: Histogram::new(&LATENCY_BUCKETS),
                e2e: Histogram::new(&LATENCY_BUCKETS),
                queue: Histogram::new(&LATENCY_BUCKETS),
                itl: Histogram::new(&LATENCY_BUCKETS),
            }),
            running: AtomicI64::new(0),
            waiting: AtomicI64::new(0),
            block_size: AtomicI64::new(0),
        }
    }

    /// Sets the drafter's block size (the acceptance-length buckets are `1..=block_size`).
    pub fn set_block_size(&self, block_size: usize) {
        self.block_size.store(block_size as i64, Ordering::Relaxed);
        let bounds: Vec<f64> = (1..=block_size.max(1)).map(|b| b as f64).collect();
        self.lock().acceptance_length = Histogram::new(&bounds);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds `delta` to the running-requests gauge.
    pub fn add_running(&self, delta: i64) {
        self.running.fetch_add(delta, Ordering::Relaxed);
    }

    /// Adds `delta` to the waiting-requests gauge.
    pub fn add_waiting(&self, delta: i64) {
        self.waiting.fetch_add(delta, Ordering::Relaxed);
    }

    /// Counts a request rejected before it reached the queue.
    pub fn rejected(&self, status: u16) {
        self.record(&RequestRecord {
            status,
            finish_reason: "none",
            ..RequestRecord::default()
        });
    }

    /// Counts one request and its generation.
    pub fn record(&self, r: &RequestRecord) {
        let mut guard = self.lock();
        let m = &mut *guard;
        *m.requests.entry((r.status, r.finish_reason)).or_default() += 1;
        m.prompt_tokens += r.prompt_tokens as u64;
        m.generation_tokens += r.generation_tokens as u64;
        m.drafts += r.drafts as u64;
        m.draft_tokens += r.draft_tokens as u64;
        m.accepted_tokens += r.accepted_tokens as u64;
        for (tau, &rounds) in r.acceptance_histogram.iter().enumerate() {
            if rounds == 0 {
                continue;
            }
            if r.drafts > 0 {
                // A round that committed τ tokens accepted draft positions 0..τ-1.
                let accepted = tau.saturating_sub(1);
                if m.accepted_per_pos.len() < accepted {
                    m.accepted_per_pos.resize(accepted, 0);
                }
                for p in &mut m.accepted_per_pos[..accepted] {
                    *p += rounds;
                }
            }
            m.acceptance_length.observe_n(tau as f64, rounds);
        }
        for (h, v) in [
            (&mut m.queue, r.queue_time),
            (&mut m.ttft, r.ttft),
            (&mut m.e2e, r.e2e),
            (&mut m.itl, r.inter_token),
        ] {
            if let Some(d) = v {
                h.observe_n(d.as_secs_f64(), 1);
            }
        }
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let m = self.lock().clone();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP ddtree_build_info Build of the server.\n# TYPE ddtree_build_info gauge\nddtree_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        let gauges = [
            (
                "ddtree_num_requests_running",
                "Requests in the engine now.",
                self.running.load(Ordering::Relaxed),
            ),
            (
                "ddtree_num_requests_waiting",
                "Requests in the queue now.",
                self.waiting.load(Ordering::Relaxed),
            ),
        ];
        for (name, help, v) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        }
        let _ = writeln!(
            out,
            "# HELP ddtree_requests_total Requests by HTTP status and finish reason.\n# TYPE ddtree_requests_total counter"
        );
        for ((status, reason), n) in &m.requests {
            let _ = writeln!(
                out,
                "ddtree_requests_total{{status=\"{status}\",finish_reason=\"{reason}\"}} {n}"
            );
        }
        let counters = [
            (
                "ddtree_prompt_tokens_total",
                "Prompt tokens prefilled.",
                m.prompt_tokens,
            ),
            (
                "ddtree_generation_tokens_total",
                "Tokens emitted.",
                m.generation_tokens,
            ),
            (
                "ddtree_spec_decode_num_drafts_total",
                "Verify rounds that drafted.",
                m.drafts,
            ),
            (
                "ddtree_spec_decode_num_draft_tokens_total",
                "Draft tokens (tree nodes) verified.",
                m.draft_tokens,
            ),
            (
                "ddtree_spec_decode_num_accepted_tokens_total",
                "Draft tokens accepted.",
                m.accepted_tokens,
            ),
        ];
        for (name, help, v) in counters {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
        }
        let name = "ddtree_spec_decode_num_accepted_tokens_per_pos_total";
        let _ = writeln!(
            out,
            "# HELP {name} Rounds that accepted a draft token at this depth (0-based).\n# TYPE {name} counter"
        );
        let block = self.block_size.load(Ordering::Relaxed).max(1) as usize;
        for p in 0..block.saturating_sub(1).max(m.accepted_per_pos.len()) {
            let v = m.accepted_per_pos.get(p).copied().unwrap_or(0);
            let _ = writeln!(out, "{name}{{position=\"{p}\"}} {v}");
        }
        m.acceptance_length.render(
            "ddtree_spec_decode_acceptance_length",
            "Tokens committed per verify round (the root included).",
            &mut out,
        );
        m.ttft.render(
            "ddtree_time_to_first_token_seconds",
            "Arrival to the first token.",
            &mut out,
        );
        m.e2e.render(
            "ddtree_e2e_request_latency_seconds",
            "Arrival to the last token.",
            &mut out,
        );
        m.queue.render(
            "ddtree_request_queue_time_seconds",
            "Time waiting in the queue.",
            &mut out,
        );
        m.itl.render(
            "ddtree_inter_token_latency_seconds",
            "Mean time per output token after the first, per request.",
            &mut out,
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_and_per_position_acceptance_follow_the_histogram() {
        let m = Metrics::new();
        m.set_block_size(4);
        m.record(&RequestRecord {
            status: 200,
            finish_reason: "stop",
            prompt_tokens: 10,
            generation_tokens: 7,
            drafts: 3,
            draft_tokens: 12,
            accepted_tokens: 3,
            // Rounds committing 1, 2 and 3 tokens: 0 + 1 + 2 accepted drafts.
            acceptance_histogram: vec![0, 1, 1, 1],
            e2e: Some(Duration::from_millis(30)),
            ..RequestRecord::default()
        });
        m.rejected(400);
        let text = m.render();
        for line in [
            "ddtree_requests_total{status=\"200\",finish_reason=\"stop\"} 1",
            "ddtree_requests_total{status=\"400\",finish_reason=\"none\"} 1",
            "ddtree_spec_decode_num_drafts_total 3",
            "ddtree_spec_decode_num_draft_tokens_total 12",
            "ddtree_spec_decode_num_accepted_tokens_total 3",
            "ddtree_spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"} 2",
            "ddtree_spec_decode_num_accepted_tokens_per_pos_total{position=\"1\"} 1",
            "ddtree_spec_decode_num_accepted_tokens_per_pos_total{position=\"2\"} 0",
            "ddtree_spec_decode_acceptance_length_bucket{le=\"2\"} 2",
            "ddtree_spec_decode_acceptance_length_sum 6",
            "ddtree_e2e_request_latency_seconds_bucket{le=\"0.025\"} 0",
            "ddtree_e2e_request_latency_seconds_bucket{le=\"0.05\"} 1",
            "ddtree_generation_tokens_total 7",
            "ddtree_num_requests_running 0",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
    }
}

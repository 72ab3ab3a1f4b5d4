//! The command line (vLLM / SGLang style flags) and the settings it resolves to.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use serde_json::{Map, Value};

use crate::model::ModelSource;
use crate::validate::ModeRequest;

/// Compute device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Device {
    /// burn's ndarray backend, f32.
    Cpu,
    /// NVIDIA GPUs, bf16 (a binary built with `--features cuda`).
    Cuda,
}

/// Default drafting mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// DDTree: a best-first tree of `--tree-budget` nodes.
    Tree,
    /// Plain DFlash: the drafter's top-1 chain.
    Chain,
    /// No drafting.
    Ar,
}

/// OpenAI-compatible server for DDTree speculative decoding over DFlash drafters.
///
/// With no model flags it serves the demo pair shipped in the repository.
#[derive(Clone, Debug, Parser)]
#[command(name = "ddtree-server", version, about, long_about = None)]
pub struct Args {
    /// Target checkpoint directory (config.json, safetensors, tokenizer files). Give it with
    /// --draft; without both, the embedded demo pair is served.
    #[arg(long, value_name = "DIR", requires = "draft")]
    pub target: Option<PathBuf>,
    /// DFlash drafter directory matching --target.
    #[arg(long, value_name = "DIR", requires = "target")]
    pub draft: Option<PathBuf>,
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to bind (0 picks a free one).
    #[arg(long, default_value_t = 30000)]
    pub port: u16,
    /// Default tree budget (draft nodes per round) when a request gives none.
    #[arg(long, default_value_t = 16)]
    pub tree_budget: usize,
    /// Largest tree budget a request may ask for.
    #[arg(long, default_value_t = 256)]
    pub max_tree_budget: usize,
    /// Default drafting mode when a request gives no tree_budget.
    #[arg(long, value_enum, default_value_t = ModeArg::Tree)]
    pub mode: ModeArg,
    /// Maximum context (prompt + output tokens); default: the target's max_position_embeddings.
    #[arg(long, value_name = "N")]
    pub max_context: Option<usize>,
    /// Compute device.
    #[arg(long, value_enum, default_value_t = Device::Cpu)]
    pub device: Device,
    /// Model name in responses and the only `model` value accepted (default: the target
    /// directory's name).
    #[arg(long, value_name = "NAME")]
    pub served_model_name: Option<String>,
    /// Accept any `model` value in requests (for clients that always send one).
    #[arg(long)]
    pub accept_any_model: bool,
    /// Require this API key (repeatable; also DDTREE_API_KEY, comma-separated) on every route
    /// except /health.
    #[arg(
        long,
        value_name = "KEY",
        env = "DDTREE_API_KEY",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub api_key: Vec<String>,
    /// Read more API keys from a file, one per line.
    #[arg(long, value_name = "FILE")]
    pub api_key_file: Option<PathBuf>,
    /// Leave /metrics open when API keys are set.
    #[arg(long)]
    pub public_metrics: bool,
    /// Requests that may wait behind the running one; more get 503 with Retry-After.
    #[arg(long, default_value_t = 64)]
    pub max_queue: usize,
    /// Seconds a request may take from arrival to its last token (0 = no limit).
    #[arg(long, default_value_t = 0, value_name = "SECS")]
    pub request_timeout: u64,
    /// Largest request body in bytes; larger bodies get 413.
    #[arg(long, default_value_t = 8 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// A Jinja chat template file overriding the checkpoint's.
    #[arg(long, value_name = "FILE")]
    pub chat_template: Option<PathBuf>,
    /// Default chat_template_kwargs as a JSON object (requests override keys),
    /// e.g. '{"enable_thinking": false}'.
    #[arg(long, value_name = "JSON")]
    pub chat_template_kwargs: Option<String>,
    /// When prompt + max_tokens exceeds the context, lower max_tokens instead of answering 400.
    #[arg(long)]
    pub clamp_max_tokens: bool,
    /// Reject unknown request fields (400) instead of ignoring them.
    #[arg(long)]
    pub strict: bool,
    /// Allow cross-origin requests from this origin (repeatable; `*` for any). Off by default.
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    pub cors_origins: Vec<String>,
}

/// Resolved settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Where the model runs.
    pub device: Device,
    /// Where to listen.
    pub addr: SocketAddr,
    /// The model to load.
    pub source: ModelSource,
    /// The served model name.
    pub served_model_name: String,
    /// See [`Args::accept_any_model`].
    pub accept_any_model: bool,
    /// API keys (empty: no auth).
    pub api_keys: Vec<String>,
    /// See [`Args::public_metrics`].
    pub public_metrics: bool,
    /// Default mode.
    pub default_mode: ModeRequest,
    /// See [`Args::max_tree_budget`].
    pub max_tree_budget: usize,
    /// See [`Args::max_queue`].
    pub max_queue: usize,
    /// See [`Args::request_timeout`].
    pub request_timeout: Option<Duration>,
    /// See [`Args::max_body_bytes`].
    pub max_body_bytes: usize,
    /// Default chat template kwargs.
    pub template_kwargs: Map<String, Value>,
    /// See [`Args::clamp_max_tokens`].
    pub clamp_max_tokens: bool,
    /// See [`Args::strict`].
    pub strict: bool,
    /// See [`Args::cors_origins`].
    pub cors_origins: Vec<String>,
}

impl Args {
    /// Checks the flags and resolves the settings.
    pub fn settings(&self) -> Result<Settings, String> {
        if self.device == Device::Cuda && !cfg!(feature = "cuda") {
            return Err("--device cuda: this binary was built without CUDA; rebuild with \
                 `cargo build --release -p ddtree-server --features cuda`, or run with --device cpu (the default)"
                .into());
        }
        if self.tree_budget > self.max_tree_budget {
            return Err(format!(
                "--tree-budget {} is above --max-tree-budget {}",
                self.tree_budget, self.max_tree_budget
            ));
        }
        if self.max_tree_budget > ddtree_max_budget() {
            return Err(format!(
                "--max-tree-budget must be at most {}",
                ddtree_max_budget()
            ));
        }
        if self.max_context == Some(0) || self.max_context == Some(1) {
            return Err("--max-context must be at least 2".into());
        }
        let addr: SocketAddr = format!("{}:{}", bracket_ipv6(&self.host), self.port)
            .parse()
            .map_err(|e| format!("--host {:?} --port {}: {e}", self.host, self.port))?;
        let mut source = match (&self.target, &self.draft) {
            (Some(t), Some(d)) => ModelSource {
                target: t.clone(),
                draft: d.clone(),
                max_context: None,
                chat_template: None,
            },
            _ => ModelSource::demo(),
        };
        source.max_context = self.max_context;
        source.chat_template = self.chat_template.clone();
        let served_model_name = self.served_model_name.clone().unwrap_or_else(|| {
            std::fs::canonicalize(&source.target)
                .unwrap_or_else(|_| source.target.clone())
                .file_name()
                .map_or_else(|| "ddtree".into(), |n| n.to_string_lossy().into_owned())
        });
        let mut api_keys: Vec<String> = self.api_key.iter().filter(|k| !k.is_empty()).cloned().collect();
        if let Some(file) = &self.api_key_file {
            let text = std::fs::read_to_string(file)
                .map_err(|e| format!("--api-key-file {}: {e}", file.display()))?;
            api_keys.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(String::from),
            );
        }
        let template_kwargs = match &self.chat_template_kwargs {
            None => Map::new(),
            Some(text) => match serde_json::from_str(text) {
                Ok(Value::Object(map)) => map,
                _ => {
                    return Err(format!(
                        "--chat-template-kwargs must be a JSON object, got {text:?}"
                    ));
                }
            },
        };
        Ok(Settings {
            device: self.device,
            addr,
            source,
            served_model_name,
            accept_any_model: self.accept_any_model,
            api_keys,
            public_metrics: self.public_metrics,
            default_mode: match self.mode {
                ModeArg::Tree => ModeRequest::Tree(self.tree_budget),
                ModeArg::Chain => ModeRequest::Chain,
                ModeArg::Ar => ModeRequest::Tree(0),
            },
            max_tree_budget: self.max_tree_budget,
            max_queue: self.max_queue,
            request_timeout: (self.request_timeout > 0).then(|| Duration::from_secs(self.request_timeout)),
            max_body_bytes: self.max_body_bytes,
            template_kwargs,
            clamp_max_tokens: self.clamp_max_tokens,
            strict: self.strict,
            cors_origins: self.cors_origins.clone(),
        })
    }
}

fn ddtree_max_budget() -> usize {
    ddtree::MAX_BUDGET
}

fn bracket_ipv6(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Settings, String> {
        let args = Args::try_parse_from(std::iter::once("ddtree-server").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        args.settings()
    }

    #[test]
    fn defaults_serve_the_demo_pair_on_localhost() {
        let s = parse(&[]).unwrap();
        assert_eq!(s.addr.to_string(), "127.0.0.1:30000");
        // The target directory's name, as for any checkpoint.
        assert_eq!(s.served_model_name, "target");
        assert_eq!(s.default_mode, ModeRequest::Tree(16));
        assert!(s.api_keys.is_empty());
        assert!(s.source.target.ends_with("models/demo/target"));
        assert!(s.source.draft.ends_with("models/demo/draft"));
    }

    #[test]
    fn cuda_and_bad_flags_fail_with_a_clear_message() {
        let result = parse(&["--device", "cuda"]);
        if cfg!(feature = "cuda") {
            assert_eq!(result.map(|s| s.device), Ok(Device::Cuda));
        } else {
            let e = result.unwrap_err();
            assert!(e.contains("built without CUDA"), "{e}");
        }
        assert!(parse(&["--target", "/x"]).unwrap_err().contains("--draft"));
        assert!(
            parse(&["--tree-budget", "300"])
                .unwrap_err()
                .contains("--max-tree-budget")
        );
        assert!(parse(&["--chat-template-kwargs", "[1]"]).is_err());
        let s = parse(&["--api-key", "a,b", "--mode", "chain", "--port", "0"]).unwrap();
        assert_eq!(s.api_keys, ["a", "b"]);
        assert_eq!(s.default_mode, ModeRequest::Chain);
    }
}

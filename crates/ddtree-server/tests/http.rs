//! The router end to end with a scripted generator in place of the model: `503` while loading,
//! the reasoning split and stop tokens over HTTP, streamed and not. (The Python suite in
//! `tests/server/` drives the real binary with the real demo model.)

use std::ops::ControlFlow;
use std::sync::mpsc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use ddtree_engine::{EngineError, FinishReason, GenerateParams, Generation, Metrics};
use ddtree_server::cli::Args;
use ddtree_server::model::{Generator, ModelInfo, ModelSource, load_tokenizer};
use ddtree_server::routes::{AppState, router};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

/// Emits fixed chunks, stopping like the engine at a stop token or the token limit.
struct Scripted(Vec<Vec<u32>>);

impl Generator for Scripted {
    fn generate(
        &mut self,
        prompt: &[u32],
        params: &GenerateParams,
        on_tokens: &mut dyn FnMut(&[u32]) -> ControlFlow<()>,
    ) -> Result<Generation, EngineError> {
        let mut tokens = Vec::new();
        let mut finish = FinishReason::Length;
        'outer: for chunk in &self.0 {
            let begin = tokens.len();
            let mut done = false;
            for &t in chunk {
                tokens.push(t);
                if params.stop_tokens.contains(&t) {
                    finish = FinishReason::Stop;
                    done = true;
                    break;
                }
                if tokens.len() >= params.max_new_tokens {
                    done = true;
                    break;
                }
            }
            if on_tokens(&tokens[begin..]).is_break() && !done {
                finish = FinishReason::Cancelled;
                break 'outer;
            }
            if done {
                break;
            }
        }
        let rounds = self.0.len().saturating_sub(1);
        Ok(Generation {
            metrics: Metrics {
                block_size: 16,
                tree_budget: 4,
                prompt_tokens: prompt.len(),
                decode_rounds: rounds,
                output_tokens: tokens.len(),
                ..Metrics::default()
            },
            tokens,
            finish_reason: finish,
            trace: Vec::new(),
        })
    }
}

fn model_info() -> ModelInfo {
    let (tokenizer, template, eos_ids) = load_tokenizer(&ModelSource::demo()).unwrap();
    ModelInfo {
        tokenizer,
        template,
        eos_ids,
        vocab_size: 1024,
        max_context: 512,
        block_size: 16,
        sampling_defaults: None,
    }
}

fn state(load: Box<dyn FnOnce() -> Result<ddtree_server::model::Loaded, String> + Send>) -> AppState {
    let settings = Args::try_parse_from_args(&["--port", "0"]).settings().unwrap();
    ddtree_server::start(settings, load, Box::new(|e| panic!("load failed: {e}")))
}

trait ParseArgs {
    fn try_parse_from_args(args: &[&str]) -> Args;
}

impl ParseArgs for Args {
    fn try_parse_from_args(args: &[&str]) -> Args {
        use clap::Parser;
        Args::try_parse_from(std::iter::once("ddtree-server").chain(args.iter().copied())).unwrap()
    }
}

async fn call(
    state: &AppState,
    method: &str,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, String, Option<String>) {
    let mut req = Request::builder().method(method).uri(uri);
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    let req = req
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .unwrap();
    let resp = router(state.clone()).oneshot(req).await.unwrap();
    let status = resp.status();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(bytes.to_vec()).unwrap(), retry)
}

fn ids(model: &ModelInfo, text: &str) -> Vec<u32> {
    model.tokenizer.encode(text, false).unwrap().get_ids().to_vec()
}

#[tokio::test]
async fn health_and_generation_answer_503_until_the_model_is_loaded() {
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let state = state(Box::new(move || {
        release_rx.recv().unwrap();
        Ok((
            model_info(),
            Box::new(Scripted(vec![vec![5]])) as Box<dyn Generator>,
        ))
    }));
    let (status, body, retry) = call(&state, "GET", "/health", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(retry.as_deref(), Some("1"));
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["error"]["code"],
        "model_loading"
    );
    let chat = json!({"messages": [{"role": "user", "content": "hi"}]});
    let (status, body, _) = call(&state, "POST", "/v1/chat/completions", Some(chat)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains("\"model_loading\""), "{body}");
    release_tx.send(()).unwrap();
    for _ in 0..200 {
        if call(&state, "GET", "/health", None).await.0 == StatusCode::OK {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the server never became ready");
}

async fn scripted_state(text_chunks: &[&str]) -> AppState {
    let model = model_info();
    let eos = model.tokenizer.token_to_id("<|im_end|>").unwrap();
    let mut chunks: Vec<Vec<u32>> = text_chunks.iter().map(|t| ids(&model, t)).collect();
    chunks.last_mut().unwrap().extend([eos, 7, 8]);
    let state = state(Box::new(move || {
        Ok((model, Box::new(Scripted(chunks)) as Box<dyn Generator>))
    }));
    while state.ready().is_err() {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    state
}

#[tokio::test]
async fn think_end_inside_one_round_splits_reasoning_from_content() {
    // The second round's chunk holds the end of the reasoning, `</think>` and the answer's start.
    let state = scripted_state(&["<think>\nplan", " it</think>\n\nHel", "lo!"]).await;
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "temperature": 0});
    let (status, text, _) = call(&state, "POST", "/v1/chat/completions", Some(body.clone())).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let msg = &v["choices"][0]["message"];
    assert_eq!(msg["reasoning_content"], "\nplan it");
    assert_eq!(msg["reasoning"], "\nplan it");
    assert_eq!(msg["content"], "\n\nHello!");
    // Stopped at EOS: the tokens after it never show, EOS itself counts.
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let m = model_info();
    let emitted =
        ids(&m, "<think>\nplan").len() + ids(&m, " it</think>\n\nHel").len() + ids(&m, "lo!").len() + 1;
    assert_eq!(v["usage"]["completion_tokens"], emitted);
    assert_eq!(v["ddtree"]["output_tokens"], emitted);

    let mut stream = body;
    stream["stream"] = json!(true);
    let (status, text, _) = call(&state, "POST", "/v1/chat/completions", Some(stream)).await;
    assert_eq!(status, StatusCode::OK);
    let events: Vec<Value> = text
        .split("\n\n")
        .filter_map(|f| f.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(text.ends_with("data: [DONE]\n\n"));
    let deltas: Vec<&Value> = events.iter().map(|e| &e["choices"][0]["delta"]).collect();
    let both = deltas
        .iter()
        .find(|d| d.get("reasoning_content").is_some() && d.get("content").is_some())
        .expect("one delta carries both channels");
    assert_eq!(both["reasoning_content"], " it");
    assert_eq!(both["content"], "\n\nHel");
    let join = |key: &str| deltas.iter().filter_map(|d| d[key].as_str()).collect::<String>();
    assert_eq!(join("reasoning_content"), "\nplan it");
    assert_eq!(join("content"), "\n\nHello!");
}

#[tokio::test]
async fn stop_string_across_rounds_and_raw_text_mode() {
    let state = scripted_state(&["Hello wo", "rld", " and more"]).await;
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "stop": ["world"],
                      "separate_reasoning": false});
    let (status, text, _) = call(&state, "POST", "/v1/chat/completions", Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "Hello ");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert!(v["choices"][0]["message"]["reasoning_content"].is_null());
    assert!(v["usage"].get("completion_tokens_details").is_none());
    let m = model_info();
    assert_eq!(
        v["usage"]["completion_tokens"],
        ids(&m, "Hello wo").len() + ids(&m, "rld").len()
    );
}

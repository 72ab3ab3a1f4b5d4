//! Smoke test of a running `ddtree-server`: one greedy chat completion with a DDTree budget, and
//! what came back. The prompt asks for code: the default model (the demo pair in `models/demo/`)
//! is a small model trained on Python source, so it answers with Python-looking code.
//!
//! ```sh
//! cargo run --release -p ddtree-server &                 # the demo pair on 127.0.0.1:30000
//! cargo run --example smoke_client                       # or: -- --url http://HOST:PORT --api-key KEY
//! ```

use std::time::Duration;

use serde_json::{Value, json};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut url = "http://127.0.0.1:30000".to_string();
    let mut api_key = std::env::var("DDTREE_API_KEY").ok();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--url" => url = args.next().ok_or("--url needs a value")?,
            "--api-key" => api_key = Some(args.next().ok_or("--api-key needs a value")?),
            "-h" | "--help" => {
                println!("usage: smoke_client [--url http://127.0.0.1:30000] [--api-key KEY]");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other:?} (try --help)").into()),
        }
    }
    let body = json!({
        "messages": [{"role": "user", "content": "Write a Python function that reverses a string"}],
        "max_tokens": 64,
        "temperature": 0,
        "tree_budget": 16,
    });
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(300)))
        .build()
        .into();
    let endpoint = format!("{}/v1/chat/completions", url.trim_end_matches('/'));
    let mut request = agent.post(&endpoint).header("Content-Type", "application/json");
    if let Some(key) = &api_key {
        request = request.header("Authorization", format!("Bearer {key}"));
    }
    let mut response = request.send(body.to_string()).map_err(|e| {
        format!("POST {endpoint}: {e} (is the server running? cargo run --release -p ddtree-server)")
    })?;
    let status = response.status();
    let text = response.body_mut().read_to_string()?;
    println!("status: {status}");
    let reply: Value =
        serde_json::from_str(&text).map_err(|e| format!("the reply is not JSON ({e}): {text}"))?;
    if !status.is_success() {
        println!("error: {}", serde_json::to_string_pretty(&reply["error"])?);
        return Err(format!("the server answered {status}").into());
    }
    let choice = &reply["choices"][0];
    println!(
        "content: {:?}",
        choice["message"]["content"].as_str().unwrap_or("")
    );
    if let Some(reasoning) = choice["message"]["reasoning_content"].as_str() {
        println!("reasoning: {reasoning:?}");
    }
    println!("finish_reason: {}", choice["finish_reason"]);
    println!("usage: {}", serde_json::to_string_pretty(&reply["usage"])?);
    println!("ddtree: {}", serde_json::to_string_pretty(&reply["ddtree"])?);
    Ok(())
}

//! Evaluates a target/drafter pair on held-out prompts: τ (mean acceptance length) and decode
//! tokens/s for autoregressive decoding, the DFlash chain and DDTree at several budgets, greedy, on
//! the CPU (`NdArray<f32>`), and prints a Markdown table.
//!
//! ```sh
//! cargo run --release --example eval_demo                     # models/demo pair, its eval_prompts.json
//! cargo run --release --example eval_demo -- --target DIR --draft DIR --prompts FILE.json \
//!     --max-new-tokens 64 --budgets 4,16,64
//! ```
//!
//! The prompts file is a JSON array of strings or of objects with a `"prompt"` field (as
//! `models/demo/eval_prompts.json`). Every prompt is run in every mode; τ is pooled over all decode
//! rounds (Σ tokens committed by the rounds / Σ rounds) and tokens/s is Σ output tokens / Σ decode
//! time (prefill excluded, as the engine's own metric). The example also checks that every mode
//! produced the autoregressive tokens (greedy DDTree is lossless).

use std::ops::ControlFlow;
use std::path::PathBuf;

use burn_ndarray::NdArray;
use ddtree_dflash::{DFlash, TargetHead};
use ddtree_engine::{Engine, GenerateParams, Mode};
use ddtree_qwen::{LoadOptions, Qwen3};
use ddtree_weights::{DFlashConfig, TokenizerFiles};

type B = NdArray<f32>;

struct Args {
    target: PathBuf,
    draft: PathBuf,
    prompts: PathBuf,
    max_new_tokens: usize,
    budgets: Vec<usize>,
}

fn parse_args() -> Result<Args, String> {
    let demo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/demo");
    let mut args = Args {
        target: demo.join("target"),
        draft: demo.join("draft"),
        prompts: demo.join("eval_prompts.json"),
        max_new_tokens: 64,
        budgets: vec![4, 16, 64],
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--target" => args.target = value()?.into(),
            "--draft" => args.draft = value()?.into(),
            "--prompts" => args.prompts = value()?.into(),
            "--max-new-tokens" => {
                args.max_new_tokens = value()?.parse().map_err(|e| format!("{flag}: {e}"))?
            }
            "--budgets" => {
                args.budgets = value()?
                    .split(',')
                    .map(|b| b.trim().parse().map_err(|e| format!("{flag}: {e}")))
                    .collect::<Result<_, _>>()?
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(args)
}

fn load_prompts(path: &PathBuf) -> Result<Vec<String>, Box<dyn std::error::Error + Send + Sync>> {
    let value: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    let items = value
        .as_array()
        .ok_or("the prompts file must hold a JSON array")?;
    items
        .iter()
        .map(|item| match item {
            serde_json::Value::String(s) => Ok(s.clone()),
            other => other
                .get("prompt")
                .and_then(|p| p.as_str())
                .map(str::to_owned)
                .ok_or_else(|| "each prompt must be a string or have a \"prompt\" string".into()),
        })
        .collect()
}

/// Totals of one mode over all prompts.
#[derive(Default)]
struct Totals {
    rounds: usize,
    committed: usize,
    output_tokens: usize,
    decode_secs: f64,
    verified_nodes: usize,
}

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args = parse_args()?;
    let device = Default::default();
    let draft_config = DFlashConfig::from_file(args.draft.join("config.json"))?;
    let options = LoadOptions {
        max_context: Some(4096),
        capture_layers: draft_config.target_layer_ids.clone(),
    };
    let target = Qwen3::<B>::load_dir(&args.target, options, &device)?;
    let head = TargetHead {
        embed_tokens: target.embed_tokens_weight(),
        lm_head: target.lm_head_weight(),
    };
    let drafter = DFlash::load_dir(&args.draft, head, target.max_context(), &device)?;
    let tokenizer = TokenizerFiles::load(&args.target)?;
    let stop_tokens: Vec<u32> = tokenizer.eos_token.iter().map(|t| t.id).collect();
    let prompts = load_prompts(&args.prompts)?;
    let mut engine = Engine::new(target, drafter);

    let mut modes = vec![
        ("AR".to_string(), Mode::Autoregressive),
        ("DFlash chain".to_string(), Mode::Chain),
    ];
    for &budget in &args.budgets {
        modes.push((format!("DDTree B={budget}"), Mode::Tree { budget }));
    }
    let mut totals: Vec<Totals> = modes.iter().map(|_| Totals::default()).collect();
    let mut mismatches = 0usize;
    let mut prompt_tokens = 0usize;
    for (i, text) in prompts.iter().enumerate() {
        let prompt = tokenizer
            .tokenizer
            .encode(text.as_str(), false)?
            .get_ids()
            .to_vec();
        prompt_tokens += prompt.len();
        let mut reference: Option<Vec<u32>> = None;
        let mut line = format!("prompt {i:2} ({:3} tokens):", prompt.len());
        for ((_, mode), total) in modes.iter().zip(totals.iter_mut()) {
            let params = GenerateParams {
                max_new_tokens: args.max_new_tokens,
                stop_tokens: stop_tokens.clone(),
                mode: *mode,
                ..Default::default()
            };
            let g = engine.generate(&prompt, &params, |_| ControlFlow::Continue(()))?;
            let m = &g.metrics;
            total.rounds += m.decode_rounds;
            total.committed += m.decode_rounds + m.accepted_draft_tokens;
            total.output_tokens += m.output_tokens;
            total.decode_secs += m.decode_time.as_secs_f64();
            total.verified_nodes += m.decode_rounds * m.tree_budget;
            line += &format!(" τ {:.2}", m.mean_acceptance_length);
            match &reference {
                None => reference = Some(g.tokens.clone()),
                Some(r) if *r != g.tokens => mismatches += 1,
                Some(_) => {}
            }
        }
        eprintln!("{line}");
    }

    println!(
        "{} held-out prompts ({} prompt tokens in all), greedy, max_new_tokens {}, block 16, CPU \
         NdArray<f32>, {} thread(s) available\n",
        prompts.len(),
        prompt_tokens,
        args.max_new_tokens,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
    );
    println!(
        "| mode | draft nodes verified / round | decode rounds | τ (mean acceptance length) | tokens/s |"
    );
    println!("|---|---|---|---|---|");
    for ((name, _), t) in modes.iter().zip(&totals) {
        let tau = t.committed as f64 / t.rounds.max(1) as f64;
        let nodes = t.verified_nodes as f64 / t.rounds.max(1) as f64;
        let tps = t.output_tokens as f64 / t.decode_secs.max(1e-9);
        println!("| {name} | {nodes:.0} | {} | {tau:.2} | {tps:.1} |", t.rounds);
    }
    println!(
        "\nall modes produced the autoregressive tokens on every prompt: {}",
        mismatches == 0
    );
    if mismatches != 0 {
        return Err(format!("{mismatches} (prompt, mode) runs differ from autoregressive decoding").into());
    }
    Ok(())
}

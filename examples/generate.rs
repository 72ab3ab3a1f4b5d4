//! Generates text on a target/drafter pair in the three modes — autoregressive, DFlash chain
//! and DDTree — and prints the text and the metrics of each.
//!
//! ```sh
//! cargo run --release --example generate                       # the embedded demo pair
//! cargo run --release --example generate -- --target DIR --draft DIR --prompt "def main(" \
//!     --max-new-tokens 64 --tree-budget 16
//! CUDARC_CUDA_VERSION=13000 cargo run --release --features cuda --example generate -- --device cuda
//! ```
//!
//! The embedded demo pair (`models/demo/`) is a small Qwen3 target and its DFlash drafter trained
//! on Python source code (`tools/train_demo_pair.py`), so code prompts work best.

use std::ops::ControlFlow;
use std::path::PathBuf;

use burn_ndarray::NdArray;
use ddtree_dflash::{DFlash, TargetHead};
use ddtree_engine::{Engine, GenerateParams, Mode};
use ddtree_kernels::KernelOps;
use ddtree_qwen::{LoadOptions, Qwen3};
use ddtree_weights::{DFlashConfig, TokenizerFiles};

type Error = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    /// `cpu` (burn ndarray, f32) or `cuda` (bf16 with our CubeCL kernels; `--features cuda`).
    device: String,
    target: PathBuf,
    draft: PathBuf,
    prompt: String,
    max_new_tokens: usize,
    tree_budget: usize,
}

fn parse_args() -> Result<Args, String> {
    let demo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/demo");
    let mut args = Args {
        device: "cpu".into(),
        target: demo.join("target"),
        draft: demo.join("draft"),
        prompt: "def parse_args(".into(),
        max_new_tokens: 64,
        tree_budget: 16,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--device" => args.device = value()?,
            "--target" => args.target = value()?.into(),
            "--draft" => args.draft = value()?.into(),
            "--prompt" => args.prompt = value()?,
            "--max-new-tokens" => {
                args.max_new_tokens = value()?.parse().map_err(|e| format!("{flag}: {e}"))?
            }
            "--tree-budget" => args.tree_budget = value()?.parse().map_err(|e| format!("{flag}: {e}"))?,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(args)
}

fn main() -> Result<(), Error> {
    let args = parse_args()?;
    match args.device.as_str() {
        "cpu" => generate::<NdArray<f32>>(&args, &Default::default()),
        #[cfg(feature = "cuda")]
        "cuda" => generate::<ddtree_kernels::cube::Cuda>(&args, &Default::default()),
        #[cfg(not(feature = "cuda"))]
        "cuda" => Err("built without CUDA: add `--features cuda`".into()),
        other => Err(format!("unknown device {other:?} (cpu or cuda)").into()),
    }
}

fn generate<B: KernelOps>(args: &Args, device: &B::Device) -> Result<(), Error> {
    let draft_config = DFlashConfig::from_file(args.draft.join("config.json"))?;
    let options = LoadOptions {
        max_context: Some(4096),
        capture_layers: draft_config.target_layer_ids.clone(),
    };
    let target = Qwen3::<B>::load_dir(&args.target, options, device)?;
    let head = TargetHead {
        embed_tokens: target.embed_tokens_weight(),
        lm_head: target.lm_head_weight(),
    };
    let drafter = DFlash::load_dir(&args.draft, head, target.max_context(), device)?;
    let tokenizer = TokenizerFiles::load(&args.target)?;
    let prompt = tokenizer
        .tokenizer
        .encode(args.prompt.as_str(), false)?
        .get_ids()
        .to_vec();
    let stop_tokens: Vec<u32> = tokenizer.eos_token.iter().map(|t| t.id).collect();
    let mut engine = Engine::new(target, drafter);

    println!("prompt: {:?} ({} tokens)\n", args.prompt, prompt.len());
    let mut outputs = Vec::new();
    for (name, mode) in [
        ("autoregressive", Mode::Autoregressive),
        ("dflash chain", Mode::Chain),
        (
            "ddtree",
            Mode::Tree {
                budget: args.tree_budget,
            },
        ),
    ] {
        let params = GenerateParams {
            max_new_tokens: args.max_new_tokens,
            stop_tokens: stop_tokens.clone(),
            mode,
            ..Default::default()
        };
        let g = engine.generate(&prompt, &params, |_| ControlFlow::Continue(()))?;
        let text = tokenizer.tokenizer.decode(&g.tokens, false)?;
        let m = &g.metrics;
        println!("== {name} ({mode:?})");
        println!("{text:?}");
        println!(
            "finish {:?}; block_size {} tree_budget {} decode_rounds {} mean_acceptance_length {:.2} \
             output_tokens {} tokens_per_second {:.1}; ttft {:.1} ms; draft {:.1} ms, tree {:.2} ms, \
             verify {:.1} ms, commit {:.1} ms\n",
            g.finish_reason,
            m.block_size,
            m.tree_budget,
            m.decode_rounds,
            m.mean_acceptance_length,
            m.output_tokens,
            m.tokens_per_second,
            m.time_to_first_token.as_secs_f64() * 1e3,
            m.stages.draft.as_secs_f64() * 1e3,
            m.stages.tree_build.as_secs_f64() * 1e3,
            m.stages.verify.as_secs_f64() * 1e3,
            m.stages.commit.as_secs_f64() * 1e3,
        );
        outputs.push(g.tokens);
    }
    let same = outputs.windows(2).all(|w| w[0] == w[1]);
    println!("all three modes produced the same tokens: {same}");
    if !same {
        return Err("greedy outputs differ between modes".into());
    }
    Ok(())
}

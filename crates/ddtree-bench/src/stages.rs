//! Per-stage timings of random-weight models of real shapes, built directly on the device.
//!
//! Stages: the autoregressive step (one token at the context length), the tree verify of a
//! budget-`B` tree (B + 1 rows), the drafter's block (context update, block pass, top-K, copy to
//! the host), and the glue of one round (tree build, walk, commit). Every timed step ends with its
//! results on the host (the engine's own synchronisation points), so wall time is the step's time.
//! Weights are touched by a full prefill before any timing (fresh uploads and the GPU's idle
//! clocks make first launches slow); each stage is warmed up and its median reported.

use std::time::Instant;

use clap::ValueEnum;
use ddtree::{DraftTopK, DraftTree, TreeBuilder, Walk};
use ddtree_dflash::{DFlash, TargetHead};
use ddtree_engine::{DraftOutput, Drafter};
use ddtree_kernels::{AncestorBits, AttentionContext, KernelOps, Visibility, host_ids};
use ddtree_qwen::{LoadOptions, Qwen3, TreeBlock};
use ddtree_weights::{DFlashConfig, Qwen3Config, RandomWeights};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::timing::{Summary, repeat};
use crate::{Device, Error};

/// HBM3e copy bandwidth of the H200 used for the floors (measured 4.2 TB/s copy, 4.0–4.1 read).
const ROOFLINE_BYTES_PER_S: f64 = 4.3e12;

#[derive(clap::Args)]
pub struct Args {
    /// Where the models run.
    #[arg(long, value_enum, default_value_t = Device::Cuda)]
    pub device: Device,
    /// Model shapes.
    #[arg(long, value_enum, default_value_t = Preset::Qwen3_8b)]
    preset: Preset,
    /// Committed context length every step sees.
    #[arg(long, default_value_t = 2048)]
    context: usize,
    /// Tree budgets to verify (B draft nodes + the root).
    #[arg(long, value_delimiter = ',', default_values_t = [16, 32, 64, 128])]
    budgets: Vec<usize>,
    /// Budget of the glue measurement.
    #[arg(long, default_value_t = 64)]
    glue_budget: usize,
    /// New target feature rows the drafter takes in per round (≈ τ).
    #[arg(long, default_value_t = 4)]
    accepted: usize,
    /// Timed repetitions per stage.
    #[arg(long, default_value_t = 20)]
    reps: usize,
    /// Untimed warm-up repetitions per stage.
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Tensor-core linear for more than 8 rows (`false`: burn's matmul), on CUDA.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    tensor_cores: bool,
}

/// Model shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Preset {
    /// Qwen3-8B (36 layers, hidden 4096, 32 q / 8 kv heads × 128, intermediate 12288, vocab
    /// 151936, untied) and a 5-layer DFlash drafter of the same width, block 16.
    #[value(name = "qwen3-8b")]
    Qwen3_8b,
    /// A few small layers, to check the binary on a CPU.
    Tiny,
}

impl Preset {
    fn configs(self) -> Result<(Qwen3Config, DFlashConfig), Error> {
        let (hidden, layers, heads, kv, head_dim, inter, vocab, draft_layers, ids) = match self {
            Preset::Qwen3_8b => (4096, 36, 32, 8, 128, 12288, 151936, 5, vec![1, 9, 17, 25, 33]),
            Preset::Tiny => (128, 4, 4, 2, 32, 256, 1024, 2, vec![1, 2]),
        };
        let common = json!({
            "hidden_size": hidden, "num_attention_heads": heads, "num_key_value_heads": kv,
            "head_dim": head_dim, "intermediate_size": inter, "vocab_size": vocab,
            "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1_000_000.0,
            "max_position_embeddings": 40960, "tie_word_embeddings": false, "attention_bias": false,
        });
        let mut target = common.clone();
        target["model_type"] = json!("qwen3");
        target["num_hidden_layers"] = json!(layers);
        let mut draft = common;
        draft["model_type"] = json!("qwen3");
        draft["num_hidden_layers"] = json!(draft_layers);
        draft["num_target_layers"] = json!(layers);
        draft["block_size"] = json!(16);
        draft["dflash_config"] = json!({ "mask_token_id": vocab - 1, "target_layer_ids": ids });
        let origin = format!("<{self:?} preset>");
        Ok((
            Qwen3Config::from_json_str(&target.to_string(), &origin)?,
            DFlashConfig::from_json_str(&draft.to_string(), &origin)?,
        ))
    }
}

/// Bytes of weights one pass streams: every linear layer once and the LM head (the embedding
/// lookup reads one row per token, negligible).
fn weight_bytes(hidden: usize, heads: usize, kv: usize, head_dim: usize, inter: usize, layers: usize) -> f64 {
    let attention = 2 * hidden * heads * head_dim + 2 * hidden * kv * head_dim;
    let mlp = 3 * hidden * inter;
    (2 * layers * (attention + mlp)) as f64
}

/// Host µs per call of each op of an AR step at the target's shapes: 200 calls enqueued back to
/// back (timed), then one sync (untimed). Where the AR step's host enqueue goes, op by op.
fn host_costs<B: KernelOps>(device: &B::Device, c: &Qwen3Config, context: usize) -> Result<(), Error> {
    use burn_tensor::{Distribution, Tensor};
    let (hidden, heads, kv, head_dim) = (
        c.hidden_size,
        c.num_attention_heads,
        c.num_key_value_heads,
        c.head_dim,
    );
    let normal = |shape: [usize; 2]| Tensor::<B, 2>::random(shape, Distribution::Normal(0.0, 1.0), device);
    let x = normal([1, hidden]);
    let w = normal([hidden, hidden]);
    let norm = Tensor::<B, 1>::ones([hidden], device);
    let gate = normal([1, c.intermediate_size]);
    let q = Tensor::<B, 3>::random([1, heads, head_dim], Distribution::Normal(0.0, 1.0), device);
    let cache = [kv, context + 1, head_dim];
    let keys = Tensor::<B, 3>::random(cache, Distribution::Normal(0.0, 1.0), device);
    let values = Tensor::<B, 3>::random(cache, Distribution::Normal(0.0, 1.0), device);
    let ctx = AttentionContext {
        prefix_len: context,
        visibility: Visibility::Causal,
        window: None,
    };
    let scale = (head_dim as f64).powf(-0.5);
    let time = |name: &str, op: &mut dyn FnMut()| -> Result<(), Error> {
        for _ in 0..20 {
            op();
        }
        B::sync(device)?;
        let calls = 200;
        let t = Instant::now();
        for _ in 0..calls {
            op();
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / calls as f64;
        B::sync(device)?;
        println!("{}", json!({ "host_us_per_call": name, "us": us }));
        Ok(())
    };
    time("burn add_scalar 1×4096 (reference)", &mut || {
        let _ = x.clone().add_scalar(1.0);
    })?;
    time("linear 1×4096 · 4096×4096ᵀ", &mut || {
        let _ = <B as KernelOps>::linear(x.clone(), w.clone());
    })?;
    time("add_rms_norm 1×4096", &mut || {
        let _ = B::add_rms_norm(x.clone(), x.clone(), norm.clone(), 1e-6);
    })?;
    time("silu_mul 1×12288", &mut || {
        let _ = B::silu_mul(gate.clone(), gate.clone());
    })?;
    time("cached_attention 1 row over the context", &mut || {
        let _ = B::cached_attention(q.clone(), keys.clone(), values.clone(), &ctx, scale);
    })?;
    Ok(())
}

/// A random tree of `budget` draft nodes under the root: each node's parent is an earlier node
/// (seeded), so depths and ancestor sets vary like a best-first tree's.
pub(crate) struct RandomTree {
    tokens: Vec<u32>,
    depths: Vec<u32>,
    pub(crate) words: Vec<u64>,
    pub(crate) words_per_row: usize,
}

impl RandomTree {
    pub(crate) fn new(budget: usize, vocab: usize, seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let n = budget + 1;
        let words_per_row = n.div_ceil(64);
        let mut depths = vec![0u32; n];
        let mut words = vec![0u64; n * words_per_row];
        for i in 0..n {
            if i > 0 {
                // Parents biased toward early nodes: bushy near the root, like a best-first tree.
                let parent = (rng.random::<f64>().powi(2) * i as f64) as usize;
                depths[i] = depths[parent] + 1;
                let (src, dst) = (parent * words_per_row, i * words_per_row);
                for w in 0..words_per_row {
                    words[dst + w] = words[src + w];
                }
            }
            words[i * words_per_row + i / 64] |= 1 << (i % 64);
        }
        let tokens = (0..n).map(|_| rng.random_range(0..vocab as u32)).collect();
        Self {
            tokens,
            depths,
            words,
            words_per_row,
        }
    }

    fn block(&self) -> TreeBlock<'_> {
        TreeBlock {
            tokens: &self.tokens,
            depths: &self.depths,
            ancestors: AncestorBits::new(&self.words, self.words_per_row).expect("rows of whole words"),
        }
    }
}

struct Report {
    device: Device,
    lines: Vec<(String, Summary, Option<f64>, String)>,
}

impl Report {
    /// Records a stage: its summary, floor (ms) if any, and a note; prints a JSON line.
    fn add(&mut self, stage: &str, s: Summary, floor_ms: Option<f64>, note: String) {
        println!(
            "{}",
            json!({
                "stage": stage, "ms_median": s.median_ms, "ms_min": s.min_ms, "reps": s.reps,
                "floor_ms": floor_ms, "efficiency": floor_ms.map(|f| f / s.median_ms),
                "note": note, "device": format!("{:?}", self.device),
            })
        );
        self.lines.push((stage.to_string(), s, floor_ms, note));
    }

    fn print_table(&self) {
        println!("\n| stage | median ms | min ms | floor ms | efficiency | note |");
        println!("|---|---:|---:|---:|---:|---|");
        for (stage, s, floor, note) in &self.lines {
            let (f, e) = match floor {
                Some(f) => (format!("{f:.2}"), format!("{:.0} %", 100.0 * f / s.median_ms)),
                None => ("".into(), "".into()),
            };
            println!(
                "| {stage} | {:.3} | {:.3} | {f} | {e} | {note} |",
                s.median_ms, s.min_ms
            );
        }
    }
}

pub fn run<B: KernelOps>(device: &B::Device, args: &Args) -> Result<(), Error> {
    let (target_cfg, draft_cfg) = args.preset.configs()?;
    let max_budget = args
        .budgets
        .iter()
        .copied()
        .chain([args.glue_budget])
        .max()
        .unwrap_or(0);
    // Room for the context, the largest tree, and the drafter's growing context.
    let capacity = args.context + max_budget + 1 + args.accepted * (args.reps + args.warmup + 2) + 64;
    let source = RandomWeights {
        std: 0.02,
        tied_embeddings: false,
    };
    #[cfg(feature = "cuda")]
    ddtree_kernels::cube::set_tensor_cores(args.tensor_cores);
    println!(
        "{}",
        json!({ "device": crate::describe(args.device), "preset": format!("{:?}", args.preset),
                "context": args.context, "reps": args.reps, "warmup": args.warmup,
                "tensor_cores": args.tensor_cores })
    );

    let t = Instant::now();
    let options = LoadOptions {
        max_context: Some(capacity),
        capture_layers: draft_cfg.target_layer_ids.clone(),
    };
    let mut target = Qwen3::<B>::load(target_cfg.clone(), &source, options, device)?;
    let head = TargetHead {
        embed_tokens: target.embed_tokens_weight(),
        lm_head: target.lm_head_weight(),
    };
    let mut drafter = DFlash::<B>::load(draft_cfg.clone(), &source, head, capacity, device)?;
    B::sync(device)?;
    eprintln!("built random-weight models in {:.2} s", t.elapsed().as_secs_f64());

    let c = &target_cfg;
    let vocab = c.vocab_size;
    let target_bytes = weight_bytes(
        c.hidden_size,
        c.num_attention_heads,
        c.num_key_value_heads,
        c.head_dim,
        c.intermediate_size,
        c.num_hidden_layers,
    ) + (2 * vocab * c.hidden_size) as f64;
    let d = &draft_cfg;
    let draft_bytes = weight_bytes(
        d.hidden_size,
        d.num_attention_heads,
        d.num_key_value_heads,
        d.head_dim,
        d.intermediate_size,
        d.num_hidden_layers,
    ) + (2 * vocab * c.hidden_size) as f64
        + (2 * d.hidden_size * d.target_layer_ids.len() * c.hidden_size) as f64;
    let floor = |bytes: f64| 1e3 * bytes / ROOFLINE_BYTES_PER_S;
    let mut report = Report {
        device: args.device,
        lines: Vec::new(),
    };

    // Prefill the context: touches every target weight, and fills the drafter's context.
    let mut rng = StdRng::seed_from_u64(7);
    let prompt: Vec<u32> = (0..args.context)
        .map(|_| rng.random_range(0..vocab as u32))
        .collect();
    let t = Instant::now();
    let out = target.prefill(&prompt)?;
    let bonus = host_ids(B::argmax(out.logits.clone()))[args.context - 1];
    let prefill = t.elapsed();
    let mut draft_out = DraftOutput::default();
    let all_rows: Vec<usize> = (0..args.context).collect();
    drafter
        .draft(&out.features, &all_rows, bonus, 8, &mut draft_out)
        .map_err(|e| -> Error { e })?;
    // A device sync between stages: with cubecl's profiling on (`tools/gpu_suite.sh profile`),
    // each sync prints the kernels launched since the last one, so every stage gets its own
    // launch counts and GPU times. Outside the timed regions, so free otherwise.
    B::sync(device)?;
    report.add(
        "prefill",
        Summary::of(&mut [prefill]),
        None,
        format!("{} tokens, first run (includes kernel compilation)", args.context),
    );

    // Autoregressive step: one token at `context`, then the cache is cut back.
    let mut enqueue = Vec::new();
    let ar = repeat(args.warmup, args.reps, || -> Result<(), Error> {
        let t = Instant::now();
        let out = target.decode(bonus)?;
        enqueue.push(t.elapsed());
        host_ids(B::argmax(out.logits));
        target.truncate(args.context);
        Ok(())
    })?;
    B::sync(device)?;
    let host = Summary::of(&mut enqueue[args.warmup..]);
    report.add(
        "AR step",
        ar,
        Some(floor(target_bytes)),
        format!(
            "context {}; host enqueue {:.0} µs/step",
            args.context,
            1e3 * host.median_ms
        ),
    );

    host_costs::<B>(device, c, args.context)?;

    // Tree verify at each budget.
    let mut features = None;
    for &budget in &args.budgets {
        let tree = RandomTree::new(budget, vocab, budget as u64);
        let block = tree.block();
        let s = repeat(args.warmup, args.reps, || -> Result<(), Error> {
            let out = target.verify(&block)?;
            host_ids(B::argmax(out.logits));
            features = out.features;
            Ok(())
        })?;
        B::sync(device)?;
        report.add(
            &format!("verify B={budget}"),
            s,
            Some(floor(target_bytes)),
            format!(
                "{} rows, max depth {}",
                budget + 1,
                tree.depths.iter().max().unwrap_or(&0)
            ),
        );
    }

    // Draft: new feature rows in, 15 draft positions out as top-K log-probs on the host.
    let rows: Vec<usize> = (0..args.accepted).collect();
    let k = args.glue_budget.min(vocab);
    let s = repeat(args.warmup, args.reps, || -> Result<(), Error> {
        drafter
            .draft(&features, &rows, bonus, k, &mut draft_out)
            .map_err(|e| -> Error { e })
    })?;
    B::sync(device)?;
    report.add(
        "draft",
        s,
        Some(floor(draft_bytes)),
        format!(
            "{} new context rows, {} positions, top-{k}; context {}→{}",
            args.accepted,
            draft_out.depths,
            args.context,
            drafter.context_len()
        ),
    );

    // Glue: build the tree from the draft, walk it against a posterior, commit the path.
    let top = DraftTopK::new(
        draft_out.depths,
        draft_out.k,
        &draft_out.tokens,
        &draft_out.log_probs,
    )?;
    let mut builder = TreeBuilder::new();
    let mut tree = DraftTree::new();
    let build = repeat(args.warmup, 200, || {
        builder.build(bonus, &top, args.glue_budget, &mut tree)
    })?;
    // A posterior that accepts the first child chain, `accepted - 1` draft tokens deep.
    let mut posterior = vec![0u32; tree.num_nodes()];
    let mut node = 0;
    for _ in 1..args.accepted {
        match tree.children(node).first() {
            Some(&child) => {
                posterior[node] = tree.tokens()[child as usize];
                node = child as usize;
            }
            None => break,
        }
    }
    posterior[node] = u32::MAX;
    let mut walk = Walk::new();
    let walk_s = repeat(args.warmup, 200, || tree.walk_into(&posterior, &mut walk))?;
    let accepted: Vec<usize> = walk.accepted().iter().map(|&n| n as usize).collect();
    let ancestors = AncestorBits::new(tree.ancestor_words(), tree.words_per_row()).ok_or("malformed tree")?;
    let block = TreeBlock {
        tokens: tree.tokens(),
        depths: tree.depths(),
        ancestors,
    };
    let mut commits = Vec::new();
    for i in 0..args.warmup + args.reps {
        target.verify(&block)?;
        B::sync(device)?;
        let t = Instant::now();
        target.commit(&accepted)?;
        B::sync(device)?;
        if i >= args.warmup {
            commits.push(t.elapsed());
        }
        target.truncate(args.context);
    }
    let commit = Summary::of(&mut commits);
    let glue_ms = build.median_ms + walk_s.median_ms + commit.median_ms;
    report.add(
        "glue",
        Summary {
            median_ms: glue_ms,
            min_ms: build.min_ms + walk_s.min_ms + commit.min_ms,
            reps: commit.reps,
        },
        None,
        format!(
            "B={}: build+compile {:.3} ms, walk {:.4} ms, commit of {} rows {:.3} ms",
            args.glue_budget,
            build.median_ms,
            walk_s.median_ms,
            accepted.len(),
            commit.median_ms
        ),
    );
    report.print_table();
    Ok(())
}

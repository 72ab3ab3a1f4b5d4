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
use ddtree_qwen::{ForwardOutput, LoadOptions, Qwen3, Qwen35, TreeBlock};
use ddtree_weights::{DFlashConfig, LayerType, Qwen3Config, Qwen35Config, RandomWeights};
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
    /// An AR step's q/k norm + RoPE + cache write inside its attention launch (`false`: a launch
    /// of its own), on CUDA.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    rotate_in_attention: bool,
    /// An AR step's split merge in its attention launch's last cube (`false`: a launch of its
    /// own), on CUDA.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    fold_combine: bool,
    #[command(flatten)]
    kernels: crate::KernelSwitches,
}

/// Model shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Preset {
    /// Qwen3-8B (36 layers, hidden 4096, 32 q / 8 kv heads × 128, intermediate 12288, vocab
    /// 151936, untied) and a 5-layer DFlash drafter of the same width, block 16.
    #[value(name = "qwen3-8b")]
    Qwen3_8b,
    /// Qwen3.6-27B (64 layers: 48 Gated DeltaNet — 16 key / 48 value heads × 128, conv 4 — and
    /// 16 gated attention — 24 q / 4 kv heads × 256, a quarter rotary —, hidden 5120,
    /// intermediate 17408, vocab 248320, untied) and its 5-layer DFlash drafter (four sliding
    /// layers of window 2048 and a full one, target layers [1, 16, 31, 46, 61], block 16).
    #[value(name = "qwen3.6-27b")]
    Qwen36_27b,
    /// A few small layers, to check the binary on a CPU.
    Tiny,
    /// A few small hybrid layers (three Gated DeltaNet, one gated attention), to check the
    /// hybrid path on a CPU or a software GPU.
    TinyHybrid,
}

/// A preset's target: a dense Qwen3 or a Qwen3.5/3.6 hybrid.
enum TargetConfig {
    Dense(Qwen3Config),
    Hybrid(Qwen35Config),
}

impl Preset {
    fn configs(self) -> Result<(TargetConfig, DFlashConfig), Error> {
        let (hidden, layers, heads, kv, head_dim, inter, vocab, draft_layers, ids) = match self {
            Preset::Qwen3_8b => (4096, 36, 32, 8, 128, 12288, 151936, 5, vec![1, 9, 17, 25, 33]),
            Preset::Qwen36_27b => (5120, 64, 24, 4, 256, 17408, 248320, 5, vec![1, 16, 31, 46, 61]),
            Preset::Tiny => (128, 4, 4, 2, 32, 256, 1024, 2, vec![1, 2]),
            Preset::TinyHybrid => (128, 4, 4, 2, 32, 256, 1024, 2, vec![1, 2]),
        };
        let hybrid = matches!(self, Preset::Qwen36_27b | Preset::TinyHybrid);
        let common = json!({
            "hidden_size": hidden, "num_attention_heads": heads, "num_key_value_heads": kv,
            "head_dim": head_dim, "intermediate_size": inter, "vocab_size": vocab,
            "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1_000_000.0,
            "max_position_embeddings": 40960, "tie_word_embeddings": false, "attention_bias": false,
        });
        let origin = format!("<{self:?} preset>");
        let target = if hybrid {
            let (key_heads, value_heads, gdn_dim) = match self {
                Preset::Qwen36_27b => (16, 48, 128),
                _ => (2, 4, 32),
            };
            let mut t = common.clone();
            t["model_type"] = json!("qwen3_5_text");
            t["num_hidden_layers"] = json!(layers);
            t["layer_types"] = json!(
                (0..layers)
                    .map(|l| if l % 4 == 3 {
                        "full_attention"
                    } else {
                        "linear_attention"
                    })
                    .collect::<Vec<_>>()
            );
            t["linear_num_key_heads"] = json!(key_heads);
            t["linear_num_value_heads"] = json!(value_heads);
            t["linear_key_head_dim"] = json!(gdn_dim);
            t["linear_value_head_dim"] = json!(gdn_dim);
            t["linear_conv_kernel_dim"] = json!(4);
            t["rope_parameters"] = json!({ "rope_type": "default", "rope_theta": 10_000_000.0,
                                           "partial_rotary_factor": 0.25 });
            TargetConfig::Hybrid(Qwen35Config::from_json_str(&t.to_string(), &origin)?)
        } else {
            let mut t = common.clone();
            t["model_type"] = json!("qwen3");
            t["num_hidden_layers"] = json!(layers);
            TargetConfig::Dense(Qwen3Config::from_json_str(&t.to_string(), &origin)?)
        };
        let mut draft = common;
        draft["model_type"] = json!("qwen3");
        draft["num_hidden_layers"] = json!(draft_layers);
        draft["num_target_layers"] = json!(layers);
        draft["block_size"] = json!(16);
        draft["dflash_config"] = json!({ "mask_token_id": vocab - 1, "target_layer_ids": ids });
        if self == Preset::Qwen36_27b {
            // The Qwen3.6 drafters' attention: 32 q / 8 kv heads × 128.
            draft["num_attention_heads"] = json!(32);
            draft["num_key_value_heads"] = json!(8);
            draft["head_dim"] = json!(128);
        }
        if hybrid {
            // Sliding layers but the last, as the Qwen3.6 drafters.
            draft["layer_types"] = json!(
                (0..draft_layers)
                    .map(|l| if l + 1 < draft_layers {
                        "sliding_attention"
                    } else {
                        "full_attention"
                    })
                    .collect::<Vec<_>>()
            );
            draft["sliding_window"] = json!(2048);
            draft["use_sliding_window"] = json!(true);
        }
        Ok((target, DFlashConfig::from_json_str(&draft.to_string(), &origin)?))
    }
}

/// Bytes of weights one pass streams: every linear layer once and the LM head (the embedding
/// lookup reads one row per token, negligible).
fn weight_bytes(hidden: usize, heads: usize, kv: usize, head_dim: usize, inter: usize, layers: usize) -> f64 {
    let attention = 2 * hidden * heads * head_dim + 2 * hidden * kv * head_dim;
    let mlp = 3 * hidden * inter;
    (2 * layers * (attention + mlp)) as f64
}

/// [`weight_bytes`] of a dense Qwen3, LM head included.
fn dense_bytes(c: &Qwen3Config) -> f64 {
    weight_bytes(
        c.hidden_size,
        c.num_attention_heads,
        c.num_key_value_heads,
        c.head_dim,
        c.intermediate_size,
        c.num_hidden_layers,
    ) + (2 * c.vocab_size * c.hidden_size) as f64
}

/// [`weight_bytes`] of a hybrid, LM head included: gated attention layers (q and its gate, k,
/// v, o), Gated DeltaNet layers (the input projection `[q | k | v | z | b | a]` and the output
/// projection), every layer's MLP.
fn hybrid_bytes(c: &Qwen35Config) -> f64 {
    let h = c.hidden_size;
    let q = c.num_attention_heads * c.head_dim;
    let gate = if c.attn_output_gate { 2 } else { 1 };
    let attention = h * (gate * q + 2 * c.num_key_value_heads * c.head_dim) + q * h;
    let (kw, vw) = (
        c.linear_num_key_heads * c.linear_key_head_dim,
        c.linear_num_value_heads * c.linear_value_head_dim,
    );
    let gdn = h * (2 * kw + 2 * vw + 2 * c.linear_num_value_heads) + vw * h;
    let mixers: usize = c
        .layer_types
        .iter()
        .map(|t| match t {
            LayerType::FullAttention => attention,
            LayerType::LinearAttention => gdn,
        })
        .sum();
    let mlp = c.num_hidden_layers * 3 * h * c.intermediate_size;
    (2 * (mixers + mlp + c.vocab_size * h)) as f64
}

/// The shapes the floors and the per-op host costs need.
struct Dims {
    hidden: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    intermediate: usize,
    vocab: usize,
}

/// What the stages call on a target; Qwen3 and the hybrids share these method names.
trait StageTarget<B: KernelOps>: Sized {
    type Config;
    fn load(
        config: Self::Config,
        source: &RandomWeights,
        options: LoadOptions,
        device: &B::Device,
    ) -> Result<Self, Error>;
    fn dims(&self) -> Dims;
    /// Weight bytes one pass streams, LM head included.
    fn streamed_bytes(&self) -> f64;
    fn head(&self) -> TargetHead<B>;
    fn prefill(&mut self, tokens: &[u32]) -> Result<ForwardOutput<B>, Error>;
    fn decode(&mut self, token: u32) -> Result<ForwardOutput<B>, Error>;
    fn verify(&mut self, tree: &TreeBlock<'_>) -> Result<ForwardOutput<B>, Error>;
    fn commit(&mut self, accepted: &[usize]) -> Result<(), Error>;
    /// Cuts the committed context back to `len` after a timed step where the model can; a
    /// hybrid's recurrent state cannot be cut, so its context grows by each step instead (a
    /// few dozen tokens over a run, within the capacity).
    fn rewind(&mut self, len: usize);
}

macro_rules! stage_target {
    ($model:ident, $config:ident, $bytes:expr, $rewind:expr) => {
        impl<B: KernelOps> StageTarget<B> for $model<B> {
            type Config = $config;
            fn load(
                config: $config,
                source: &RandomWeights,
                options: LoadOptions,
                device: &B::Device,
            ) -> Result<Self, Error> {
                Ok($model::load(config, source, options, device)?)
            }
            fn dims(&self) -> Dims {
                let c = self.config();
                Dims {
                    hidden: c.hidden_size,
                    heads: c.num_attention_heads,
                    kv_heads: c.num_key_value_heads,
                    head_dim: c.head_dim,
                    intermediate: c.intermediate_size,
                    vocab: c.vocab_size,
                }
            }
            fn streamed_bytes(&self) -> f64 {
                $bytes(self.config())
            }
            fn head(&self) -> TargetHead<B> {
                TargetHead {
                    embed_tokens: self.embed_tokens_weight(),
                    lm_head: self.lm_head_weight(),
                }
            }
            fn prefill(&mut self, tokens: &[u32]) -> Result<ForwardOutput<B>, Error> {
                Ok($model::prefill(self, tokens)?)
            }
            fn decode(&mut self, token: u32) -> Result<ForwardOutput<B>, Error> {
                Ok($model::decode(self, token)?)
            }
            fn verify(&mut self, tree: &TreeBlock<'_>) -> Result<ForwardOutput<B>, Error> {
                Ok($model::verify(self, tree)?)
            }
            fn commit(&mut self, accepted: &[usize]) -> Result<(), Error> {
                Ok($model::commit(self, accepted)?)
            }
            fn rewind(&mut self, len: usize) {
                $rewind(self, len)
            }
        }
    };
}

stage_target!(Qwen3, Qwen3Config, dense_bytes, |m: &mut Qwen3<B>, len| m
    .truncate(len));
stage_target!(Qwen35, Qwen35Config, hybrid_bytes, |_: &mut Qwen35<B>, _| ());

/// Host µs per call of each op of an AR step at the target's shapes: 200 calls enqueued back to
/// back (timed), then one sync (untimed). Where the AR step's host enqueue goes, op by op.
fn host_costs<B: KernelOps>(device: &B::Device, c: &Dims, context: usize) -> Result<(), Error> {
    use burn_tensor::{Distribution, Tensor};
    let (hidden, heads, kv, head_dim) = (c.hidden, c.heads, c.kv_heads, c.head_dim);
    let normal = |shape: [usize; 2]| Tensor::<B, 2>::random(shape, Distribution::Normal(0.0, 1.0), device);
    let x = normal([1, hidden]);
    let w = normal([hidden, hidden]);
    let norm = Tensor::<B, 1>::ones([hidden], device);
    let gate = normal([1, c.intermediate]);
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
    time(&format!("burn add_scalar 1×{hidden} (reference)"), &mut || {
        let _ = x.clone().add_scalar(1.0);
    })?;
    time(
        &format!("linear 1×{hidden} · {hidden}×{hidden}ᵀ"),
        &mut || {
            let _ = <B as KernelOps>::linear(x.clone(), w.clone());
        },
    )?;
    time(&format!("add_rms_norm 1×{hidden}"), &mut || {
        let _ = B::add_rms_norm(x.clone(), x.clone(), norm.clone(), 1e-6);
    })?;
    time(&format!("silu_mul 1×{}", c.intermediate), &mut || {
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
    let (target, draft) = args.preset.configs()?;
    match target {
        TargetConfig::Dense(c) => run_with::<B, Qwen3<B>>(device, args, c, draft),
        TargetConfig::Hybrid(c) => run_with::<B, Qwen35<B>>(device, args, c, draft),
    }
}

fn run_with<B: KernelOps, T: StageTarget<B>>(
    device: &B::Device,
    args: &Args,
    target_cfg: T::Config,
    draft_cfg: DFlashConfig,
) -> Result<(), Error> {
    let max_budget = args
        .budgets
        .iter()
        .copied()
        .chain([args.glue_budget])
        .max()
        .unwrap_or(0);
    // Room for the context, the largest tree, the drafter's growing context, and a hybrid's
    // AR steps and commits (it cannot rewind).
    let steps = args.reps + args.warmup + 2;
    let capacity = args.context + max_budget + 1 + 2 * (args.accepted + 1) * steps + 64;
    #[cfg(feature = "cuda")]
    {
        ddtree_kernels::cube::set_tensor_cores(args.tensor_cores);
        ddtree_kernels::cube::set_rotate_in_attention(args.rotate_in_attention);
        ddtree_kernels::cube::set_fold_combine(args.fold_combine);
    }
    args.kernels.apply();
    println!(
        "{}",
        json!({ "device": crate::describe(args.device), "preset": format!("{:?}", args.preset),
                "context": args.context, "reps": args.reps, "warmup": args.warmup,
                "tensor_cores": args.tensor_cores,
                "rotate_in_attention": args.rotate_in_attention,
                "fold_combine": args.fold_combine,
                "warpgroup_mma": args.kernels.warpgroup_mma, "fast_exp": args.kernels.fast_exp,
                "attention_rows": args.kernels.attention_rows })
    );

    let t = Instant::now();
    let options = LoadOptions {
        max_context: Some(capacity),
        capture_layers: draft_cfg.target_layer_ids.clone(),
    };
    let source = RandomWeights::default();
    let mut target = T::load(target_cfg, &source, options, device)?;
    let mut drafter = DFlash::<B>::load(draft_cfg.clone(), &source, target.head(), capacity, device)?;
    B::sync(device)?;
    eprintln!("built random-weight models in {:.2} s", t.elapsed().as_secs_f64());

    let c = target.dims();
    let vocab = c.vocab;
    let target_bytes = target.streamed_bytes();
    let d = &draft_cfg;
    let draft_bytes = weight_bytes(
        d.hidden_size,
        d.num_attention_heads,
        d.num_key_value_heads,
        d.head_dim,
        d.intermediate_size,
        d.num_hidden_layers,
    ) + (2 * vocab * c.hidden) as f64
        + (2 * d.hidden_size * d.target_layer_ids.len() * c.hidden) as f64;
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
        target.rewind(args.context);
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

    host_costs::<B>(device, &c, args.context)?;

    // Tree verify at each budget.
    let mut features = None;
    for &budget in &args.budgets {
        let tree = RandomTree::new(budget, vocab, budget as u64);
        let block = tree.block();
        let mut enqueue = Vec::new();
        let s = repeat(args.warmup, args.reps, || -> Result<(), Error> {
            let t = Instant::now();
            let out = target.verify(&block)?;
            enqueue.push(t.elapsed());
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
                "{} rows, max depth {}; host enqueue {:.0} µs",
                budget + 1,
                tree.depths.iter().max().unwrap_or(&0),
                1e3 * Summary::of(&mut enqueue[args.warmup..]).median_ms
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
    // The same depth down the last children: rows that are not the block's first ones, so the
    // commit moves KV rows (a path of the first rows leaves them where they are).
    let mut scattered = vec![0];
    while scattered.len() < accepted.len() {
        match tree.children(scattered[scattered.len() - 1]).last() {
            Some(&child) => scattered.push(child as usize),
            None => break,
        }
    }
    let ancestors = AncestorBits::new(tree.ancestor_words(), tree.words_per_row()).ok_or("malformed tree")?;
    let block = TreeBlock {
        tokens: tree.tokens(),
        depths: tree.depths(),
        ancestors,
    };
    let mut time_commit = |path: &[usize]| -> Result<Summary, Error> {
        let mut commits = Vec::new();
        for i in 0..args.warmup + args.reps {
            target.verify(&block)?;
            B::sync(device)?;
            let t = Instant::now();
            target.commit(path)?;
            B::sync(device)?;
            if i >= args.warmup {
                commits.push(t.elapsed());
            }
            target.rewind(args.context);
        }
        Ok(Summary::of(&mut commits))
    };
    let commit = time_commit(&accepted)?;
    let scattered_commit = time_commit(&scattered)?;
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
            "B={}: build+compile {:.3} ms, walk {:.4} ms, commit of rows {accepted:?} {:.3} ms",
            args.glue_budget, build.median_ms, walk_s.median_ms, commit.median_ms
        ),
    );
    report.add(
        "glue, scattered path",
        Summary {
            median_ms: build.median_ms + walk_s.median_ms + scattered_commit.median_ms,
            min_ms: build.min_ms + walk_s.min_ms + scattered_commit.min_ms,
            reps: scattered_commit.reps,
        },
        None,
        format!(
            "commit of rows {scattered:?} {:.3} ms",
            scattered_commit.median_ms
        ),
    );
    report.print_table();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The presets' bytes per pass against docs' performance anchors (§4.1 of the reference
    /// notes: Qwen3-8B streams 15.136 GB per step, Qwen3.6-27B 51.24 GB — 25.62 B parameters,
    /// whose conv weights, 2 MB, the floor leaves out).
    #[test]
    fn presets_stream_the_anchor_bytes() {
        let streamed = |preset: Preset| match preset.configs().expect("preset parses").0 {
            TargetConfig::Dense(c) => dense_bytes(&c),
            TargetConfig::Hybrid(c) => hybrid_bytes(&c),
        };
        let qwen3 = streamed(Preset::Qwen3_8b);
        assert!((qwen3 / 15.136e9 - 1.0).abs() < 1e-3, "Qwen3-8B: {qwen3}");
        let qwen36 = streamed(Preset::Qwen36_27b);
        assert!((qwen36 / 51.24e9 - 1.0).abs() < 1e-3, "Qwen3.6-27B: {qwen36}");
    }
}

//! Every CubeCL kernel against its plain-burn reference on the chosen device (bf16 on the GPU),
//! and the linear kernel's weight bandwidth at Qwen3-8B shapes.
//!
//! The reference runs on the CPU in f32 from exactly the values the device holds (inputs are
//! rounded to the device's float type first), so the only differences are the kernels' own
//! rounding. Tolerance: 2e-2 of the largest reference magnitude for bf16 (DESIGN.md), 1e-4 for
//! f32.

use burn_ndarray::NdArray;
use burn_tensor::{Distribution, FloatDType, Tensor, TensorData};
use ddtree_kernels::nn::{HeadShape, QkvRows, RmsNorm};
use ddtree_kernels::{AncestorBits, AttentionContext, GdnHeads, KernelOps, Visibility, host_f32, host_ids};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::stages::RandomTree;
use crate::timing::repeat;
use crate::{Device, Error};

type Cpu = NdArray<f32>;

#[derive(clap::Args)]
pub struct Args {
    /// Where the kernels run.
    #[arg(long, value_enum, default_value_t = Device::Cuda)]
    pub device: Device,
    /// Skip the bandwidth measurements.
    #[arg(long)]
    no_bandwidth: bool,
    #[command(flatten)]
    kernels: crate::KernelSwitches,
    /// Also time the tensor-core linear at the launch shapes around the one it picks (feature
    /// tiles, chunk length, stages, k-slices) on the `--layers` weight shapes (CUDA), each
    /// checked against burn's matmul: at the given row counts (`--sweep-tiles 65`), or at 16,
    /// 65 and 129 rows.
    #[arg(long, num_args = 0.., value_delimiter = ',')]
    sweep_tiles: Option<Vec<usize>>,
    /// Also time the tensor-core linear with every number of k-slices that tiles on the
    /// `--layers` weight shapes (CUDA), each checked against burn's matmul: at the given row
    /// counts, or at 16 and 65.
    #[arg(long, num_args = 0.., value_delimiter = ',')]
    sweep_splits: Option<Vec<usize>>,
    /// The weight shapes `--sweep-tiles` and `--sweep-splits` run on (Qwen3-8B's and
    /// Qwen3.6-27B's layers; the fused gate/up through its SwiGLU): all by default.
    #[cfg(feature = "cuda")]
    #[arg(long, num_args = 1.., value_delimiter = ',',
          value_parser = clap::builder::PossibleValuesParser::new(tensor_cores::LAYER_SHAPES.map(|layer| layer.0)))]
    layers: Option<Vec<String>>,
    /// Also time the attention of an AR step, a drafter block and a B = 64 verify with the keys
    /// cut into 1–33 slices (CUDA), each checked against the reference.
    #[arg(long)]
    sweep_attention: bool,
    /// Also time the gated delta rule at Qwen3.6-27B's heads for an AR row, a 65-row draft tree
    /// and a 2048-row prefill with 1–32 units per state column (CUDA), each checked against the
    /// reference (also with `--only gated-delta-net`).
    #[arg(long)]
    sweep_delta: bool,
    /// Also time the GEMV (1 row) at the AR step's weight shapes, all or those named
    /// (`--sweep-gemv lm_head,down`), with 1–8 planes per feature (CUDA), each checked against
    /// burn's matmul.
    #[arg(long, num_args = 0.., value_delimiter = ',',
          value_parser = clap::builder::PossibleValuesParser::new(GEMV_SHAPES.map(|shape| shape.0)))]
    sweep_gemv: Option<Vec<String>>,
    /// Run only this group of checks.
    #[arg(long, value_enum)]
    only: Option<Group>,
}

/// A group of self-test checks that `--only` runs alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Group {
    /// What a commit runs: the KV-cache compaction, the delta rule's replay along the accepted
    /// path and the conv rows kept.
    Commit,
    /// The Gated DeltaNet's kernels: the delta rule over a tree and a sequence, the conv stage,
    /// gates and gated norm, and the commit checks.
    GatedDeltaNet,
    /// The tensor-core linear's checks (CUDA), and its sweeps asked for.
    TensorCores,
    /// The attention at Qwen3-8B's heads and others, and an AR step's attention with its
    /// rotation and its split merge inside.
    Attention,
}

/// The tensor-core linear's checks and the sweeps of its launch shapes asked for (CUDA only:
/// nothing elsewhere).
fn tensor_core_checks(args: &Args, checks: &mut Checks) -> Result<(), Error> {
    #[cfg(feature = "cuda")]
    if args.device == Device::Cuda {
        tensor_cores::check(checks, !args.no_bandwidth, args.kernels.warpgroup_mma)?;
        let layers = match &args.layers {
            Some(layers) => layers.clone(),
            None => tensor_cores::LAYER_SHAPES
                .map(|layer| layer.0.to_string())
                .to_vec(),
        };
        if let Some(rows) = &args.sweep_tiles {
            let rows = if rows.is_empty() { &[16, 65, 129][..] } else { rows };
            tensor_cores::sweep(checks, "tiles", rows, &layers, tensor_cores::tile_shapes)?;
        }
        if let Some(rows) = &args.sweep_splits {
            let rows = if rows.is_empty() { &[16, 65][..] } else { rows };
            tensor_cores::sweep(checks, "splits", rows, &layers, tensor_cores::split_shapes)?;
        }
    }
    #[cfg(not(feature = "cuda"))]
    let _ = (args, checks);
    Ok(())
}

/// Uploads host values to the device and reads back what it holds (rounded to its float type).
fn on_device<B: KernelOps, const D: usize>(
    values: Vec<f32>,
    shape: [usize; D],
    device: &B::Device,
) -> (Tensor<B, D>, Tensor<Cpu, D>) {
    let t = Tensor::<B, D>::from_data(TensorData::new(values, shape), device);
    let held = host_f32(t.clone());
    (
        t,
        Tensor::from_data(TensorData::new(held, shape), &Default::default()),
    )
}

/// The attention step's inputs beside the projection: Qwen3's layout (keys right after the
/// queries), the norms (epsilon 1e-6) and the rotary rows, for `context_rows` key/value-only rows
/// first.
fn rows<K: KernelOps>(
    [q_norm, k_norm]: [Tensor<K, 1>; 2],
    [cos, sin]: [Tensor<K, 2>; 2],
    (shape, context_rows): (HeadShape, usize),
) -> QkvRows<K> {
    QkvRows {
        shape,
        k_at: shape.heads * shape.head_dim,
        context_rows,
        q_norm: RmsNorm::new(q_norm, 1e-6),
        k_norm: RmsNorm::new(k_norm, 1e-6),
        cos,
        sin,
    }
}

fn random(seed: u64, len: usize, scale: f32) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.random_range(-scale..scale)).collect()
}

/// The visibility a test case names: "tree" (the ancestor sets `words`), "full", else causal.
fn visibility<'a>(mode: &str, words: &'a [u64], words_per_row: usize) -> Result<Visibility<'a>, Error> {
    Ok(match mode {
        "tree" => Visibility::Tree(AncestorBits::new(words, words_per_row).ok_or("bits")?),
        "full" => Visibility::Full,
        _ => Visibility::Causal,
    })
}

fn rel_err(got: &[f32], want: &[f32]) -> f32 {
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    got.iter().zip(want).fold(0f32, |m, (g, w)| m.max((g - w).abs())) / scale
}

struct Checks {
    tolerance: f32,
    failures: usize,
}

impl Checks {
    /// `linear` (or another `x · Wᵀ`) on `rows × k` by `[n, k]` against the reference.
    fn linear<B: KernelOps>(
        &mut self,
        device: &B::Device,
        name: &str,
        (rows, k, n): (usize, usize, usize),
        linear: impl FnOnce(Tensor<B, 2>, Tensor<B, 2>) -> Tensor<B, 2>,
    ) {
        let (x, x_ref) = on_device::<B, 2>(random(1, rows * k, 1.0), [rows, k], device);
        let (w, w_ref) = on_device::<B, 2>(random(2, n * k, 0.05), [n, k], device);
        let want = host_f32(Cpu::linear(x_ref, w_ref));
        self.compare(
            &format!("{name} {rows}x{k} · {n}x{k}ᵀ"),
            &host_f32(linear(x, w)),
            &want,
        );
    }

    /// Records a check that must hold bit for bit.
    fn exact(&mut self, name: &str, exact: bool) {
        self.failures += usize::from(!exact);
        println!("{}", json!({ "check": name, "exact": exact, "ok": exact }));
    }

    /// The self-test's result: an error naming how many checks failed.
    fn verdict(&self) -> Result<(), Error> {
        if self.failures > 0 {
            return Err(format!("{} kernel check(s) failed", self.failures).into());
        }
        println!("all kernel checks passed");
        Ok(())
    }

    fn compare(&mut self, name: &str, got: &[f32], want: &[f32]) {
        let err = if got.len() == want.len() {
            rel_err(got, want)
        } else {
            f32::INFINITY
        };
        let ok = err <= self.tolerance;
        self.failures += usize::from(!ok);
        println!(
            "{}",
            json!({ "check": name, "max_rel_err": err, "tolerance": self.tolerance, "ok": ok })
        );
    }
}

pub fn run<B: KernelOps>(device: &B::Device, args: &Args) -> Result<(), Error> {
    let bf16 = size_of::<B::FloatElem>() == 2;
    let mut checks = Checks {
        tolerance: if bf16 { 2e-2 } else { 1e-4 },
        failures: 0,
    };
    if args.device == Device::Cpu {
        eprintln!("note: on the CPU both sides run the reference; this checks the harness only");
    }
    args.kernels.apply();
    if args.device == Device::Wgpu {
        // Its matrices pass a software device's buffer limits; the kernels' wgpu tests are
        // `cargo test -p ddtree-kernels --features wgpu`.
        return Err(
            "self-test runs on cuda (or cpu, to check the harness); the kernels' wgpu tests are \
                    `cargo test -p ddtree-kernels --features wgpu`"
                .into(),
        );
    }

    match args.only {
        Some(Group::Commit) => {
            commit_checks::<B>(device, &mut checks);
            return checks.verdict();
        }
        Some(Group::GatedDeltaNet) => {
            gated_delta_net_checks::<B>(device, args, &mut checks)?;
            return checks.verdict();
        }
        Some(Group::TensorCores) => {
            tensor_core_checks(args, &mut checks)?;
            return checks.verdict();
        }
        Some(Group::Attention) => {
            attention_checks::<B>(device, args, &mut checks)?;
            return checks.verdict();
        }
        None => {}
    }
    for (rows, k, n) in [
        (1, 4096, 4096),
        (1, 4096, 1000),
        (4, 4096, 512),
        (8, 12288, 256),
        (16, 4096, 64),
        (1, 13, 7),
    ] {
        checks.linear::<B>(device, "linear", (rows, k, n), <B as KernelOps>::linear);
    }
    tensor_core_checks(args, &mut checks)?;
    #[cfg(feature = "cuda")]
    if args.device == Device::Cuda {
        if args.sweep_attention {
            tensor_cores::sweep_attention(&mut checks)?;
        }
        if let Some(names) = &args.sweep_gemv {
            sweep_gemv(&mut checks, names)?;
        }
    }
    for (rows, hidden) in [(1, 4096), (17, 4096), (3, 100)] {
        let (x, x_ref) = on_device::<B, 2>(random(3, rows * hidden, 4.0), [rows, hidden], device);
        let (w, w_ref) = on_device::<B, 1>(random(4, hidden, 1.0), [hidden], device);
        let want = host_f32(Cpu::rms_norm(x_ref, w_ref, 1e-6));
        checks.compare(
            &format!("rms_norm {rows}x{hidden}"),
            &host_f32(B::rms_norm(x, w, 1e-6)),
            &want,
        );
    }
    for (rows, hidden) in [(1, 4096), (65, 4096), (3, 100)] {
        let (x, x_ref) = on_device::<B, 2>(random(20, rows * hidden, 4.0), [rows, hidden], device);
        let (d, d_ref) = on_device::<B, 2>(random(21, rows * hidden, 4.0), [rows, hidden], device);
        let (w, w_ref) = on_device::<B, 1>(random(4, hidden, 1.0), [hidden], device);
        // The reference adds in f32; the device rounds the sum to its float type before the norm
        // (as its separate add would), which the tolerance covers.
        let (want_sum, want) = Cpu::add_rms_norm(x_ref, d_ref, w_ref, 1e-6);
        let (sum, got) = B::add_rms_norm(x, d, w, 1e-6);
        checks.compare(
            &format!("add_rms_norm sum {rows}x{hidden}"),
            &host_f32(sum),
            &host_f32(want_sum),
        );
        checks.compare(
            &format!("add_rms_norm {rows}x{hidden}"),
            &host_f32(got),
            &host_f32(want),
        );
    }
    for (rows, k, n) in [
        (1, 4096, 4096),
        (65, 4096, 4096),
        (65, 12288, 4096),
        (16, 12288, 4096),
        (3, 100, 64),
    ] {
        // A block's output projection with the residual add and next norm: against the
        // reference, and bit for bit against the separate launches it replaces (on the GPU the
        // k-sliced tensor-core linear's partial sums go straight into the norm).
        let (x, x_ref) = on_device::<B, 2>(random(40, rows * k, 1.0), [rows, k], device);
        let (w, w_ref) = on_device::<B, 2>(random(41, n * k, 0.05), [n, k], device);
        let (r, r_ref) = on_device::<B, 2>(random(42, rows * n, 4.0), [rows, n], device);
        let (g, g_ref) = on_device::<B, 1>(random(43, n, 1.0), [n], device);
        let (want_sum, want) = Cpu::linear_add_rms_norm(x_ref, w_ref, r_ref, g_ref, 1e-6);
        let (sum, got) = B::linear_add_rms_norm(x.clone(), w.clone(), r.clone(), g.clone(), 1e-6);
        let name = format!("linear_add_rms_norm {rows}x{k} · {n}x{k}ᵀ");
        let (sum, got) = (host_f32(sum), host_f32(got));
        checks.compare(&format!("{name}: sum"), &sum, &host_f32(want_sum));
        checks.compare(&name, &got, &host_f32(want));
        let (unfused_sum, unfused) = ddtree_kernels::linear_add_rms_norm_unfused(x, w, r, g, 1e-6);
        let exact = sum == host_f32(unfused_sum) && got == host_f32(unfused);
        checks.failures += usize::from(!exact);
        println!(
            "{}",
            json!({ "check": format!("{name}: fused = separate launches"), "exact": exact, "ok": exact })
        );
    }
    for (rows, cols) in [(1, 12288), (65, 12288), (3, 1001)] {
        let (g, g_ref) = on_device::<B, 2>(random(5, rows * cols, 6.0), [rows, cols], device);
        let (u, u_ref) = on_device::<B, 2>(random(6, rows * cols, 2.0), [rows, cols], device);
        let want = host_f32(Cpu::silu_mul(g_ref, u_ref));
        checks.compare(
            &format!("silu_mul {rows}x{cols}"),
            &host_f32(B::silu_mul(g, u)),
            &want,
        );
    }
    for (rows, k, inter) in [
        (1, 4096, 12288),
        (8, 4096, 1000),
        (3, 100, 7),
        (16, 4096, 12288),
        (65, 4096, 12288),
        (65, 4096, 1000),
        (33, 4096, 512),
        (129, 4096, 512),
    ] {
        // The SwiGLU variants of the GEMV (up to 8 rows) and of the tensor-core linear (9–72
        // rows) against the reference projection + activation (on CUDA, `tensor_cores::check`
        // also compares the latter bit for bit with the launches it replaces).
        let (x, x_ref) = on_device::<B, 2>(random(11, rows * k, 1.0), [rows, k], device);
        let (w, w_ref) = on_device::<B, 2>(random(12, 2 * inter * k, 0.05), [2 * inter, k], device);
        let want = host_f32(Cpu::gate_up_silu(x_ref, w_ref));
        let name = format!("gate_up_silu {rows}x{k} · {}x{k}ᵀ", 2 * inter);
        let got = host_f32(B::gate_up_silu(x.clone(), w.clone()));
        checks.compare(&name, &got, &want);
    }
    {
        // The fused gate/up projection's halves, read in place as row views.
        let (rows, cols) = (5, 12288);
        let (gate_up, gate_up_ref) =
            on_device::<B, 2>(random(13, rows * 2 * cols, 6.0), [rows, 2 * cols], device);
        let half = |t: Tensor<Cpu, 2>, c: std::ops::Range<usize>| t.slice([0..rows, c]);
        let want = host_f32(Cpu::silu_mul(
            half(gate_up_ref.clone(), 0..cols),
            half(gate_up_ref, cols..2 * cols),
        ));
        let got = host_f32(B::silu_mul(
            gate_up.clone().slice([0..rows, 0..cols]),
            gate_up.slice([0..rows, cols..2 * cols]),
        ));
        checks.compare("silu_mul of gate/up row views 5x12288", &got, &want);
    }
    for (rows, heads, head_dim, half) in [(1, 32, 128, 64), (65, 8, 128, 64), (3, 2, 64, 16)] {
        let (x, x_ref) = on_device::<B, 3>(
            random(14, rows * heads * head_dim, 2.0),
            [rows, heads, head_dim],
            device,
        );
        let (cos, cos_ref) = on_device::<B, 2>(random(15, rows * half, 1.0), [rows, half], device);
        let (sin, sin_ref) = on_device::<B, 2>(random(16, rows * half, 1.0), [rows, half], device);
        let want = host_f32(Cpu::rope(x_ref, cos_ref, sin_ref));
        checks.compare(
            &format!("rope {rows}x{heads}x{head_dim}, rotary {}", 2 * half),
            &host_f32(B::rope(x, cos, sin)),
            &want,
        );
    }
    {
        let (kv_heads, capacity, head_dim, n, at) = (8, 300, 128, 17, 250);
        let (cache, cache_ref) = on_device::<B, 3>(
            random(17, kv_heads * capacity * head_dim, 1.0),
            [kv_heads, capacity, head_dim],
            device,
        );
        let (rows, rows_ref) = on_device::<B, 3>(
            random(18, n * kv_heads * head_dim, 1.0),
            [n, kv_heads, head_dim],
            device,
        );
        let want = host_f32(Cpu::write_cache_rows(cache_ref, rows_ref, at));
        checks.compare(
            "write_cache_rows 17 rows at 250",
            &host_f32(B::write_cache_rows(cache, rows, at)),
            &want,
        );
    }
    for (n, context_rows) in [(1, 0), (65, 0), (20, 4)] {
        // Qwen3-8B's attention step: 32 query / 8 key-value heads of 128, full rotary, the
        // drafter's key/value-only context rows in the last case.
        let (heads, kv_heads, head_dim, half, capacity, at) = (32, 8, 128, 64, 2200, 2048);
        let width = (heads + 2 * kv_heads) * head_dim;
        let cache = [kv_heads, capacity, head_dim];
        let (qkv, qkv_ref) = on_device::<B, 2>(random(22, n * width, 3.0), [n, width], device);
        let (qn, qn_ref) = on_device::<B, 1>(random(23, head_dim, 1.5), [head_dim], device);
        let (kn, kn_ref) = on_device::<B, 1>(random(24, head_dim, 1.5), [head_dim], device);
        let (cos, cos_ref) = on_device::<B, 2>(random(25, n * half, 1.0), [n, half], device);
        let (sin, sin_ref) = on_device::<B, 2>(random(26, n * half, 1.0), [n, half], device);
        let cache_len = kv_heads * capacity * head_dim;
        let (keys, keys_ref) = on_device::<B, 3>(random(27, cache_len, 1.0), cache, device);
        let (values, values_ref) = on_device::<B, 3>(random(28, cache_len, 1.0), cache, device);
        let sizes = (
            HeadShape {
                heads,
                kv_heads,
                head_dim,
            },
            context_rows,
        );
        let want = Cpu::qk_norm_rope_write(
            qkv_ref,
            rows([qn_ref, kn_ref], [cos_ref, sin_ref], sizes),
            keys_ref,
            values_ref,
            at,
        );
        let got = B::qk_norm_rope_write(
            qkv,
            rows([qn.clone(), kn.clone()], [cos.clone(), sin.clone()], sizes),
            keys,
            values,
            at,
        );
        let name = format!("qk_norm_rope_write {n} rows ({context_rows} context)");
        checks.compare(&format!("{name}: queries"), &host_f32(got.0), &host_f32(want.0));
        checks.compare(&format!("{name}: keys"), &host_f32(got.1), &host_f32(want.1));
        checks.compare(&format!("{name}: values"), &host_f32(got.2), &host_f32(want.2));
        // The QKV projection and the rotation as one op (on the GPU a k-sliced tensor-core
        // projection's partial sums go straight into the rotation): bit for bit the separate
        // launches, each on fresh caches (the op writes them in place).
        let hidden = 4096;
        let x = on_device::<B, 2>(random(29, n * hidden, 1.0), [n, hidden], device).0;
        let w = on_device::<B, 2>(random(30, width * hidden, 0.05), [width, hidden], device).0;
        let caches = || {
            let cache_tensor = |seed| {
                Tensor::<B, 3>::from_data(TensorData::new(random(seed, cache_len, 1.0), cache), device)
            };
            (cache_tensor(27), cache_tensor(28))
        };
        let (k0, v0) = caches();
        let fused = B::linear_qk_norm_rope_write(
            x.clone(),
            w.clone(),
            rows([qn.clone(), kn.clone()], [cos.clone(), sin.clone()], sizes),
            k0,
            v0,
            at,
        );
        let (k1, v1) = caches();
        let separate = B::qk_norm_rope_write(
            <B as KernelOps>::linear(x, w),
            rows([qn, kn], [cos, sin], sizes),
            k1,
            v1,
            at,
        );
        let exact = [
            (fused.0, separate.0),
            (fused.1, separate.1),
            (fused.2, separate.2),
        ]
        .into_iter()
        .all(|(a, b)| host_f32(a) == host_f32(b));
        checks.failures += usize::from(!exact);
        println!(
            "{}",
            json!({ "check": format!("linear_qk_norm_rope_write {n}x{hidden} · {width}x{hidden}ᵀ ({context_rows} context): fused = separate launches"), "exact": exact, "ok": exact })
        );
    }
    attention_checks::<B>(device, args, &mut checks)?;
    {
        let (rows, cols) = (17, 151936);
        let (l, l_ref) = on_device::<B, 2>(random(7, rows * cols, 8.0), [rows, cols], device);
        let want: Vec<f32> = host_ids(Cpu::argmax(l_ref))
            .into_iter()
            .map(|i| i as f32)
            .collect();
        let got: Vec<f32> = host_ids(B::argmax(l)).into_iter().map(|i| i as f32).collect();
        // Token ids must match exactly (ties resolve to the first index on both sides).
        let exact = got == want;
        checks.failures += usize::from(!exact);
        println!(
            "{}",
            json!({ "check": format!("argmax {rows}x{cols}"), "exact": exact, "ok": exact })
        );
    }

    for (rows, cols, k) in [(15, 151936, 64), (15, 151936, 8), (3, 1000, 256)] {
        let (l, l_ref) = on_device::<B, 2>(random(19, rows * cols, 8.0), [rows, cols], device);
        let held = host_f32(l_ref.clone());
        let (want_values, want_ids) = Cpu::top_k_log_softmax(l_ref, k);
        let (values, ids) = B::top_k_log_softmax(l, k);
        let name = format!("top_k_log_softmax {rows}x{cols}, k={k}");
        checks.compare(&name, &host_f32(values), &host_f32(want_values));
        // bf16 has fewer distinct values than a row has columns, so ties are certain: each rank's
        // id must hold the reference's logit at that rank (the same choice up to ties).
        let logit_at = |ids: Vec<u32>| -> Vec<f32> {
            ids.iter()
                .enumerate()
                .map(|(i, &c)| held[(i / k) * cols + c as usize])
                .collect()
        };
        let exact = logit_at(host_ids(ids)) == logit_at(host_ids(want_ids));
        checks.failures += usize::from(!exact);
        println!(
            "{}",
            json!({ "check": format!("{name} ids (up to ties)"), "exact": exact, "ok": exact })
        );
    }
    gated_delta_net_checks::<B>(device, args, &mut checks)?;
    if !args.no_bandwidth {
        bandwidth::<B>(device, "linear", &[1, 65], <B as KernelOps>::linear)?;
    }
    checks.verdict()
}

/// The attention (`--only attention`, and part of every run): an AR step's with its rotation
/// (and on CUDA its split merge) inside, then every visibility at Qwen3-8B's heads and others.
fn attention_checks<B: KernelOps>(device: &B::Device, args: &Args, checks: &mut Checks) -> Result<(), Error> {
    rotation_in_attention_checks::<B>(device, args.device == Device::Cuda, checks);
    // Qwen3-8B's heads (32 q / 8 kv × 128), a Qwen3.5 layout (24 / 4 × 256) and head_dim 64
    // with six query heads per KV head: one row (AR), fewer than 16 queries per KV head, drafter
    // blocks and trees (tensor cores on CUDA: `mma.sync` up to head_dim 128, WMMA above), a
    // sliding window.
    for (rows, prefix, mode, (q_heads, kv_heads, head_dim), window) in [
        (1, 2048, "causal", (32, 8, 128), None),
        (3, 100, "causal", (32, 8, 128), None),
        (65, 2048, "tree", (32, 8, 128), None),
        (129, 2048, "tree", (32, 8, 128), None),
        (16, 300, "full", (32, 8, 128), None),
        (33, 1000, "causal", (32, 8, 128), Some(700)),
        (17, 500, "tree", (24, 4, 256), None),
        (23, 900, "tree", (24, 4, 64), None),
    ] {
        let capacity = prefix + rows + 5;
        // The ancestor sets of a random tree of `rows` nodes (root + `rows − 1` draft nodes).
        let RandomTree {
            words, words_per_row, ..
        } = RandomTree::new(rows - 1, 1, 12);
        let visibility = visibility(mode, &words, words_per_row)?;
        let ctx = AttentionContext {
            prefix_len: prefix,
            visibility,
            window,
        };
        let (q, q_ref) = on_device::<B, 3>(
            random(8, rows * q_heads * head_dim, 2.0),
            [rows, q_heads, head_dim],
            device,
        );
        let kv_shape = [kv_heads, capacity, head_dim];
        let (k, k_ref) = on_device::<B, 3>(random(9, kv_heads * capacity * head_dim, 2.0), kv_shape, device);
        let (v, v_ref) = on_device::<B, 3>(random(10, kv_heads * capacity * head_dim, 1.0), kv_shape, device);
        let scale = 1.0 / (head_dim as f64).sqrt();
        let want = host_f32(Cpu::cached_attention(q_ref, k_ref, v_ref, &ctx, scale));
        let got = host_f32(B::cached_attention(q.clone(), k.clone(), v.clone(), &ctx, scale));
        checks.compare(
            &format!("attention {rows} rows after {prefix}, {q_heads}/{kv_heads}×{head_dim}, {visibility:?}, window {window:?}"),
            &got,
            &want,
        );
        if window.is_none() {
            // A window wider than the cache hides nothing but sends every step through the
            // mask: the same bits as the unmasked steps the kernel takes without a window.
            let masked = AttentionContext {
                window: Some(capacity),
                ..ctx
            };
            let exact = host_f32(B::cached_attention(q, k, v, &masked, scale)) == got;
            checks.exact(
                &format!("attention {rows} rows after {prefix}, {q_heads}/{kv_heads}×{head_dim}, {mode}: unmasked steps = masked"),
                exact,
            );
        }
    }
    Ok(())
}

/// An AR step's QKV projection, q/k norm + RoPE, cache write and attention as one op
/// ([`KernelOps::linear_qk_norm_rope_attention`]; on CUDA the rotation runs inside the attention
/// launch): against the reference, and bit for bit the separate ops, each on fresh caches (the op
/// writes them in place). Qwen3-8B's heads after 2048 keys (the new key alone in the last split)
/// and after 2000 (17 keys in it), and six query heads of 64 per KV head (two rounds of heads per
/// plane).
/// On CUDA also the split merge in the attention launch's last cube against its own launch.
fn rotation_in_attention_checks<B: KernelOps>(device: &B::Device, on_cuda: bool, checks: &mut Checks) {
    for (heads, kv_heads, head_dim, prefix) in [(32, 8, 128, 2048), (32, 8, 128, 2000), (24, 4, 64, 900)] {
        let (hidden, half, capacity) = (1024, head_dim / 2, prefix + 8);
        let width = (heads + 2 * kv_heads) * head_dim;
        let cache = [kv_heads, capacity, head_dim];
        let cache_len = kv_heads * capacity * head_dim;
        let (x, x_ref) = on_device::<B, 2>(random(40, hidden, 1.0), [1, hidden], device);
        let (w, w_ref) = on_device::<B, 2>(random(41, width * hidden, 0.1), [width, hidden], device);
        let (qn, qn_ref) = on_device::<B, 1>(random(42, head_dim, 1.5), [head_dim], device);
        let (kn, kn_ref) = on_device::<B, 1>(random(43, head_dim, 1.5), [head_dim], device);
        let (cos, cos_ref) = on_device::<B, 2>(random(44, half, 1.0), [1, half], device);
        let (sin, sin_ref) = on_device::<B, 2>(random(45, half, 1.0), [1, half], device);
        let (k, k_ref) = on_device::<B, 3>(random(46, cache_len, 1.0), cache, device);
        let (v, v_ref) = on_device::<B, 3>(random(47, cache_len, 1.0), cache, device);
        let shape = (
            HeadShape {
                heads,
                kv_heads,
                head_dim,
            },
            0,
        );
        let ctx = AttentionContext {
            prefix_len: prefix,
            visibility: Visibility::Causal,
            window: None,
        };
        let scale = 1.0 / (head_dim as f64).sqrt();
        let want = Cpu::linear_qk_norm_rope_attention(
            x_ref,
            w_ref,
            rows([qn_ref, kn_ref], [cos_ref, sin_ref], shape),
            k_ref,
            v_ref,
            &ctx,
            scale,
        );
        // Fresh copies of the caches for each run: the op writes them in place.
        let fresh = |t: &Tensor<B, 3>| Tensor::<B, 3>::from_data(t.to_data(), device);
        let fused = B::linear_qk_norm_rope_attention(
            x.clone(),
            w.clone(),
            rows([qn.clone(), kn.clone()], [cos.clone(), sin.clone()], shape),
            fresh(&k),
            fresh(&v),
            &ctx,
            scale,
        );
        let separate = ddtree_kernels::linear_qk_norm_rope_attention_unfused::<B>(
            x.clone(),
            w.clone(),
            rows([qn.clone(), kn.clone()], [cos.clone(), sin.clone()], shape),
            fresh(&k),
            fresh(&v),
            &ctx,
            scale,
        );
        let name =
            format!("linear_qk_norm_rope_attention 1 row after {prefix}, {heads}/{kv_heads}×{head_dim}");
        let [out, keys, values] = [fused.0, fused.1, fused.2].map(host_f32);
        checks.compare(&format!("{name}: attention"), &out, &host_f32(want.0));
        checks.compare(&format!("{name}: keys"), &keys, &host_f32(want.1));
        checks.compare(&format!("{name}: values"), &values, &host_f32(want.2));
        let exact =
            out == host_f32(separate.0) && keys == host_f32(separate.1) && values == host_f32(separate.2);
        checks.exact(&format!("{name}: fused = separate launches"), exact);
        #[cfg(feature = "cuda")]
        if on_cuda {
            // The same attention with its splits merged by a launch of their own: the same bits.
            ddtree_kernels::cube::set_fold_combine(false);
            let apart = B::linear_qk_norm_rope_attention(
                x,
                w,
                rows([qn, kn], [cos, sin], shape),
                fresh(&k),
                fresh(&v),
                &ctx,
                scale,
            );
            ddtree_kernels::cube::set_fold_combine(true);
            checks.exact(
                &format!("{name}: split merge in the last cube = its own launch"),
                out == host_f32(apart.0),
            );
        }
        #[cfg(not(feature = "cuda"))]
        let _ = on_cuda;
    }
}

/// The Gated DeltaNet's checks (`--only gated-delta-net`, and part of every run): the delta rule,
/// the conv stage, gates and gated norm, what a commit runs, and with `--sweep-delta` on CUDA
/// the delta rule's units per column.
fn gated_delta_net_checks<B: KernelOps>(
    device: &B::Device,
    args: &Args,
    checks: &mut Checks,
) -> Result<(), Error> {
    delta_rule_checks::<B>(device, checks);
    gdn_checks::<B>(device, checks);
    commit_checks::<B>(device, checks);
    if args.sweep_delta && args.device == Device::Cuda {
        #[cfg(feature = "cuda")]
        sweep_delta(checks)?;
    }
    Ok(())
}

/// Random inputs of the gated delta rule, `rows` rows of `[key_heads, heads, dk, dv]`: q, k, v,
/// g, β and the state on the device, then the same as the device holds them on the CPU. Keys and
/// queries are L2-normalised (as in the model), `g` in [−0.5, 0), `β` in [0.5, 1).
#[allow(clippy::type_complexity)]
fn delta_inputs<B: KernelOps>(
    device: &B::Device,
    rows: usize,
    [key_heads, heads, dk, dv]: [usize; 4],
) -> (
    [Tensor<B, 3>; 3],
    [Tensor<B, 2>; 2],
    Tensor<B, 3>,
    [Tensor<Cpu, 3>; 3],
    [Tensor<Cpu, 2>; 2],
    Tensor<Cpu, 3>,
) {
    let unit_rows = |seed| {
        let mut x = random(seed, rows * key_heads * dk, 1.0);
        for row in x.chunks_mut(dk) {
            let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-6);
            row.iter_mut().for_each(|v| *v /= norm);
        }
        x
    };
    let (q, q_ref) = on_device::<B, 3>(unit_rows(24), [rows, key_heads, dk], device);
    let (k, k_ref) = on_device::<B, 3>(unit_rows(25), [rows, key_heads, dk], device);
    let (v, v_ref) = on_device::<B, 3>(random(26, rows * heads * dv, 1.0), [rows, heads, dv], device);
    let gates = |seed, offset| {
        random(seed, rows * heads, 0.5)
            .iter()
            .map(|x| x + offset)
            .collect()
    };
    let (g, g_ref) = on_device::<B, 2>(gates(27, -0.5), [rows, heads], device);
    let (beta, beta_ref) = on_device::<B, 2>(gates(28, 0.5), [rows, heads], device);
    let (state, state_ref) = on_device::<B, 3>(random(29, heads * dk * dv, 1.0), [heads, dk, dv], device);
    (
        [q, k, v],
        [g, beta],
        state,
        [q_ref, k_ref, v_ref],
        [g_ref, beta_ref],
        state_ref,
    )
}

/// The gated delta rule at Qwen3.5's linear-attention heads (16 key / 32 value heads × 128): a
/// 65-row draft tree (random parents) and a 40-row sequence, whose f32 state must come out the
/// same, bit for bit, when the rows arrive one call at a time.
fn delta_rule_checks<B: KernelOps>(device: &B::Device, checks: &mut Checks) {
    for (case, rows) in [("tree", 65), ("sequence", 40)] {
        let (key_heads, heads, dk, dv) = (16, 32, 128, 128);
        let mut rng = StdRng::seed_from_u64(23);
        let parents: Vec<i32> = (0..rows as i32)
            .map(|r| match (r, case) {
                (0, _) => -1,
                (_, "tree") => rng.random_range(0..r),
                _ => r - 1,
            })
            .collect();
        let ([q, k, v], [g, beta], state, [q_ref, k_ref, v_ref], [g_ref, beta_ref], state_ref) =
            delta_inputs::<B>(device, rows, [key_heads, heads, dk, dv]);
        // The tree with an f32 state, as the models keep it; the sequence with a bf16 one.
        let state = if case == "tree" {
            state.cast(FloatDType::F32)
        } else {
            state
        };
        let want = Cpu::gated_delta_rule(q_ref, k_ref, v_ref, g_ref, beta_ref, state_ref, &parents);
        let got = B::gated_delta_rule(
            q.clone(),
            k.clone(),
            v.clone(),
            g.clone(),
            beta.clone(),
            state.clone(),
            &parents,
        );
        let name = format!("gated_delta_rule {rows}-row {case}, {key_heads}/{heads}×{dk}");
        checks.compare(
            &format!("{name}: outputs"),
            &host_f32(got.0.clone()),
            &host_f32(want.0),
        );
        checks.compare(
            &format!("{name}: last state"),
            &host_f32(got.1.clone()),
            &host_f32(want.1),
        );
        if case == "sequence" {
            // With an f32 state, one row per call (AR steps) gives the bits of one call.
            let (mut outs, mut last) = (Vec::new(), state.cast(FloatDType::F32));
            let whole = B::gated_delta_rule(
                q.clone(),
                k.clone(),
                v.clone(),
                g.clone(),
                beta.clone(),
                last.clone(),
                &parents,
            );
            for r in 0..rows {
                let row3 = |t: &Tensor<B, 3>| t.clone().slice(r..r + 1);
                let row2 = |t: &Tensor<B, 2>| t.clone().slice(r..r + 1);
                let (out, next) =
                    B::gated_delta_rule(row3(&q), row3(&k), row3(&v), row2(&g), row2(&beta), last, &[-1]);
                outs.extend(host_f32(out));
                last = next;
            }
            let exact = outs == host_f32(whole.0) && host_f32(last) == host_f32(whole.1);
            checks.failures += usize::from(!exact);
            println!(
                "{}",
                json!({ "check": format!("{name}: f32 state, {rows} one-row calls = one call"), "exact": exact, "ok": exact })
            );
        }
    }
}

/// What a commit runs, at real shapes: the KV caches' compaction (Qwen3-8B's 36 layers of 8 × 128
/// heads and Qwen3.6-27B's 16 of 4 × 256, a scattered path after 2048 rows, every layer in one
/// call), and at Qwen3.6-27B's Gated DeltaNet heads the delta rule's replay along the path to a
/// 65-row tree's last row (rows read in place, f32 state) and the conv rows kept. Moves are
/// exact; the replay within tolerance.
fn commit_checks<B: KernelOps>(device: &B::Device, checks: &mut Checks) {
    let keep = [0, 3, 9, 10, 17, 30, 31, 40];
    for (layers, kv_heads, head_dim) in [(36, 8, 128), (16, 4, 256)] {
        let (capacity, at) = (2200, 2048);
        let shape = [kv_heads, capacity, head_dim];
        let len = kv_heads * capacity * head_dim;
        let (mut caches, mut caches_ref) = (Vec::new(), Vec::new());
        for layer in 0..layers as u64 {
            let (keys, keys_ref) = on_device::<B, 3>(random(60 + 2 * layer, len, 1.0), shape, device);
            let (values, values_ref) = on_device::<B, 3>(random(61 + 2 * layer, len, 1.0), shape, device);
            caches.push((keys, values));
            caches_ref.push((keys_ref, values_ref));
        }
        let compacted = B::compact_kv_rows(caches, at, &keep);
        let compacted_ref = Cpu::compact_kv_rows(caches_ref, at, &keep);
        let exact = compacted.len() == layers
            && compacted
                .into_iter()
                .zip(compacted_ref)
                .all(|((k, v), (k_ref, v_ref))| {
                    host_f32(k) == host_f32(k_ref) && host_f32(v) == host_f32(v_ref)
                });
        checks.exact(
            &format!("compact_kv_rows {layers} layers of {kv_heads}×{head_dim}, {keep:?} at {at}"),
            exact,
        );
    }
    let heads = GdnHeads {
        key_heads: 16,
        value_heads: 48,
        key_dim: 128,
        value_dim: 128,
    };
    let (n, kh, vh, dk, dv) = (
        65,
        heads.key_heads,
        heads.value_heads,
        heads.key_dim,
        heads.value_dim,
    );
    // The root-first path to the last row of a random tree (each row's parent an earlier row).
    let mut rng = StdRng::seed_from_u64(61);
    let parents: Vec<usize> = (0..n)
        .map(|r| if r == 0 { 0 } else { rng.random_range(0..r) })
        .collect();
    let mut path = vec![n - 1];
    while path[path.len() - 1] != 0 {
        path.push(parents[path[path.len() - 1]]);
    }
    path.reverse();
    // L2-normalised q and k rows, as the conv stage gives them.
    let unit = |seed: u64| {
        let mut x = random(seed, n * kh * dk, 1.0);
        for row in x.chunks_mut(dk) {
            let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt();
            row.iter_mut().for_each(|v| *v /= norm);
        }
        x
    };
    let (q, q_ref) = on_device::<B, 3>(unit(62), [n, kh, dk], device);
    let (k, k_ref) = on_device::<B, 3>(unit(63), [n, kh, dk], device);
    let (v, v_ref) = on_device::<B, 3>(random(64, n * vh * dv, 1.0), [n, vh, dv], device);
    let g: Vec<f32> = random(65, n * vh, 0.5).iter().map(|x| x - 0.5).collect();
    let beta: Vec<f32> = random(66, n * vh, 0.5).iter().map(|x| x + 0.5).collect();
    let (g, g_ref) = on_device::<B, 2>(g, [n, vh], device);
    let (beta, beta_ref) = on_device::<B, 2>(beta, [n, vh], device);
    let (state, state_ref) = on_device::<B, 3>(random(67, vh * dk * dv, 1.0), [vh, dk, dv], device);
    let got = B::gated_delta_rule_along(q, k, v, g, beta, state.cast(FloatDType::F32), &path);
    let want = Cpu::gated_delta_rule_along(q_ref, k_ref, v_ref, g_ref, beta_ref, state_ref, &path);
    checks.compare(
        &format!(
            "gated_delta_rule_along a {}-row path of a 65-row tree, 16/48×128: state",
            path.len()
        ),
        &host_f32(got),
        &host_f32(want),
    );
    let c = heads.channels();
    let p = 2 * c - heads.key_width() + 2 * vh;
    let (history, history_ref) = on_device::<B, 2>(random(68, 3 * c, 2.0), [3, c], device);
    let (block, block_ref) = on_device::<B, 2>(random(69, n * p, 2.0), [n, p], device);
    let exact = host_f32(B::gdn_conv_commit(history, block, &path))
        == host_f32(Cpu::gdn_conv_commit(history_ref, block_ref, &path));
    checks.exact("gdn_conv_commit of the path, 16/48 heads × 128", exact);
}

/// The Gated DeltaNet's conv stage, gates and gated norm, and the gated attention's output gate,
/// at Qwen3.6-27B's heads (16 key / 48 value heads × 128; 24 attention heads × 256) for an AR row
/// and a 65-row verify (random conv windows, the gates and the attention gate read as column
/// views of a projection, as the layers pass them).
fn gdn_checks<B: KernelOps>(device: &B::Device, checks: &mut Checks) {
    let heads = GdnHeads {
        key_heads: 16,
        value_heads: 48,
        key_dim: 128,
        value_dim: 128,
    };
    let (c, vh) = (heads.channels(), heads.value_heads);
    for n in [1, 65] {
        let m = n + 3;
        let mut rng = StdRng::seed_from_u64(40 + n as u64);
        let windows: Vec<usize> = (0..4 * n).map(|_| rng.random_range(0..m)).collect();
        // The block's rows: the first C columns of the layer's input projection (its width).
        let p = 2 * c - heads.key_width() + 2 * vh;
        let (history, history_ref) = on_device::<B, 2>(random(41, 3 * c, 2.0), [3, c], device);
        let (block, block_ref) = on_device::<B, 2>(random(43, n * p, 2.0), [n, p], device);
        let (w, w_ref) = on_device::<B, 2>(random(42, c * 4, 0.8), [c, 4], device);
        let want = Cpu::gdn_conv_qkv(history_ref, block_ref, &windows, w_ref, heads);
        let got = B::gdn_conv_qkv(history, block, &windows, w, heads);
        let exact = host_f32(got.history) == host_f32(want.history);
        checks.failures += usize::from(!exact);
        println!(
            "{}",
            json!({ "check": format!("gdn_conv_qkv {n} rows: the last rows kept"), "exact": exact, "ok": exact })
        );
        for (part, got, want) in [("q", got.q, want.q), ("k", got.k, want.k), ("v", got.v, want.v)] {
            checks.compare(
                &format!("gdn_conv_qkv {n} rows, 16/48 heads × 128: {part}"),
                &host_f32(got),
                &host_f32(want),
            );
        }

        let width = 7 + 2 * vh;
        let (proj, proj_ref) = on_device::<B, 2>(random(43, n * width, 6.0), [n, width], device);
        let (a_log, a_log_ref) = on_device::<B, 1>(random(44, vh, 1.0), [vh], device);
        let (dt_bias, dt_bias_ref) = on_device::<B, 1>(random(45, vh, 1.0), [vh], device);
        // `b` from column 7 (an offset a slice would copy), then `a`.
        let want = Cpu::gdn_gates(proj_ref, 7, a_log_ref, dt_bias_ref);
        let got = B::gdn_gates(proj, 7, a_log, dt_bias);
        checks.compare(
            &format!("gdn_gates {n}x{vh}: g"),
            &host_f32(got.0),
            &host_f32(want.0),
        );
        checks.compare(
            &format!("gdn_gates {n}x{vh}: beta"),
            &host_f32(got.1),
            &host_f32(want.1),
        );

        // Per value head, `z` columns of the projection read in place.
        let vw = heads.value_width();
        let (x, x_ref) = on_device::<B, 2>(random(46, n * vw, 3.0), [n, vw], device);
        let (z, z_ref) = on_device::<B, 2>(random(47, n * 2 * vw, 6.0), [n, 2 * vw], device);
        let (nw, nw_ref) = on_device::<B, 1>(random(48, 128, 2.0), [128], device);
        checks.compare(
            &format!("gated_rms_norm {n}x{vh}x128 (z in place)"),
            &host_f32(B::gated_rms_norm(x, z, vw, nw, 1e-6)),
            &host_f32(Cpu::gated_rms_norm(x_ref, z_ref, vw, nw_ref, 1e-6)),
        );

        let q = 24 * 256;
        let (out, out_ref) = on_device::<B, 2>(random(49, n * q, 4.0), [n, q], device);
        let (qg, qg_ref) = on_device::<B, 2>(random(50, n * 3 * q, 6.0), [n, 3 * q], device);
        checks.compare(
            &format!("sigmoid_mul {n}x{q} (gate view)"),
            &host_f32(B::sigmoid_mul(out, qg.slice([0..n, q..2 * q]))),
            &host_f32(Cpu::sigmoid_mul(out_ref, qg_ref.slice([0..n, q..2 * q]))),
        );
    }
}

/// Weight GB/s of `linear` (an `x · Wᵀ`) for `row_counts` rows at the Qwen3-8B weight shapes.
fn bandwidth<B: KernelOps>(
    device: &B::Device,
    name: &str,
    row_counts: &[usize],
    linear: impl Fn(Tensor<B, 2>, Tensor<B, 2>) -> Tensor<B, 2>,
) -> Result<(), Error> {
    let elem = size_of::<B::FloatElem>();
    for (n, k) in [(12288, 4096), (4096, 12288), (151936, 4096)] {
        let weights = weight_copies::<B>(device, n, k);
        for &rows in row_counts {
            let x = Tensor::<B, 2>::random([rows, k], Distribution::Normal(0.0, 1.0), device);
            let per_launch_s = seconds_per_launch(device, &x, &weights, &linear)?;
            let gbs = (n * k * elem) as f64 / per_launch_s / 1e9;
            println!(
                "{}",
                json!({ "bandwidth": format!("{name} {rows}x{k} · {n}x{k}ᵀ"), "us": per_launch_s * 1e6,
                        "weight_GB_per_s": gbs, "of_4300": gbs / 4300.0 })
            );
        }
    }
    Ok(())
}

/// Enough random copies of an `[n, k]` weight that the 50 MB L2 never holds the next one.
fn weight_copies<B: KernelOps>(device: &B::Device, n: usize, k: usize) -> Vec<Tensor<B, 2>> {
    let copies = (1_500_000_000 / (n * k * size_of::<B::FloatElem>())).clamp(1, 12);
    (0..copies)
        .map(|_| Tensor::random([n, k], Distribution::Normal(0.0, 0.02), device))
        .collect()
}

/// Median seconds of one `linear(x, w)`, cycling through the weight copies (warmed up first).
fn seconds_per_launch<B: KernelOps>(
    device: &B::Device,
    x: &Tensor<B, 2>,
    weights: &[Tensor<B, 2>],
    linear: impl Fn(Tensor<B, 2>, Tensor<B, 2>) -> Tensor<B, 2>,
) -> Result<f64, Error> {
    for w in weights {
        linear(x.clone(), w.clone());
    }
    B::sync(device)?;
    let launches = 4 * weights.len();
    let mut i = 0;
    let s = repeat(1, 5, || -> Result<(), Error> {
        for _ in 0..launches {
            linear(x.clone(), weights[i % weights.len()].clone());
            i += 1;
        }
        B::sync(device)?;
        Ok(())
    })?;
    Ok(s.median_ms / 1e3 / launches as f64)
}

/// The AR step's weight shapes of Qwen3-8B that `--sweep-gemv` can time: name, output features,
/// input features, whether the output is the fused gate/up that SwiGLU halves.
const GEMV_SHAPES: [(&str, usize, usize, bool); 5] = [
    ("qkv", 6144, 4096, false),
    ("o_proj", 4096, 4096, false),
    ("gate_up", 24576, 4096, true),
    ("down", 4096, 12288, false),
    ("lm_head", 151936, 4096, false),
];

/// The gated delta rule with 1–32 units per state column at Qwen3.6-27B's Gated DeltaNet heads
/// (16 key / 48 value heads × 128, f32 state) for an AR row, a 65-row draft tree (random parents)
/// and a 2048-row prefill: each checked against the reference, then timed per launch (median of
/// five runs of ten back-to-back launches).
#[cfg(feature = "cuda")]
fn sweep_delta(checks: &mut Checks) -> Result<(), Error> {
    use ddtree_kernels::cube::{Cuda, gated_delta_rule_parts, gated_delta_rule_with};
    let device = Default::default();
    let mut rng = StdRng::seed_from_u64(31);
    let tree: Vec<i32> = (0..65)
        .map(|r| if r == 0 { -1 } else { rng.random_range(0..r) })
        .collect();
    let cases = [
        ("AR row", vec![-1]),
        ("65-row tree", tree),
        ("2048-row prefill", (-1..2047).collect()),
    ];
    for (case, parents) in cases {
        let heads = [16, 48, 128, 128];
        let (qkv, gates, state, qkv_ref, gates_ref, state_ref) =
            delta_inputs::<Cuda>(&device, parents.len(), heads);
        let chosen = gated_delta_rule_parts(&qkv[0]);
        let state = state.cast(FloatDType::F32);
        let [q_ref, k_ref, v_ref] = qkv_ref;
        let [g_ref, beta_ref] = gates_ref;
        let want = Cpu::gated_delta_rule(q_ref, k_ref, v_ref, g_ref, beta_ref, state_ref, &parents);
        let (want_out, want_last) = (host_f32(want.0), host_f32(want.1));
        for parts in [1, 2, 4, 8, 16, 32] {
            let run = || gated_delta_rule_with(qkv.clone(), gates.clone(), state.clone(), &parents, parts);
            let (out, last) = run();
            let name = format!("gated_delta_rule {case}, {parts} units per column");
            checks.compare(&format!("{name}: outputs"), &host_f32(out), &want_out);
            checks.compare(&format!("{name}: last state"), &host_f32(last), &want_last);
            let launches = 10;
            let s = repeat(1, 5, || -> Result<(), Error> {
                for _ in 0..launches {
                    run();
                }
                <Cuda as burn_tensor::backend::Backend>::sync(&device)?;
                Ok(())
            })?;
            println!(
                "{}",
                json!({ "sweep_delta": case, "units_per_column": parts, "chosen": parts == chosen,
                        "us": s.median_ms * 1e3 / launches as f64 })
            );
        }
    }
    Ok(())
}

/// The GEMV with 1, 2, 4 and 8 planes per feature at an AR step's weight shapes of Qwen3-8B
/// (QKV, o_proj, the fused gate/up with its SwiGLU, down, the LM head; all, or those `names`
/// lists): each checked against burn's matmul (and the activation), then timed like `bandwidth`;
/// the default is marked.
#[cfg(feature = "cuda")]
fn sweep_gemv(checks: &mut Checks, names: &[String]) -> Result<(), Error> {
    use ddtree_kernels::cube::linear::GEMV_K_PLANES;
    use ddtree_kernels::cube::{Cuda, linear_rows_with};
    let device = Default::default();
    for (name, n, k, swiglu) in GEMV_SHAPES {
        if !names.is_empty() && !names.iter().any(|n| n == name) {
            continue;
        }
        let weights = weight_copies::<Cuda>(&device, n, k);
        let x = Tensor::<Cuda, 2>::random([1, k], Distribution::Normal(0.0, 1.0), &device);
        let product = x.clone().matmul(weights[0].clone().transpose());
        let want = host_f32(if swiglu {
            let half = n / 2;
            ddtree_kernels::reference::silu_mul(
                product.clone().slice([0..1, 0..half]),
                product.slice([0..1, half..n]),
            )
        } else {
            product
        });
        for k_planes in [1, 2, 4, 8] {
            let run = |x, w| linear_rows_with(x, w, swiglu, k_planes);
            checks.compare(
                &format!("linear_rows {name}, {k_planes} planes per feature"),
                &host_f32(run(x.clone(), weights[0].clone())),
                &want,
            );
            let per_launch_s = seconds_per_launch(&device, &x, &weights, run)?;
            let gbs = (n * k * 2) as f64 / per_launch_s / 1e9;
            println!(
                "{}",
                json!({ "sweep_gemv": format!("{name} 1x{k} · {n}x{k}ᵀ"), "k_planes": k_planes,
                        "chosen": k_planes == GEMV_K_PLANES, "us": per_launch_s * 1e6,
                        "of_4300": gbs / 4300.0 })
            );
        }
    }
    Ok(())
}

/// The tensor-core linear ([`ddtree_kernels::cube::linear_tiled`]) of the tree-verify and drafter
/// rows: checked against the reference at drafter and tree-verify row counts (ragged ones, one or
/// two W tiles per plane, cubes only partly inside `n_out`, one to sixteen k-slices, chunks of
/// 32–128 k, small and large `k`), then measured like `linear`.
#[cfg(feature = "cuda")]
mod tensor_cores {
    use super::*;
    use ddtree_kernels::cube::linear::MmaShape;
    use ddtree_kernels::cube::{
        Cuda, cached_attention_with, gate_up_mma_shape, gate_up_silu_tiled_with, linear_tiled,
        linear_tiled_with, linear_wgmma, mma_shape, multiprocessors_of,
    };

    /// The product, or a 1×1 zero tensor when the kernel declines the shape (so the comparison,
    /// whose lengths then differ, fails).
    fn tiled(x: Tensor<Cuda, 2>, w: Tensor<Cuda, 2>) -> Tensor<Cuda, 2> {
        linear_tiled(x, w).unwrap_or_else(|(x, _)| Tensor::zeros([1, 1], &x.device()))
    }

    fn with(shape: MmaShape) -> impl Fn(Tensor<Cuda, 2>, Tensor<Cuda, 2>) -> Tensor<Cuda, 2> {
        move |x, w| linear_tiled_with(x, w, shape).unwrap_or_else(|(x, _)| Tensor::zeros([1, 1], &x.device()))
    }

    /// Whether a fused SwiGLU product equals the activation of the unfused one's halves bit for
    /// bit (either missing fails).
    fn swiglu_exact(
        fused: Option<Tensor<Cuda, 2>>,
        both: Option<Tensor<Cuda, 2>>,
        rows: usize,
        inter: usize,
    ) -> bool {
        match (fused, both) {
            (Some(fused), Some(both)) => {
                let gate = both.clone().slice([0..rows, 0..inter]);
                let up = both.slice([0..rows, inter..2 * inter]);
                host_f32(fused) == host_f32(<Cuda as KernelOps>::silu_mul(gate, up))
            }
            _ => false,
        }
    }

    /// The tensor-core checks; with `warpgroup_mma`, also the warpgroup-MMA linear's (sm_90).
    pub fn check(checks: &mut Checks, measure: bool, warpgroup_mma: bool) -> Result<(), Error> {
        let device = Default::default();
        for shape in [
            (9, 64, 96),
            (16, 4096, 6144),
            (17, 4096, 512),
            (20, 96, 80),
            (65, 4096, 1024),
            (129, 12288, 256),
            (144, 1024, 4096),
            (33, 256, 4752),
        ] {
            checks.linear::<Cuda>(&device, "linear_tiled", shape, tiled);
        }
        // Shapes `choose` does not pick: one feature tile at 65 rows, chunks of 32 and 64 k, 2–4
        // stages, cubes partly past `n_out`, ragged rows, as many chunks per slice as stages.
        for (rows, k, n, f_tiles, steps, k_splits, stages) in [
            (65usize, 4096, 1024, 1, 1, 4, 2),
            (17, 256, 96, 2, 2, 2, 2),
            (65, 4096, 1024, 1, 2, 4, 4),
            (17, 256, 96, 2, 1, 2, 2),
            (129, 512, 256, 1, 2, 1, 4),
            (16, 4096, 6144, 1, 4, 8, 4),
            (33, 1536, 4768, 2, 2, 2, 3),
        ] {
            let shape = MmaShape {
                t_tiles: rows.div_ceil(8),
                f_tiles,
                k_splits,
                steps,
                stages,
            };
            checks.linear::<Cuda>(
                &device,
                &format!("linear_tiled {shape:?}"),
                (rows, k, n),
                with(shape),
            );
        }
        // The SwiGLU epilogue bit for bit against the launches it replaces: the projection with
        // the same launch shape (so the same k-slices add the same products in the same order),
        // then the activation on its halves — with one k-slice and with several.
        for (rows, k, inter, k_splits) in [
            (16, 4096, 12288, None),
            (65, 4096, 12288, None),
            (65, 4096, 12288, Some(4)),
            (33, 4096, 512, None),
        ] {
            let x = Tensor::<Cuda, 2>::random([rows, k], Distribution::Normal(0.0, 1.0), &device);
            let w = Tensor::<Cuda, 2>::random([2 * inter, k], Distribution::Normal(0.0, 0.05), &device);
            let chosen = gate_up_mma_shape(&x, &w).expect("the SwiGLU shape tiles");
            let shape = MmaShape {
                k_splits: k_splits.unwrap_or(chosen.k_splits),
                ..chosen
            };
            let fused = gate_up_silu_tiled_with(x.clone(), w.clone(), shape).ok();
            let both = linear_tiled_with(x, w, shape).ok();
            let exact = swiglu_exact(fused, both, rows, inter);
            checks.failures += usize::from(!exact);
            println!(
                "{}",
                json!({ "check": format!("gate_up_silu {rows}x{k} · {}x{k}ᵀ {shape:?}: fused = separate launches",
                                         2 * inter),
                        "exact": exact, "ok": exact })
            );
        }
        if warpgroup_mma {
            // Rows padded to 16–256 for the MMA (9 rows are 16, 200 are 200, 256 the most), one
            // to eight k-slices (the 4096 × 4096 weight takes four, the 4096 × 12288 one three,
            // the 64 × 128 one two, the 640 × 512 one eight).
            for shape in [
                (9, 64, 128),
                (16, 4096, 6144),
                (17, 4096, 512),
                (65, 4096, 4096),
                (65, 12288, 4096),
                (129, 4096, 12288),
                (200, 512, 640),
                (256, 128, 64),
            ] {
                checks.linear::<Cuda>(&device, "linear_wgmma", shape, |x, w| {
                    linear_wgmma(x, w, false).unwrap_or_else(|(x, _)| Tensor::zeros([1, 1], &x.device()))
                });
            }
            // Its SwiGLU epilogue bit for bit against the unfused product's halves: one k-slice
            // (16 and 65 rows), eight (33 rows of a 1024 × 4096 weight).
            for (rows, k, inter) in [(16, 4096, 12288), (65, 4096, 12288), (33, 4096, 512)] {
                let x = Tensor::<Cuda, 2>::random([rows, k], Distribution::Normal(0.0, 1.0), &device);
                let w = Tensor::<Cuda, 2>::random([2 * inter, k], Distribution::Normal(0.0, 0.05), &device);
                let fused = linear_wgmma(x.clone(), w.clone(), true).ok();
                let both = linear_wgmma(x, w, false).ok();
                checks.exact(
                    &format!(
                        "linear_wgmma SwiGLU {rows}x{k} · {}x{k}ᵀ: fused = separate",
                        2 * inter
                    ),
                    swiglu_exact(fused, both, rows, inter),
                );
            }
        }
        if measure {
            let name = if warpgroup_mma {
                "linear_wgmma"
            } else {
                "linear_tiled"
            };
            bandwidth::<Cuda>(&device, name, &[16, 65, 129], tiled)?;
        }
        Ok(())
    }

    /// The weight shapes of Qwen3-8B's and Qwen3.6-27B's layers (and their drafters', which
    /// share them) that `--layers` can name: name, output features, input features, whether the
    /// output is the fused gate/up that SwiGLU halves.
    pub const LAYER_SHAPES: [(&str, usize, usize, bool); 9] = [
        ("qwen3-8b.qkv", 6144, 4096, false),
        ("qwen3-8b.o_proj", 4096, 4096, false),
        ("qwen3-8b.gate_up", 24576, 4096, true),
        ("qwen3-8b.down", 4096, 12288, false),
        ("qwen3.6-27b.in_proj", 16480, 5120, false),
        ("qwen3.6-27b.attention_qkv", 14336, 5120, false),
        ("qwen3.6-27b.o_proj", 5120, 6144, false),
        ("qwen3.6-27b.gate_up", 34816, 5120, true),
        ("qwen3.6-27b.down", 5120, 17408, false),
    ];

    /// Launch shapes around the picked one for `--sweep-tiles`: 1–3 feature tiles per plane (2,
    /// a plane's gate and up rows, with SwiGLU), chunks of 64 or 128 k, 2–4 stages, 1–8 k-slices.
    pub fn tile_shapes(chosen: MmaShape, swiglu: bool) -> Vec<MmaShape> {
        let f_tiles: &[usize] = if swiglu { &[2] } else { &[1, 2, 3] };
        let mut shapes = Vec::new();
        for &f_tiles in f_tiles {
            for steps in [2, 4] {
                for stages in [2, 3, 4] {
                    for k_splits in [1, 2, 4, 8] {
                        shapes.push(MmaShape {
                            f_tiles,
                            k_splits,
                            steps,
                            stages,
                            ..chosen
                        });
                    }
                }
            }
        }
        shapes
    }

    /// Launch shapes around the picked one for `--sweep-splits`: every number of k-slices.
    pub fn split_shapes(chosen: MmaShape, _swiglu: bool) -> Vec<MmaShape> {
        (1..=MmaShape::MAX_K_SPLITS)
            .map(|k_splits| MmaShape { k_splits, ..chosen })
            .collect()
    }

    /// The tensor-core linear at `row_counts` on each of the `layers` ([`LAYER_SHAPES`]): the
    /// shape the decode path picks (marked) and the shapes `around` it that tile, from half a
    /// cube per core to eight waves, within the device's shared memory and up to twice the
    /// accumulators `choose` allows (those may spill) — each checked against burn's matmul (with
    /// SwiGLU, the unfused product) and timed like `bandwidth`, with the grid's waves beside.
    pub fn sweep(
        checks: &mut Checks,
        sweep: &str,
        row_counts: &[usize],
        layers: &[String],
        around: fn(MmaShape, bool) -> Vec<MmaShape>,
    ) -> Result<(), Error> {
        let device = Default::default();
        for (name, n, k, swiglu) in LAYER_SHAPES {
            if !layers.iter().any(|layer| layer == name) {
                continue;
            }
            let weights = weight_copies::<Cuda>(&device, n, k);
            let cores = multiprocessors_of(&weights[0]);
            for &rows in row_counts {
                let x = Tensor::<Cuda, 2>::random([rows, k], Distribution::Normal(0.0, 1.0), &device);
                let (want, chosen) = if swiglu {
                    let want = ddtree_kernels::gate_up_silu_unfused(x.clone(), weights[0].clone());
                    (host_f32(want), gate_up_mma_shape(&x, &weights[0]))
                } else {
                    let want = x.clone().matmul(weights[0].clone().transpose());
                    (host_f32(want), mma_shape(&x, &weights[0]))
                };
                let Some(chosen) = chosen else {
                    continue;
                };
                // `None` where the kernel declines the shape.
                let product = move |x, w, shape| {
                    if swiglu {
                        gate_up_silu_tiled_with(x, w, shape).ok()
                    } else {
                        linear_tiled_with(x, w, shape).ok()
                    }
                };
                let others = around(chosen, swiglu).into_iter().filter(|s| *s != chosen);
                for shape in std::iter::once(chosen).chain(others) {
                    let cubes = shape.columns(n) * shape.k_splits;
                    let fits_registers = shape.t_tiles * shape.f_tiles <= 2 * MmaShape::MAX_ACCUMULATOR_TILES;
                    if !shape.fits(rows, n, k) || !fits_registers || 2 * cubes < cores || cubes > 8 * cores {
                        continue;
                    }
                    // Shapes past the device's shared memory are declined.
                    let Some(got) = product(x.clone(), weights[0].clone(), shape) else {
                        continue;
                    };
                    checks.compare(
                        &format!("{name} {rows}x{k} · {n}x{k}ᵀ {shape:?}"),
                        &host_f32(got),
                        &want,
                    );
                    let run = move |x, w| product(x, w, shape).expect("the shape ran once");
                    let per_launch_s = seconds_per_launch(&device, &x, &weights, run)?;
                    let gbs = (n * k * 2) as f64 / per_launch_s / 1e9;
                    println!(
                        "{}",
                        json!({ "sweep": sweep, "layer": name, "rows": rows, "shape": format!("{shape:?}"),
                                "cubes": cubes, "waves": cubes as f64 / cores as f64,
                                "chosen": shape == chosen, "us": per_launch_s * 1e6,
                                "of_4300": gbs / 4300.0 })
                    );
                }
            }
        }
        Ok(())
    }

    /// The attention of an AR step (1 row, causal), a drafter block (16 rows, full) and a verify
    /// at B = 64 (65 tree rows) after 2048 cached keys at Qwen3-8B's heads, with the keys cut
    /// into the default number of slices and into 1–33: each checked against the reference, then
    /// timed per launch (with its split combine) over key/value copies the L2 cannot hold.
    pub fn sweep_attention(checks: &mut Checks) -> Result<(), Error> {
        let device = Default::default();
        let (q_heads, kv_heads, head_dim, prefix) = (32, 8, 128, 2048);
        let scale = 1.0 / (head_dim as f64).sqrt();
        for (rows, mode) in [(1, "causal"), (16, "full"), (65, "tree")] {
            let RandomTree {
                words, words_per_row, ..
            } = RandomTree::new(rows - 1, 1, 12);
            let visibility = visibility(mode, &words, words_per_row)?;
            let ctx = AttentionContext {
                prefix_len: prefix,
                visibility,
                window: None,
            };
            let (q, q_ref) = on_device::<Cuda, 3>(
                random(8, rows * q_heads * head_dim, 2.0),
                [rows, q_heads, head_dim],
                &device,
            );
            let kv_shape = [kv_heads, prefix + rows, head_dim];
            let copies: Vec<_> = (0..8)
                .map(|_| {
                    let kv = || Tensor::<Cuda, 3>::random(kv_shape, Distribution::Normal(0.0, 1.0), &device);
                    (kv(), kv())
                })
                .collect();
            let held = |t: &Tensor<Cuda, 3>| {
                Tensor::<Cpu, 3>::from_data(
                    TensorData::new(host_f32(t.clone()), kv_shape),
                    &Default::default(),
                )
            };
            let (k0, v0) = &copies[0];
            let want = host_f32(Cpu::cached_attention(q_ref, held(k0), held(v0), &ctx, scale));
            for splits in [
                None,
                Some(1),
                Some(2),
                Some(3),
                Some(4),
                Some(6),
                Some(8),
                Some(11),
                Some(17),
                Some(33),
            ] {
                let attend = |(k, v): &(Tensor<Cuda, 3>, Tensor<Cuda, 3>)| {
                    cached_attention_with(q.clone(), k.clone(), v.clone(), &ctx, scale, splits)
                };
                let name = format!("attention {rows} rows ({mode}) after {prefix}, splits {splits:?}");
                checks.compare(&name, &host_f32(attend(&copies[0])), &want);
                let launches = 4 * copies.len();
                let s = repeat(1, 7, || -> Result<(), Error> {
                    for i in 0..launches {
                        attend(&copies[i % copies.len()]);
                    }
                    <Cuda as burn_tensor::backend::Backend>::sync(&device)?;
                    Ok(())
                })?;
                println!(
                    "{}",
                    json!({ "sweep_attention": format!("{rows} rows ({mode}) after {prefix}"),
                            "splits": splits, "us": s.median_ms * 1e3 / launches as f64 })
                );
            }
        }
        Ok(())
    }
}

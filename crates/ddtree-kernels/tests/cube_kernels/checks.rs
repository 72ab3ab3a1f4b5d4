// The kernel checks, included by `cube_kernels_f32.rs` and `cube_kernels_f16.rs` with their
// `Gpu` backend, `TOL` and `NAME`. (Each float type gets its own test binary: burn 0.21 fixes a
// device's float dtype at its first use, so in a process that used the wgpu device in f32 first,
// "f16" tensors are silently f32 and the f16 kernels read them wrongly.)

use burn_ndarray::NdArray;
use burn_tensor::{FloatDType, Int, Tensor, TensorData};
use burn_wgpu::WgpuDevice;
use ddtree_kernels::nn::QkvRows;
use ddtree_kernels::{KernelOps, LayerCaches, host_f32, host_ids, reference};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

type Cpu = NdArray<f32>;

fn values(seed: u64, len: usize, scale: f32) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.random_range(-scale..scale)).collect()
}

/// Multiples of 1/8 in [−32, 32): exact in every float type tested, so copies and ties compare
/// exactly.
fn exact(seed: u64, len: usize) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.random_range(-256i32..256) as f32 / 8.0).collect()
}

fn tensor<B: KernelOps, const D: usize>(data: &[f32], shape: [usize; D], device: &B::Device) -> Tensor<B, D> {
    Tensor::from_data(TensorData::new(data.to_vec(), shape), device)
}

/// Largest |a − b| relative to the largest |b| (outputs near zero make per-element ratios
/// meaningless).
fn max_rel_err(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    got.iter().zip(want).fold(0f32, |m, (g, w)| m.max((g - w).abs())) / scale
}

fn gpu() -> WgpuDevice {
    WgpuDevice::default()
}

/// `linear` for every supported row count, ragged feature counts (no vector width divides 13),
/// output counts that do not fill the last cube, and a long reduction with a ragged tail.
#[test]
fn linear_matches_reference() {
    let device = gpu();
    for (rows, k, n) in [
        (1, 64, 40),
        (1, 13, 7),
        (3, 128, 33),
        (8, 96, 65),
        (5, 4100, 9),
        (1, 2056, 20),
        (12, 32, 16),
    ] {
        let x = values(1 + rows as u64, rows * k, 1.0);
        let w = values(2 + k as u64, n * k, 0.5);
        let want = host_f32(Cpu::linear(
            tensor(&x, [rows, k], &Default::default()),
            tensor(&w, [n, k], &Default::default()),
        ));
        let got = host_f32(Gpu::linear(
            tensor(&x, [rows, k], &device),
            tensor(&w, [n, k], &device),
        ));
        let err = max_rel_err(&got, &want);
        assert!(err < TOL, "{NAME} linear rows={rows} k={k} n={n}: error {err}");
    }
}

/// The GEMV with 1–8 planes per feature, plain and with the SwiGLU of a fused gate/up weight,
/// at reductions whose tails leave some lanes without a full stride: each against the reference.
#[test]
fn linear_rows_k_planes_match_reference() {
    use ddtree_kernels::cube::linear_rows_with;
    let device = gpu();
    for (rows, k, n) in [(1, 2056, 20), (3, 4100, 9), (2, 640, 33)] {
        let x = values(3 + rows as u64, rows * k, 1.0);
        let w = values(4 + k as u64, 2 * n * k, 0.5);
        for swiglu in [false, true] {
            let n_w = if swiglu { 2 * n } else { n };
            let cpu_x = tensor::<Cpu, 2>(&x, [rows, k], &Default::default());
            let cpu_w = tensor::<Cpu, 2>(&w[..n_w * k], [n_w, k], &Default::default());
            let want = host_f32(if swiglu {
                Cpu::gate_up_silu(cpu_x, cpu_w)
            } else {
                Cpu::linear(cpu_x, cpu_w)
            });
            for k_planes in [1, 2, 4, 8] {
                let got = host_f32(linear_rows_with(
                    tensor::<Gpu, 2>(&x, [rows, k], &device),
                    tensor::<Gpu, 2>(&w[..n_w * k], [n_w, k], &device),
                    swiglu,
                    k_planes,
                ));
                let err = max_rel_err(&got, &want);
                assert!(
                    err < TOL,
                    "{NAME} linear_rows rows={rows} k={k} n={n} swiglu={swiglu} k_planes={k_planes}: error {err}"
                );
            }
        }
    }
}

/// A row slice of a larger tensor starts at an offset: the kernel must read from it.
#[test]
fn linear_reads_sliced_rows() {
    let device = gpu();
    let (k, n) = (32, 8);
    let x = values(7, 3 * k, 1.0);
    let w = values(8, n * k, 1.0);
    let cpu_x = tensor::<Cpu, 2>(&x, [3, k], &Default::default()).slice([1..2, 0..k]);
    let want = host_f32(Cpu::linear(cpu_x, tensor(&w, [n, k], &Default::default())));
    let gpu_x = tensor::<Gpu, 2>(&x, [3, k], &device).slice([1..2, 0..k]);
    let got = host_f32(Gpu::linear(gpu_x, tensor(&w, [n, k], &device)));
    assert!(max_rel_err(&got, &want) < TOL, "{got:?} vs {want:?}");
}

#[test]
fn rms_norm_matches_reference() {
    let device = gpu();
    for (rows, hidden) in [(1, 64), (5, 40), (9, 13), (2, 4096)] {
        let x = values(rows as u64, rows * hidden, 3.0);
        let w = values(hidden as u64, hidden, 1.0);
        let cpu = Default::default();
        let want = host_f32(Cpu::rms_norm(
            tensor(&x, [rows, hidden], &cpu),
            tensor(&w, [hidden], &cpu),
            1e-6,
        ));
        let got = host_f32(Gpu::rms_norm(
            tensor(&x, [rows, hidden], &device),
            tensor(&w, [hidden], &device),
            1e-6,
        ));
        let err = max_rel_err(&got, &want);
        assert!(
            err < TOL,
            "{NAME} rms_norm rows={rows} hidden={hidden}: error {err}"
        );
    }
}

#[test]
fn add_rms_norm_matches_reference() {
    let device = gpu();
    for (rows, hidden) in [(1, 64), (5, 40), (9, 13), (2, 4096)] {
        let x = values(rows as u64, rows * hidden, 3.0);
        let d = values(rows as u64 + 100, rows * hidden, 2.0);
        let w = values(hidden as u64, hidden, 1.0);
        let cpu = Default::default();
        let (want_sum, want) = Cpu::add_rms_norm(
            tensor(&x, [rows, hidden], &cpu),
            tensor(&d, [rows, hidden], &cpu),
            tensor(&w, [hidden], &cpu),
            1e-6,
        );
        let (sum, got) = Gpu::add_rms_norm(
            tensor(&x, [rows, hidden], &device),
            tensor(&d, [rows, hidden], &device),
            tensor(&w, [hidden], &device),
            1e-6,
        );
        for (what, got, want) in [("sum", sum, want_sum), ("norm", got, want)] {
            let err = max_rel_err(&host_f32(got), &host_f32(want));
            assert!(
                err < TOL,
                "{NAME} add_rms_norm {what} rows={rows} hidden={hidden}: error {err}"
            );
        }
    }
}

/// The k-sliced tensor-core linear's partial sums added straight into the norm: equal to adding
/// their sum (rounded to the float type, as the split-sum launch stores it) with the separate
/// op. The partials are multiples of 1/8, exact in every float type, so their sums are too.
#[test]
fn add_partials_rms_norm_matches_reference() {
    let device = gpu();
    for (splits, rows, hidden) in [(2, 1, 64), (8, 5, 40), (3, 9, 13), (4, 2, 4096)] {
        let x = values(rows as u64, rows * hidden, 3.0);
        let partial = exact(splits as u64, splits * rows * hidden);
        let w = values(hidden as u64, hidden, 1.0);
        let delta: Vec<f32> = (0..rows * hidden)
            .map(|i| (0..splits).map(|s| partial[s * rows * hidden + i]).sum())
            .collect();
        let (want_sum, want) = Gpu::add_rms_norm(
            tensor(&x, [rows, hidden], &device),
            tensor(&delta, [rows, hidden], &device),
            tensor(&w, [hidden], &device),
            1e-6,
        );
        let partial = tensor::<Gpu, 1>(&partial, [splits * rows * hidden], &device).cast(FloatDType::F32);
        let (sum, got) = ddtree_kernels::cube::add_partials_rms_norm(
            tensor(&x, [rows, hidden], &device),
            partial,
            splits,
            tensor(&w, [hidden], &device),
            1e-6,
        );
        for (what, got, want) in [("sum", sum, want_sum), ("norm", got, want)] {
            assert_eq!(
                host_f32(got),
                host_f32(want),
                "{NAME} add_partials_rms_norm {what} splits={splits} rows={rows} hidden={hidden}"
            );
        }
    }
}

/// The output projection fused with the residual add and norm, for GEMV rows and tiled rows
/// (burn's matmul where the device has no tensor cores).
#[test]
fn linear_add_rms_norm_matches_reference() {
    let device = gpu();
    for (rows, k, n) in [(1, 64, 40), (8, 96, 64), (12, 32, 16)] {
        let x = values(30 + rows as u64, rows * k, 1.0);
        let w = values(31, n * k, 0.5);
        let r = values(32, rows * n, 3.0);
        let g = values(33, n, 1.0);
        let cpu = Default::default();
        let (want_sum, want) = Cpu::linear_add_rms_norm(
            tensor(&x, [rows, k], &cpu),
            tensor(&w, [n, k], &cpu),
            tensor(&r, [rows, n], &cpu),
            tensor(&g, [n], &cpu),
            1e-6,
        );
        let (sum, got) = Gpu::linear_add_rms_norm(
            tensor(&x, [rows, k], &device),
            tensor(&w, [n, k], &device),
            tensor(&r, [rows, n], &device),
            tensor(&g, [n], &device),
            1e-6,
        );
        for (what, got, want) in [("sum", sum, want_sum), ("norm", got, want)] {
            let err = max_rel_err(&host_f32(got), &host_f32(want));
            assert!(
                err < TOL,
                "{NAME} linear_add_rms_norm {what} rows={rows} k={k} n={n}: error {err}"
            );
        }
    }
}

/// A float and an int tensor read back in one round trip: the values and ids of separate reads,
/// for the top-K's outputs and for transposed (strided) views of them.
#[test]
fn host_values_and_ids_reads_both() {
    let device = gpu();
    let (rows, cols, k) = (3, 1000, 16);
    let logits = tensor::<Gpu, 2>(&values(70, rows * cols, 4.0), [rows, cols], &device);
    let (v, ids) = Gpu::top_k_log_softmax(logits, k);
    for (v, ids) in [(v.clone(), ids.clone()), (v.transpose(), ids.transpose())] {
        let (got_v, got_ids) = Gpu::host_values_and_ids(v.clone(), ids.clone());
        assert_eq!(got_v, host_f32(v), "{NAME}: values");
        assert_eq!(got_ids, host_ids(ids), "{NAME}: ids");
    }
}

#[test]
fn silu_mul_matches_reference() {
    let device = gpu();
    for (rows, cols) in [(1, 96), (3, 7), (4, 1000)] {
        let g = values(3, rows * cols, 6.0);
        let u = values(4, rows * cols, 2.0);
        let cpu = Default::default();
        let want = host_f32(Cpu::silu_mul(
            tensor(&g, [rows, cols], &cpu),
            tensor(&u, [rows, cols], &cpu),
        ));
        let got = host_f32(Gpu::silu_mul(
            tensor(&g, [rows, cols], &device),
            tensor(&u, [rows, cols], &device),
        ));
        let err = max_rel_err(&got, &want);
        assert!(err < TOL, "{NAME} silu_mul {rows}x{cols}: error {err}");
    }
}

/// The fused gate/up projection with its activation: the GEMV's SwiGLU variant for up to 8 rows,
/// the unfused path beyond.
#[test]
fn gate_up_silu_matches_reference() {
    let device = gpu();
    for (rows, k, inter) in [(1, 64, 40), (3, 128, 33), (8, 96, 7), (12, 32, 16)] {
        let x = values(5 + rows as u64, rows * k, 1.0);
        let w = values(6 + k as u64, 2 * inter * k, 0.5);
        let cpu = Default::default();
        let want = host_f32(Cpu::gate_up_silu(
            tensor(&x, [rows, k], &cpu),
            tensor(&w, [2 * inter, k], &cpu),
        ));
        let got = host_f32(Gpu::gate_up_silu(
            tensor(&x, [rows, k], &device),
            tensor(&w, [2 * inter, k], &device),
        ));
        let err = max_rel_err(&got, &want);
        assert!(err < TOL, "{NAME} gate_up_silu rows={rows} k={k} inter={inter}: error {err}");
    }
}

/// Argmax, including ties (the first index wins) and a maximum in the last column.
#[test]
fn argmax_matches_reference() {
    let device = gpu();
    let (rows, cols) = (6, 1003);
    let mut logits = exact(11, rows * cols);
    logits[cols - 1] = 40.0; // row 0: last column
    logits[cols + 5] = 35.0; // row 1: a tie between columns 5 and 900
    logits[cols + 900] = 35.0;
    for v in &mut logits[2 * cols..3 * cols] {
        *v = -1.0; // row 2: all equal, so column 0
    }
    let want = host_ids(Cpu::argmax(tensor(&logits, [rows, cols], &Default::default())));
    assert_eq!(
        &want[..3],
        &[cols as u32 - 1, 5, 0],
        "the reference's own tie rule"
    );
    let got: Vec<u32> = host_ids::<Gpu, 1>(Gpu::argmax(tensor(&logits, [rows, cols], &device)));
    assert_eq!(got, want);
    let _: Tensor<Gpu, 1, Int> = Gpu::argmax(tensor(&logits, [rows, cols], &device));
}

/// Random ancestor sets over 70 block rows (two 64-bit words per row): each row sees a random
/// earlier row's set plus itself, as a compiled tree.
fn tree_words(rows: usize, seed: u64) -> (Vec<u64>, usize) {
    let words_per_row = rows.div_ceil(64);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut words = vec![0u64; rows * words_per_row];
    for i in 0..rows {
        if i > 0 {
            let parent = rng.random_range(0..i);
            for w in 0..words_per_row {
                words[i * words_per_row + w] = words[parent * words_per_row + w];
            }
        }
        words[i * words_per_row + i / 64] |= 1 << (i % 64);
    }
    (words, words_per_row)
}

/// The reference attention on the CPU of `[q, k, v]` laid out as `[rows, q_heads, head_dim]` and
/// `[kv_heads, capacity, head_dim]`.
fn reference_attention(
    [q, k, v]: [&[f32]; 3],
    [rows, q_heads, kv_heads, head_dim, capacity]: [usize; 5],
    ctx: &ddtree_kernels::AttentionContext<'_>,
    scale: f64,
) -> Vec<f32> {
    let cpu = Default::default();
    host_f32(Cpu::cached_attention(
        tensor(q, [rows, q_heads, head_dim], &cpu),
        tensor(k, [kv_heads, capacity, head_dim], &cpu),
        tensor(v, [kv_heads, capacity, head_dim], &cpu),
        ctx,
        scale,
    ))
}

/// Cached attention for every visibility, a sliding window, grouped-query heads, head sizes that
/// do not fill a plane evenly, and prefixes long enough to split the keys across cubes.
#[test]
fn cached_attention_matches_reference() {
    use ddtree_kernels::{AncestorBits, AttentionContext, Visibility};
    let device = gpu();
    let (words, words_per_row) = tree_words(70, 5);
    let bits = AncestorBits::new(&words, words_per_row).unwrap();
    /// (rows, prefix, q_heads, kv_heads, head_dim)
    type Shape = (usize, usize, usize, usize, usize);
    let cases: Vec<(Shape, Visibility, Option<usize>)> = vec![
        ((1, 37, 4, 2, 32), Visibility::Causal, None),
        ((5, 20, 4, 1, 16), Visibility::Causal, None),
        ((15, 30, 2, 2, 40), Visibility::Full, None),
        ((15, 30, 4, 2, 32), Visibility::Full, Some(8)),
        ((70, 11, 4, 2, 32), Visibility::Tree(bits), None),
        ((3, 0, 2, 1, 8), Visibility::Causal, None),
        // Long prefixes: the keys are split across cubes and the splits combined; the window
        // leaves whole splits without a visible key.
        ((1, 700, 8, 2, 32), Visibility::Causal, None),
        ((20, 300, 8, 2, 32), Visibility::Causal, None),
        ((70, 200, 4, 2, 32), Visibility::Tree(bits), None),
        ((15, 300, 4, 2, 40), Visibility::Full, Some(40)),
    ];
    for ((rows, prefix, q_heads, kv_heads, head_dim), visibility, window) in cases {
        let capacity = prefix + rows + 3;
        let ctx = AttentionContext {
            prefix_len: prefix,
            visibility,
            window,
        };
        let q = values(21, rows * q_heads * head_dim, 1.0);
        let k = values(22, kv_heads * capacity * head_dim, 1.0);
        let v = values(23, kv_heads * capacity * head_dim, 1.0);
        let scale = 1.0 / (head_dim as f64).sqrt();
        let want = reference_attention([&q, &k, &v], [rows, q_heads, kv_heads, head_dim, capacity], &ctx, scale);
        let got = host_f32(Gpu::cached_attention(
            tensor(&q, [rows, q_heads, head_dim], &device),
            tensor(&k, [kv_heads, capacity, head_dim], &device),
            tensor(&v, [kv_heads, capacity, head_dim], &device),
            &ctx,
            scale,
        ));
        let err = max_rel_err(&got, &want);
        let case = format!(
            "rows={rows} prefix={prefix} heads={q_heads}/{kv_heads}x{head_dim} {visibility:?} window={window:?}"
        );
        assert!(err < TOL, "{NAME} attention {case}: error {err}");
    }
}

/// Keys cut into more splits than the merge loads at once (`attention::MERGE_AHEAD`), so that
/// later groups of splits raise the running maximum and rescale the earlier ones.
#[test]
fn attention_merges_many_splits() {
    use ddtree_kernels::{AttentionContext, Visibility};
    let device = gpu();
    for (rows, prefix, splits) in [(1, 700, 30), (3, 500, 13), (20, 900, 25)] {
        let (q_heads, kv_heads, head_dim) = (8, 2, 32);
        let capacity = prefix + rows;
        let ctx = AttentionContext {
            prefix_len: prefix,
            visibility: Visibility::Causal,
            window: None,
        };
        // Keys whose scale grows along the cache: the splits' maxima rise from group to group.
        let q = values(31, rows * q_heads * head_dim, 1.0);
        let k: Vec<f32> = values(32, kv_heads * capacity * head_dim, 1.0)
            .iter()
            .enumerate()
            .map(|(i, x)| x * (1.0 + 3.0 * ((i / head_dim) % capacity) as f32 / capacity as f32))
            .collect();
        let v = values(33, kv_heads * capacity * head_dim, 1.0);
        let scale = 1.0 / (head_dim as f64).sqrt();
        let want = reference_attention([&q, &k, &v], [rows, q_heads, kv_heads, head_dim, capacity], &ctx, scale);
        let got = host_f32(ddtree_kernels::cube::cached_attention_with(
            tensor::<Gpu, 3>(&q, [rows, q_heads, head_dim], &device),
            tensor(&k, [kv_heads, capacity, head_dim], &device),
            tensor(&v, [kv_heads, capacity, head_dim], &device),
            &ctx,
            scale,
            Some(splits),
        ));
        let err = max_rel_err(&got, &want);
        assert!(err < TOL, "{NAME} attention {rows} rows after {prefix} in {splits} splits: error {err}");
    }
}

/// The fused gate/up projection's two halves are row views of one buffer: read in place.
#[test]
fn silu_mul_reads_row_views() {
    let device = gpu();
    for (rows, cols) in [(1, 96), (3, 10), (4, 1000)] {
        let gate_up = values(9, rows * 2 * cols, 6.0);
        let cpu = Default::default();
        let cpu_gu = tensor::<Cpu, 2>(&gate_up, [rows, 2 * cols], &cpu);
        let want = host_f32(Cpu::silu_mul(
            cpu_gu.clone().slice([0..rows, 0..cols]),
            cpu_gu.slice([0..rows, cols..2 * cols]),
        ));
        let gpu_gu = tensor::<Gpu, 2>(&gate_up, [rows, 2 * cols], &device);
        let got = host_f32(Gpu::silu_mul(
            gpu_gu.clone().slice([0..rows, 0..cols]),
            gpu_gu.slice([0..rows, cols..2 * cols]),
        ));
        let err = max_rel_err(&got, &want);
        assert!(err < TOL, "silu_mul views {rows}x{cols}: error {err}");
    }
}

/// Full and partial rotary dims.
#[test]
fn rope_matches_reference() {
    let device = gpu();
    for (rows, heads, head_dim, half) in [(1, 4, 32, 16), (7, 3, 64, 32), (2, 2, 64, 16)] {
        let x = values(31, rows * heads * head_dim, 2.0);
        let cos = values(32, rows * half, 1.0);
        let sin = values(33, rows * half, 1.0);
        let cpu = Default::default();
        let want = host_f32(Cpu::rope(
            tensor(&x, [rows, heads, head_dim], &cpu),
            tensor(&cos, [rows, half], &cpu),
            tensor(&sin, [rows, half], &cpu),
        ));
        let got = host_f32(Gpu::rope(
            tensor(&x, [rows, heads, head_dim], &device),
            tensor(&cos, [rows, half], &device),
            tensor(&sin, [rows, half], &device),
        ));
        let err = max_rel_err(&got, &want);
        assert!(
            err < TOL,
            "rope {rows}x{heads}x{head_dim} half {half}: error {err}"
        );
    }
}

/// New rows land at `at` in every head; the rest of the cache is untouched, also when the cache
/// is shared (then the write must not alter the other owner's copy).
#[test]
fn write_cache_rows_matches_reference() {
    let device = gpu();
    let (kv_heads, capacity, head_dim, n, at) = (3, 20, 16, 4, 9);
    let cache = exact(41, kv_heads * capacity * head_dim);
    let rows = exact(42, n * kv_heads * head_dim);
    let cpu = Default::default();
    let want = host_f32(Cpu::write_cache_rows(
        tensor(&cache, [kv_heads, capacity, head_dim], &cpu),
        tensor(&rows, [n, kv_heads, head_dim], &cpu),
        at,
    ));
    let gpu_cache = tensor::<Gpu, 3>(&cache, [kv_heads, capacity, head_dim], &device);
    let got = host_f32(Gpu::write_cache_rows(
        gpu_cache,
        tensor(&rows, [n, kv_heads, head_dim], &device),
        at,
    ));
    assert_eq!(got, want, "in place");
    let shared = tensor::<Gpu, 3>(&cache, [kv_heads, capacity, head_dim], &device);
    let got = host_f32(Gpu::write_cache_rows(
        shared.clone(),
        tensor(&rows, [n, kv_heads, head_dim], &device),
        at,
    ));
    assert_eq!(got, want, "shared cache");
    assert_eq!(host_f32(shared), cache, "the other owner's cache changed");
}

/// Kept rows move down to `at + i` in every head of every layer's key and value cache, in place:
/// a shift by one row (every target is the next row's source), gaps that span the kernel's chunks
/// of rows, one row, the identity; five layers of their own values (more than one launch takes
/// where the device has few bindings); also when one layer's cache is shared (every layer falls
/// back to copies, and the other owner's copy stays as it was).
#[test]
fn compact_kv_rows_matches_reference() {
    let device = gpu();
    let (layers, kv_heads, capacity, head_dim, at) = (5, 3, 48, 16, 5);
    let shape = [kv_heads, capacity, head_dim];
    let len = kv_heads * capacity * head_dim;
    let caches: Vec<[Vec<f32>; 2]> = (0..layers as u64).map(|l| [exact(43 + 2 * l, len), exact(44 + 2 * l, len)]).collect();
    let cpu = Default::default();
    let shift: Vec<usize> = (1..21).collect();
    let gaps: Vec<usize> = (0..19).map(|i| i * 2 - i / 3).collect();
    let on_gpu = || -> Vec<_> {
        caches.iter().map(|[k, v]| (tensor::<Gpu, 3>(k, shape, &device), tensor::<Gpu, 3>(v, shape, &device))).collect()
    };
    let hosted = |compacted: Vec<LayerCaches<Gpu>>| -> Vec<[Vec<f32>; 2]> {
        compacted.into_iter().map(|(k, v)| [host_f32(k), host_f32(v)]).collect()
    };
    for keep in [shift, gaps, vec![3], (0..6).collect()] {
        let want: Vec<[Vec<f32>; 2]> = caches
            .iter()
            .map(|layer| layer.each_ref().map(|cache| host_f32(reference::compact_cache_rows(tensor::<Cpu, 3>(cache, shape, &cpu), at, &keep))))
            .collect();
        let got = hosted(Gpu::compact_kv_rows(on_gpu(), at, &keep));
        assert_eq!(got, want, "{NAME} keep {keep:?}: in place");
        let layers_caches = on_gpu();
        let shared = layers_caches[2].1.clone();
        let got = hosted(Gpu::compact_kv_rows(layers_caches, at, &keep));
        assert_eq!(got, want, "{NAME} keep {keep:?}: a shared cache");
        assert_eq!(host_f32(shared), caches[2][1], "{NAME} keep {keep:?}: the other owner's cache changed");
    }
}

/// One attention step's inputs for `qk_norm_rope_write`, as host values.
struct QkvCase {
    n: usize,
    context_rows: usize,
    shape: ddtree_kernels::nn::HeadShape,
    half: usize,
    gated: bool,
    capacity: usize,
    at: usize,
    seed: u64,
}

impl QkvCase {
    fn k_at(&self) -> usize {
        let q_width = self.shape.heads * self.shape.head_dim;
        if self.gated { 2 * q_width } else { q_width }
    }

    fn width(&self) -> usize {
        self.k_at() + 2 * self.shape.kv_heads * self.shape.head_dim
    }

    /// The fused projection's values.
    fn qkv(&self) -> Vec<f32> {
        values(self.seed, self.n * self.width(), 3.0)
    }

    /// The queries, keys cache and values cache after `step` (the rotation and cache write of
    /// the projection it holds) on backend `B`; with `shared_caches` another handle holds the
    /// caches (the copying path).
    fn run<B: KernelOps>(
        &self,
        device: &B::Device,
        shared_caches: bool,
        step: impl FnOnce(QkvRows<B>, Tensor<B, 3>, Tensor<B, 3>) -> (Tensor<B, 3>, Tensor<B, 3>, Tensor<B, 3>),
    ) -> [Vec<f32>; 3] {
        use ddtree_kernels::nn::RmsNorm;
        let (n, d, s) = (self.n, self.shape.head_dim, self.seed);
        let cache = [self.shape.kv_heads, self.capacity, d];
        let cache_len = cache.iter().product();
        let norm = |seed, eps| RmsNorm::new(tensor(&values(seed, d, 1.5), [d], device), eps);
        let rows = QkvRows {
            shape: self.shape,
            k_at: self.k_at(),
            context_rows: self.context_rows,
            q_norm: norm(s + 1, 1e-6),
            k_norm: norm(s + 2, 1e-5),
            cos: tensor(&values(s + 3, n * self.half, 1.0), [n, self.half], device),
            sin: tensor(&values(s + 4, n * self.half, 1.0), [n, self.half], device),
        };
        let keys = tensor(&values(s + 5, cache_len, 1.0), cache, device);
        let values_cache = tensor(&values(s + 6, cache_len, 1.0), cache, device);
        let held = shared_caches.then(|| (keys.clone(), values_cache.clone()));
        let (q, k, v) = step(rows, keys, values_cache);
        drop(held);
        [host_f32(q), host_f32(k), host_f32(v)]
    }
}

/// The fused q/k norm + RoPE + cache write: plain and gated layouts, key/value-only context rows
/// (the drafter), partial rotary, head sizes that do not fill the lanes, caches written in place
/// and, when shared, copied.
#[test]
fn qk_norm_rope_write_matches_reference() {
    use ddtree_kernels::nn::HeadShape;
    let shape = |heads, kv_heads, head_dim| HeadShape {
        heads,
        kv_heads,
        head_dim,
    };
    let cases = [
        (3, 0, shape(4, 2, 16), 8, false),
        (5, 2, shape(2, 1, 32), 8, true),
        (1, 0, shape(3, 3, 24), 6, false),
        (4, 1, shape(2, 2, 64), 32, false),
    ];
    for (i, (n, context_rows, shape, half, gated)) in cases.into_iter().enumerate() {
        let case = QkvCase {
            n,
            context_rows,
            shape,
            half,
            gated,
            capacity: n + 9,
            at: 5,
            seed: 50 + 10 * i as u64,
        };
        let (qkv, shape) = (case.qkv(), [n, case.width()]);
        let cpu = Default::default();
        let want = case.run::<Cpu>(&cpu, false, |rows, keys, values| {
            Cpu::qk_norm_rope_write(tensor(&qkv, shape, &cpu), rows, keys, values, case.at)
        });
        for shared in [false, true] {
            let device = gpu();
            let got = case.run::<Gpu>(&device, shared, |rows, keys, values| {
                Gpu::qk_norm_rope_write(tensor(&qkv, shape, &device), rows, keys, values, case.at)
            });
            for (what, got, want) in [("queries", 0), ("keys", 1), ("values", 2)]
                .map(|(what, j)| (what, &got[j], &want[j]))
            {
                let err = max_rel_err(got, want);
                assert!(
                    err < TOL,
                    "{NAME} qk_norm_rope_write case {i} ({what}, shared caches {shared}): error {err}"
                );
            }
        }
    }
}

/// The rotation reading a k-sliced QKV projection's f32 partial sums gives the bits of the
/// rotation of their sum, rounded to the float type as the split-sum launch stores it (the
/// partial sums are exact in f32, so any summation order agrees), caches written in place and,
/// when shared, copied.
#[test]
fn qk_norm_rope_write_from_partials_matches_the_summed_projection() {
    use ddtree_kernels::nn::HeadShape;
    let device = gpu();
    for (splits, n, heads, kv_heads, head_dim, half) in [(2, 3, 4, 2, 16, 8), (8, 2, 2, 2, 64, 32), (3, 5, 3, 1, 24, 6)] {
        let case = QkvCase {
            n,
            context_rows: 0,
            shape: HeadShape {
                heads,
                kv_heads,
                head_dim,
            },
            half,
            gated: false,
            capacity: n + 7,
            at: 3,
            seed: 90 + splits as u64,
        };
        let len = n * case.width();
        let partial = exact(case.seed, splits * len);
        let summed: Vec<f32> = (0..len)
            .map(|i| (0..splits).map(|s| partial[s * len + i]).sum())
            .collect();
        for shared in [false, true] {
            let want = case.run::<Gpu>(&device, shared, |rows, keys, values| {
                Gpu::qk_norm_rope_write(tensor(&summed, [n, case.width()], &device), rows, keys, values, case.at)
            });
            let got = case.run::<Gpu>(&device, shared, |rows, keys, values| {
                let partial = tensor::<Gpu, 1>(&partial, [splits * len], &device).cast(FloatDType::F32);
                ddtree_kernels::cube::partials_qk_norm_rope_write(partial, splits, rows, keys, values, case.at)
            });
            assert_eq!(got, want, "{NAME} {splits} slices, {n} rows, shared caches {shared}");
        }
    }
}

/// Unit-length rows of `width` (the gated delta rule's keys and queries are L2-normalised).
fn unit_rows(seed: u64, rows: usize, width: usize) -> Vec<f32> {
    let mut x = values(seed, rows * width, 1.0);
    for row in x.chunks_mut(width) {
        let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-6);
        row.iter_mut().for_each(|v| *v /= norm);
    }
    x
}

/// The gated delta rule over a tree with siblings and a second root, a sequence, and a random
/// 65-row draft tree at Qwen3.5's head size (128), with grouped key heads: every row's output
/// and the state after the last row.
#[test]
fn gated_delta_rule_matches_reference() {
    let device = gpu();
    let mut rng = StdRng::seed_from_u64(12);
    let random_tree: Vec<i32> = (0..65)
        .map(|r| if r == 0 { -1 } else { rng.random_range(0..r) })
        .collect();
    let chain: Vec<i32> = (-1..39).collect();
    let cases: [(&str, Vec<i32>, [usize; 4]); 3] = [
        ("tree", vec![-1, 0, 0, 1, 2, 3, -1, 6, 1], [2, 4, 16, 8]),
        ("sequence", chain, [1, 2, 32, 16]),
        ("65-row tree", random_tree, [2, 4, 128, 128]),
    ];
    for (case, parents, [key_heads, heads, dk, dv]) in cases {
        let n = parents.len();
        let seed = n as u64;
        let q = unit_rows(seed, n * key_heads, dk);
        let k = unit_rows(seed + 1, n * key_heads, dk);
        let v = values(seed + 2, n * heads * dv, 1.0);
        let g: Vec<f32> = values(seed + 3, n * heads, 0.5).iter().map(|x| x - 0.5).collect();
        let beta: Vec<f32> = values(seed + 4, n * heads, 0.5).iter().map(|x| x + 0.5).collect();
        let state = values(seed + 5, heads * dk * dv, 1.0);
        let (got_out, got_last) = Gpu::gated_delta_rule(
            tensor(&q, [n, key_heads, dk], &device),
            tensor(&k, [n, key_heads, dk], &device),
            tensor(&v, [n, heads, dv], &device),
            tensor(&g, [n, heads], &device),
            tensor(&beta, [n, heads], &device),
            tensor(&state, [heads, dk, dv], &device),
            &parents,
        );
        let cpu = Default::default();
        let (want_out, want_last) = Cpu::gated_delta_rule(
            tensor(&q, [n, key_heads, dk], &cpu),
            tensor(&k, [n, key_heads, dk], &cpu),
            tensor(&v, [n, heads, dv], &cpu),
            tensor(&g, [n, heads], &cpu),
            tensor(&beta, [n, heads], &cpu),
            tensor(&state, [heads, dk, dv], &cpu),
            &parents,
        );
        let (want_out, want_last) = (host_f32(want_out), host_f32(want_last));
        let err = max_rel_err(&host_f32(got_out), &want_out);
        assert!(err < TOL, "{NAME} gated_delta_rule {case}: outputs, error {err}");
        let err = max_rel_err(&host_f32(got_last), &want_last);
        assert!(err < TOL, "{NAME} gated_delta_rule {case}: last state, error {err}");
        // Every split of a state column across units (one unit: no shuffle) gives the same —
        // on the smaller heads: lavapipe takes about a minute to compile a 128-entry column
        // unrolled in one unit.
        for parts in [1, 2, 4, 8].into_iter().filter(|_| dk <= 32) {
            let (out, last) = ddtree_kernels::cube::gated_delta_rule_with(
                [
                    tensor::<Gpu, 3>(&q, [n, key_heads, dk], &device),
                    tensor(&k, [n, key_heads, dk], &device),
                    tensor(&v, [n, heads, dv], &device),
                ],
                [tensor::<Gpu, 2>(&g, [n, heads], &device), tensor(&beta, [n, heads], &device)],
                tensor(&state, [heads, dk, dv], &device),
                &parents,
                parts,
            );
            let err = max_rel_err(&host_f32(out), &want_out);
            assert!(err < TOL, "{NAME} gated_delta_rule {case}, {parts} units per column: outputs, error {err}");
            let err = max_rel_err(&host_f32(last), &want_last);
            assert!(err < TOL, "{NAME} gated_delta_rule {case}, {parts} units per column: state, error {err}");
        }
    }
}

/// The gated delta rule's inputs as the Gated DeltaNet layer passes them: column views of one
/// projection's rows (each input a slice of `[n, width]`, reshaped into heads) — for one row a
/// view that starts inside the buffer, for several a strided one. Same values as dense inputs.
#[test]
fn gated_delta_rule_reads_column_views() {
    let device = gpu();
    let (key_heads, heads, dk, dv) = (2, 4, 16, 8);
    let (kw, vw) = (key_heads * dk, heads * dv);
    let width = 3 + 2 * kw + vw + 2 * heads;
    for parents in [vec![-1], vec![-1, 0, 0, 1, 2, 3, -1, 6], (-1..11).collect()] {
        let n = parents.len();
        let rows = values(80 + n as u64, n * width, 1.0);
        let state = values(81, heads * dk * dv, 1.0);
        let all = tensor::<Gpu, 2>(&rows, [n, width], &device);
        let cols = |from: usize, w: usize| all.clone().slice([0..n, from..from + w]);
        // The gates from their projections, as the layer computes them.
        let a_log = tensor::<Gpu, 1>(&values(82, heads, 1.0), [heads], &device);
        let dt_bias = tensor::<Gpu, 1>(&values(83, heads, 1.0), [heads], &device);
        let (g, beta) = Gpu::gdn_gates(all.clone(), 3 + 2 * kw + vw, a_log, dt_bias);
        let views = (
            cols(3, kw).reshape([n, key_heads, dk]),
            cols(3 + kw, kw).reshape([n, key_heads, dk]),
            cols(3 + 2 * kw, vw).reshape([n, heads, dv]),
            g,
            beta,
        );
        let state = || tensor::<Gpu, 3>(&state, [heads, dk, dv], &device);
        let (want_out, want_last) = Gpu::gated_delta_rule(
            dense(views.0.clone()),
            dense(views.1.clone()),
            dense(views.2.clone()),
            dense(views.3.clone()),
            dense(views.4.clone()),
            state(),
            &parents,
        );
        let (out, last) = Gpu::gated_delta_rule(views.0, views.1, views.2, views.3, views.4, state(), &parents);
        assert_eq!(host_f32(out), host_f32(want_out), "{NAME} {n} rows: outputs");
        assert_eq!(host_f32(last), host_f32(want_last), "{NAME} {n} rows: last state");
    }
}

/// A commit's replay: the state after the gated delta rule along a root-first path of a 65-row
/// draft tree (rows read in place) — against the reference, and bit for bit the state of the
/// same kernel over the path's rows gathered into a sequence (what a commit ran before).
#[test]
fn gated_delta_rule_along_matches_reference() {
    let device = gpu();
    let cpu = Default::default();
    let (key_heads, heads, dk, dv) = (2, 4, 128, 64);
    let mut rng = StdRng::seed_from_u64(14);
    let n: usize = 65;
    let parents: Vec<i32> = (0..n as i32).map(|r| if r == 0 { -1 } else { rng.random_range(0..r) }).collect();
    let host = [
        unit_rows(61, n * key_heads, dk),
        unit_rows(62, n * key_heads, dk),
        values(63, n * heads * dv, 1.0),
        values(64, n * heads, 0.5).iter().map(|x| x - 0.5).collect(),
        values(65, n * heads, 0.5).iter().map(|x| x + 0.5).collect(),
        values(66, heads * dk * dv, 1.0),
    ];
    type Inputs<B> = (Tensor<B, 3>, Tensor<B, 3>, Tensor<B, 3>, Tensor<B, 2>, Tensor<B, 2>, Tensor<B, 3>);
    fn inputs<B: KernelOps>(host: &[Vec<f32>; 6], [n, key_heads, heads, dk, dv]: [usize; 5], device: &B::Device) -> Inputs<B> {
        (
            tensor(&host[0], [n, key_heads, dk], device),
            tensor(&host[1], [n, key_heads, dk], device),
            tensor(&host[2], [n, heads, dv], device),
            tensor(&host[3], [n, heads], device),
            tensor(&host[4], [n, heads], device),
            tensor::<B, 3>(&host[5], [heads, dk, dv], device).cast(FloatDType::F32),
        )
    }
    let dims = [n, key_heads, heads, dk, dv];
    // Root-first paths to the last row, to a middle row, and the root alone.
    let path_to = |mut row: usize| {
        let mut path = vec![row];
        while parents[row] >= 0 {
            row = parents[row] as usize;
            path.push(row);
        }
        path.reverse();
        path
    };
    for path in [path_to(n - 1), path_to(n / 2), vec![0]] {
        let (q_, k_, v_, g_, b_, s_) = inputs::<Cpu>(&host, dims, &cpu);
        let want = host_f32(Cpu::gated_delta_rule_along(q_, k_, v_, g_, b_, s_, &path));
        let (q_, k_, v_, g_, b_, s_) = inputs::<Gpu>(&host, dims, &device);
        let got = host_f32(Gpu::gated_delta_rule_along(q_, k_, v_, g_, b_, s_, &path));
        let err = max_rel_err(&got, &want);
        assert!(err < TOL, "{NAME} gated_delta_rule_along {path:?}: error {err}");
        let (q_, k_, v_, g_, b_, s_) = inputs::<Gpu>(&host, dims, &device);
        let index = Tensor::<Gpu, 1, Int>::from_data(
            TensorData::new(path.iter().map(|&r| r as i64).collect(), [path.len()]),
            &device,
        );
        let chain: Vec<i32> = (-1..path.len() as i32 - 1).collect();
        let pick3 = |t: Tensor<Gpu, 3>| t.select(0, index.clone());
        let pick2 = |t: Tensor<Gpu, 2>| t.select(0, index.clone());
        let (_, gathered) = Gpu::gated_delta_rule(pick3(q_), pick3(k_), pick3(v_), pick2(g_), pick2(b_), s_, &chain);
        assert_eq!(got, host_f32(gathered), "{NAME} {path:?}: not the gathered sequence's state");
    }
}

/// The values of `t` in a fresh dense buffer.
fn dense<const D: usize>(t: Tensor<Gpu, D>) -> Tensor<Gpu, D> {
    tensor(&host_f32(t.clone()), t.dims(), &t.device())
}

/// With an f32 state (as the models keep it), the gated delta rule gives the same bits whether a
/// sequence arrives in one call, in drafter-sized blocks or one row per call (AR steps): the
/// recurrence never rounds the state to the activations' type between calls, so AR decoding and
/// speculative verify/commit see identical states.
#[test]
fn gated_delta_rule_state_is_independent_of_grouping() {
    let device = gpu();
    let (n, key_heads, heads, dk, dv) = (40, 2, 4, 32, 16);
    let q = unit_rows(51, n * key_heads, dk);
    let k = unit_rows(52, n * key_heads, dk);
    let v = values(53, n * heads * dv, 1.0);
    let g: Vec<f32> = values(54, n * heads, 0.5).iter().map(|x| x - 0.5).collect();
    let beta: Vec<f32> = values(55, n * heads, 0.5).iter().map(|x| x + 0.5).collect();
    let state = values(56, heads * dk * dv, 1.0);
    // Rows `from..to` as one call continuing `state`: outputs and the state after `to − 1`.
    let run = |from: usize, to: usize, state: Tensor<Gpu, 3>| {
        let m = to - from;
        let chain: Vec<i32> = (-1..m as i32 - 1).collect();
        Gpu::gated_delta_rule(
            tensor(&q[from * key_heads * dk..to * key_heads * dk], [m, key_heads, dk], &device),
            tensor(&k[from * key_heads * dk..to * key_heads * dk], [m, key_heads, dk], &device),
            tensor(&v[from * heads * dv..to * heads * dv], [m, heads, dv], &device),
            tensor(&g[from * heads..to * heads], [m, heads], &device),
            tensor(&beta[from * heads..to * heads], [m, heads], &device),
            state,
            &chain,
        )
    };
    let start = || tensor::<Gpu, 3>(&state, [heads, dk, dv], &device).cast(FloatDType::F32);
    let (whole_out, whole_last) = run(0, n, start());
    let (whole_out, whole_last) = (host_f32(whole_out), host_f32(whole_last));
    for block in [16, 1] {
        let (mut outs, mut last) = (Vec::new(), start());
        for from in (0..n).step_by(block) {
            let (out, next) = run(from, (from + block).min(n), last);
            outs.extend(host_f32(out));
            last = next;
        }
        assert_eq!(outs, whole_out, "{NAME}: outputs differ with {block}-row calls");
        assert_eq!(host_f32(last), whole_last, "{NAME}: state differs with {block}-row calls");
    }
}

/// The gated attention's output gate with the gate as a row view (the gate columns of a QKV
/// projection), a dense one, and widths no vector divides.
#[test]
fn sigmoid_mul_matches_reference() {
    let device = gpu();
    let cpu = Default::default();
    for (rows, cols) in [(1, 96), (3, 10), (5, 13)] {
        let x = values(30, rows * cols, 4.0);
        let projection = values(31, rows * 3 * cols, 6.0);
        let want = host_f32(Cpu::sigmoid_mul(
            tensor(&x, [rows, cols], &cpu),
            tensor::<Cpu, 2>(&projection, [rows, 3 * cols], &cpu).slice([0..rows, cols..2 * cols]),
        ));
        let got = host_f32(Gpu::sigmoid_mul(
            tensor(&x, [rows, cols], &device),
            tensor::<Gpu, 2>(&projection, [rows, 3 * cols], &device).slice([0..rows, cols..2 * cols]),
        ));
        let err = max_rel_err(&got, &want);
        assert!(err < TOL, "{NAME} sigmoid_mul {rows}x{cols} (gate view): error {err}");
        let gate = values(32, rows * cols, 6.0);
        let want = host_f32(Cpu::sigmoid_mul(tensor(&x, [rows, cols], &cpu), tensor(&gate, [rows, cols], &cpu)));
        let got = host_f32(Gpu::sigmoid_mul(
            tensor(&x, [rows, cols], &device),
            tensor(&gate, [rows, cols], &device),
        ));
        let err = max_rel_err(&got, &want);
        assert!(err < TOL, "{NAME} sigmoid_mul {rows}x{cols}: error {err}");
    }
}

/// The conv stage of a Gated DeltaNet layer — conv + SiLU over gathered windows of the committed
/// rows and the block's (the first columns of a projection), per-head L2 norm of q and k, q
/// scaled, and the last rows kept — for an AR row, a tree's windows (rows shared between windows,
/// committed rows among them) and a 65-row block at Qwen3.6's head sizes with grouped heads.
#[test]
fn gdn_conv_qkv_matches_reference() {
    use ddtree_kernels::GdnHeads;
    let device = gpu();
    let cpu = Default::default();
    let small = GdnHeads {
        key_heads: 2,
        value_heads: 4,
        key_dim: 16,
        value_dim: 8,
    };
    let qwen36 = GdnHeads {
        key_heads: 2,
        value_heads: 6,
        key_dim: 128,
        value_dim: 128,
    };
    let mut rng = StdRng::seed_from_u64(40);
    let random_windows: Vec<usize> = (0..65 * 4).map(|_| rng.random_range(0..68)).collect();
    let cases: [(&str, GdnHeads, usize, Vec<usize>); 3] = [
        ("one row", small, 4, vec![0, 1, 2, 3]),
        ("tree", small, 9, vec![0, 1, 2, 3, 1, 2, 3, 4, 1, 2, 3, 5, 2, 3, 5, 6, 3, 5, 6, 7, 0, 1, 2, 8]),
        ("65 rows", qwen36, 68, random_windows),
    ];
    for (case, heads, m, windows) in cases {
        // Three committed rows, then the block's rows as the first C columns of a wider
        // projection (read in place, a ragged row stride).
        let (c, n) = (heads.channels(), m - 3);
        let history = values(41, 3 * c, 2.0);
        let projection = values(43, n * (c + 5), 2.0);
        let weight = values(42, c * 4, 0.8);
        let want = Cpu::gdn_conv_qkv(
            tensor(&history, [3, c], &cpu),
            tensor(&projection, [n, c + 5], &cpu),
            &windows,
            tensor(&weight, [c, 4], &cpu),
            heads,
        );
        let got = Gpu::gdn_conv_qkv(
            tensor(&history, [3, c], &device),
            tensor(&projection, [n, c + 5], &device),
            &windows,
            tensor(&weight, [c, 4], &device),
            heads,
        );
        for (part, got, want) in [("q", got.q, want.q), ("k", got.k, want.k), ("v", got.v, want.v)] {
            assert_eq!(got.dims(), want.dims(), "{NAME} gdn_conv_qkv {case}: {part} shape");
            let err = max_rel_err(&host_f32(got), &host_f32(want));
            assert!(err < TOL, "{NAME} gdn_conv_qkv {case}: {part}, error {err}");
        }
        // A copy of inputs (rounded on upload in f16).
        let err = max_rel_err(&host_f32(got.history), &host_f32(want.history));
        assert!(err < TOL, "{NAME} gdn_conv_qkv {case}: the last rows, error {err}");
    }
}

/// The conv rows a commit keeps — the last `K − 1` of the committed rows and the accepted block
/// rows (the first columns of a wider projection, read in place) — for paths shorter than,
/// as long as and longer than `K − 1`: copies, so exact.
#[test]
fn gdn_conv_commit_matches_reference() {
    let device = gpu();
    let cpu = Default::default();
    let (c, n, width) = (24, 9, 29);
    let history = exact(44, 3 * c);
    let projection = exact(45, n * width);
    for accepted in [vec![0], vec![0, 2], vec![0, 1, 4], vec![0, 2, 5, 7, 8]] {
        let want = host_f32(Cpu::gdn_conv_commit(
            tensor(&history, [3, c], &cpu),
            tensor(&projection, [n, width], &cpu),
            &accepted,
        ));
        let got = host_f32(Gpu::gdn_conv_commit(
            tensor(&history, [3, c], &device),
            tensor(&projection, [n, width], &device),
            &accepted,
        ));
        assert_eq!(got, want, "{NAME} gdn_conv_commit {accepted:?}");
    }
}

/// The decay and β gates read in place from a projection (as the layer passes it: `b` from
/// column 5, then `a`), with `a + dt_bias` on both sides of softplus's linear threshold (20) and
/// far below zero.
#[test]
fn gdn_gates_match_reference() {
    let device = gpu();
    let cpu = Default::default();
    let heads = 6;
    for rows in [1, 3, 65] {
        let width = 5 + 2 * heads;
        let mut projection = values(50 + rows as u64, rows * width, 4.0);
        // Row 0: a + dt_bias past 20 and at −30 for the first heads.
        projection[5 + heads] = 25.0;
        projection[5 + heads + 1] = -30.0;
        let a_log = values(51, heads, 1.0);
        let dt_bias = values(52, heads, 1.0);
        let all = tensor::<Cpu, 2>(&projection, [rows, width], &cpu);
        let (want_g, want_beta) = Cpu::gdn_gates(
            all,
            5,
            tensor(&a_log, [heads], &cpu),
            tensor(&dt_bias, [heads], &cpu),
        );
        let all = tensor::<Gpu, 2>(&projection, [rows, width], &device);
        let (g, beta) = Gpu::gdn_gates(
            all,
            5,
            tensor(&a_log, [heads], &device),
            tensor(&dt_bias, [heads], &device),
        );
        let err = max_rel_err(&host_f32(g), &host_f32(want_g));
        assert!(err < TOL, "{NAME} gdn_gates {rows} rows: g, error {err}");
        let err = max_rel_err(&host_f32(beta), &host_f32(want_beta));
        assert!(err < TOL, "{NAME} gdn_gates {rows} rows: beta, error {err}");
    }
}

/// The gated RMSNorm over value heads: per row (one group), and per `dim`-wide group of a row
/// with `z` columns of a projection read in place (as the layer passes it) — Qwen3.6's head size,
/// a width past one cube's planes on lavapipe, a ragged one.
#[test]
fn gated_rms_norm_matches_reference() {
    let device = gpu();
    let cpu = Default::default();
    for (rows, groups, dim) in [(1, 1, 128), (48, 1, 128), (3, 1, 16), (2, 1, 1000), (4, 1, 13), (1, 6, 128), (5, 4, 16)] {
        let width = groups * dim;
        let x = values(60, rows * width, 3.0);
        let projection = values(61, rows * (width + 5), 6.0);
        let w = values(62, dim, 2.0);
        let want = host_f32(Cpu::gated_rms_norm(
            tensor(&x, [rows, width], &cpu),
            tensor::<Cpu, 2>(&projection, [rows, width + 5], &cpu),
            3,
            tensor(&w, [dim], &cpu),
            1e-6,
        ));
        let got = host_f32(Gpu::gated_rms_norm(
            tensor(&x, [rows, width], &device),
            tensor::<Gpu, 2>(&projection, [rows, width + 5], &device),
            3,
            tensor(&w, [dim], &device),
            1e-6,
        ));
        let err = max_rel_err(&got, &want);
        assert!(err < TOL, "{NAME} gated_rms_norm {rows}x{groups}x{dim}: error {err}");
    }
}

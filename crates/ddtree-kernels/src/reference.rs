//! Reference implementations in plain burn ops. They run on any backend (the CPU one in CI) and
//! are the ground truth every fused kernel is tested against.

use burn_tensor::activation::{log_softmax, softmax};
use burn_tensor::backend::Backend;
use burn_tensor::{Bool, FloatDType, Int, Tensor, TensorData};

use crate::mask::AttentionContext;
use crate::{GdnConv, GdnHeads};

/// `x · rsqrt(mean(x²) + eps) · weight` over the last dimension of `[rows, hidden]`.
pub fn rms_norm<B: Backend>(x: Tensor<B, 2>, weight: Tensor<B, 1>, eps: f64) -> Tensor<B, 2> {
    // A division, not `recip()`: the CPU backend's SIMD f32 reciprocal is an approximation
    // (~1e-4 relative), enough to miss transformers' outputs.
    let rms = x.clone().square().mean_dim(1).add_scalar(eps).sqrt();
    x / rms * weight.unsqueeze::<2>()
}

/// The residual add before a pre-norm: `sum = x + delta` and `rms_norm(sum)`, both `[rows,
/// hidden]`. The norm reads the sum as stored (rounded to the backend's float type), as an add
/// followed by a norm does.
pub fn add_rms_norm<B: Backend>(
    x: Tensor<B, 2>,
    delta: Tensor<B, 2>,
    weight: Tensor<B, 1>,
    eps: f64,
) -> (Tensor<B, 2>, Tensor<B, 2>) {
    let sum = x + delta;
    (sum.clone(), rms_norm(sum, weight, eps))
}

/// `x · Wᵀ` with `x: [rows, in]` and `weight: [out, in]` (the Hugging Face layout).
pub fn linear<B: Backend>(x: Tensor<B, 2>, weight: Tensor<B, 2>) -> Tensor<B, 2> {
    x.matmul(weight.transpose())
}

/// `silu(gate) ⊙ up`, the SwiGLU activation, with `silu(x) = x / (1 + e^-x)`.
///
/// Written out rather than burn's `activation::silu`, whose sigmoid computes in f32 whatever the
/// backend's precision (it would cap the f64 tests at f32 accuracy).
pub fn silu_mul<B: Backend>(gate: Tensor<B, 2>, up: Tensor<B, 2>) -> Tensor<B, 2> {
    gate.clone() / gate.neg().exp().add_scalar(1.0) * up
}

/// NeoX ("rotate half") rotary embedding of `x: [rows, heads, head_dim]` over its first
/// `2·half` dims; `cos`/`sin` are `[rows, half]` for each row's position. The remaining dims
/// (partial rotary) pass through.
pub fn rope<B: Backend>(x: Tensor<B, 3>, cos: Tensor<B, 2>, sin: Tensor<B, 2>) -> Tensor<B, 3> {
    let [rows, heads, head_dim] = x.dims();
    let half = cos.dims()[1];
    let cos = cos.unsqueeze_dim::<3>(1);
    let sin = sin.unsqueeze_dim::<3>(1);
    let x1 = x.clone().slice([0..rows, 0..heads, 0..half]);
    let x2 = x.clone().slice([0..rows, 0..heads, half..2 * half]);
    let out1 = x1.clone() * cos.clone() - x2.clone() * sin.clone();
    let out2 = x2 * cos + x1 * sin;
    if 2 * half == head_dim {
        Tensor::cat(vec![out1, out2], 2)
    } else {
        let pass = x.slice([0..rows, 0..heads, 2 * half..head_dim]);
        Tensor::cat(vec![out1, out2, pass], 2)
    }
}

/// Writes `rows: [n, kv_heads, head_dim]` into `cache: [kv_heads, capacity, head_dim]` at cache
/// rows `at..at + n`.
pub fn write_cache_rows<B: Backend>(cache: Tensor<B, 3>, rows: Tensor<B, 3>, at: usize) -> Tensor<B, 3> {
    let [kv_heads, _, head_dim] = cache.dims();
    let n = rows.dims()[0];
    cache.slice_assign([0..kv_heads, at..at + n, 0..head_dim], rows.swap_dims(0, 1))
}

/// Moves cache rows `at + keep[i]` to `at + i` (commit of an accepted tree path). `keep` must be
/// increasing, so no source row is overwritten before it is read.
pub fn compact_cache_rows<B: Backend>(cache: Tensor<B, 3>, at: usize, keep: &[usize]) -> Tensor<B, 3> {
    let [kv_heads, _, head_dim] = cache.dims();
    let index = crate::index_tensor(keep.iter().map(|&k| at + k), &cache.device());
    let kept = cache.clone().select(1, index);
    cache.slice_assign([0..kv_heads, at..at + keep.len(), 0..head_dim], kept)
}

/// [`compact_cache_rows`] on the key and value caches of every layer.
pub fn compact_kv_rows<B: Backend>(
    caches: Vec<crate::LayerCaches<B>>,
    at: usize,
    keep: &[usize],
) -> Vec<crate::LayerCaches<B>> {
    caches
        .into_iter()
        .map(|(keys, values)| {
            (
                compact_cache_rows(keys, at, keep),
                compact_cache_rows(values, at, keep),
            )
        })
        .collect()
}

/// Attention of `q: [n, q_heads, head_dim]` over `k_cache`/`v_cache: [kv_heads, capacity,
/// head_dim]` (grouped-query: q head `h` reads kv head `h / (q_heads / kv_heads)`), with the block
/// at cache rows `ctx.prefix_len..ctx.prefix_len + n` and the visibility of `ctx`. Returns
/// `[n, q_heads, head_dim]`. Builds a dense mask on the host: fine for a reference, never for the
/// hot path.
pub fn cached_attention<B: Backend>(
    q: Tensor<B, 3>,
    k_cache: Tensor<B, 3>,
    v_cache: Tensor<B, 3>,
    ctx: &AttentionContext<'_>,
    scale: f64,
) -> Tensor<B, 3> {
    let [n, q_heads, head_dim] = q.dims();
    let kv_heads = k_cache.dims()[0];
    let group = q_heads / kv_heads;
    let kv_len = ctx.prefix_len + n;
    let device = q.device();

    let k = k_cache.slice([0..kv_heads, 0..kv_len, 0..head_dim]);
    let v = v_cache.slice([0..kv_heads, 0..kv_len, 0..head_dim]);
    // [n, Hq, D] → [Hkv, group·n, D]: consecutive q heads share a kv head.
    let q = q.swap_dims(0, 1).reshape([kv_heads, group * n, head_dim]);
    let scores = q.matmul(k.swap_dims(1, 2)).mul_scalar(scale);

    // One [n, kv_len] mask, tiled over the q heads of a group (rows g·n + i) and the kv heads.
    let mut hidden = Vec::with_capacity(n * kv_len);
    for row in 0..n {
        hidden.extend((0..kv_len).map(|key| !ctx.sees(row, key)));
    }
    let mask = Tensor::<B, 3, Bool>::from_data(TensorData::new(hidden, [1, n, kv_len]), &device)
        .repeat_dim(1, group)
        .repeat_dim(0, kv_heads);
    let probs = softmax(scores.mask_fill(mask, f32::NEG_INFINITY), 2);
    probs.matmul(v).reshape([q_heads, n, head_dim]).swap_dims(0, 1)
}

/// Index of the largest value of each row of `[rows, vocab]` (the first one on ties).
pub fn argmax<B: Backend>(logits: Tensor<B, 2>) -> Tensor<B, 1, Int> {
    let rows = logits.dims()[0];
    logits.argmax(1).reshape([rows])
}

/// The `k` largest log-softmax values of each row of `[rows, vocab]`, in descending order, with
/// their token ids.
pub fn top_k_log_softmax<B: Backend>(logits: Tensor<B, 2>, k: usize) -> (Tensor<B, 2>, Tensor<B, 2, Int>) {
    log_softmax(logits, 1).topk_with_indices(k, 1)
}

/// `x ⊙ sigmoid(gate)` with `sigmoid(g) = 1 / (1 + e^-g)` (the gated attention's output gate),
/// written as a division for the same reasons as [`silu_mul`].
pub fn sigmoid_mul<B: Backend>(x: Tensor<B, 2>, gate: Tensor<B, 2>) -> Tensor<B, 2> {
    x / gate.neg().exp().add_scalar(1.0)
}

/// `x / sqrt(Σ x² + eps)` over the last dimension of `[rows, dim]` (the Gated DeltaNet's per-head
/// L2 normalisation of q and k; the ε sits inside the root, as in FLA and transformers).
pub fn l2_norm<B: Backend>(x: Tensor<B, 2>, eps: f64) -> Tensor<B, 2> {
    let norm = x.clone().square().sum_dim(1).add_scalar(eps).sqrt();
    x / norm
}

/// `log(1 + e^x)`, and `x` itself above 20 (PyTorch's `softplus` threshold, so large inputs
/// neither overflow nor round differently from transformers).
pub fn softplus<B: Backend>(x: Tensor<B, 2>) -> Tensor<B, 2> {
    let linear = x.clone().greater_elem(20.0);
    x.clone().exp().log1p().mask_where(linear, x)
}

/// The Gated DeltaNet gates of `[rows, Hv]` projections: decay (log space)
/// `g = −exp(a_log) · softplus(a + dt_bias)` and `β = sigmoid(b)`, with `a_log`, `dt_bias: [Hv]`.
pub fn gdn_gates<B: Backend>(
    a: Tensor<B, 2>,
    b: Tensor<B, 2>,
    a_log: Tensor<B, 1>,
    dt_bias: Tensor<B, 1>,
) -> (Tensor<B, 2>, Tensor<B, 2>) {
    let rate = a_log.exp().neg().unsqueeze::<2>();
    let g = softplus(a + dt_bias.unsqueeze::<2>()) * rate;
    let beta = b.ones_like() / b.neg().exp().add_scalar(1.0);
    (g, beta)
}

/// Depthwise causal conv1d with SiLU over gathered windows: `out[i, c] = silu(Σ_j weight[c, j] ·
/// rows[windows[i·K + j], c])` for `rows: [m, C]`, `weight: [C, K]` and `windows` holding `n·K`
/// row indices (oldest first, the row itself last). Returns `[n, C]`.
///
/// The window of a sequence row is the `K` rows ending at it; the window of a tree node is the
/// node and its nearest ancestors, so one op serves prefill, decode and tree verify.
pub fn causal_conv1d<B: Backend>(
    rows: Tensor<B, 2>,
    windows: &[usize],
    weight: Tensor<B, 2>,
) -> Tensor<B, 2> {
    let [channels, kernel] = weight.dims();
    let n = windows.len() / kernel;
    let index: Vec<i64> = windows.iter().map(|&w| w as i64).collect();
    let index = Tensor::<B, 1, Int>::from_data(
        TensorData::new(index, [windows.len()]).convert::<B::IntElem>(),
        &rows.device(),
    );
    let gathered = rows.select(0, index).reshape([n, kernel, channels]);
    let taps = weight.transpose().unsqueeze::<3>();
    let sum = (gathered * taps).sum_dim(1).reshape([n, channels]);
    sum.clone() / sum.neg().exp().add_scalar(1.0)
}

/// The ε inside the root of the Gated DeltaNet's q/k L2 norm (FLA's and transformers' `1e-6`).
pub const GDN_L2_EPS: f64 = 1e-6;

/// The Gated DeltaNet's conv stage over the rows `[history; block]` — `history: [K − 1, C]`, the
/// committed pre-conv rows, then the first `C` columns of `block: [n, ≥ C]` (`C = [q | k | v]`
/// channels of `heads`; the layer passes its whole input projection): [`causal_conv1d`] with
/// SiLU over `windows`, then per-head [`l2_norm`] (ε [`GDN_L2_EPS`]) of q and k, q scaled by
/// `1/√Dk`. Also returns the last `K − 1` of those rows, the committed rows after a sequence
/// block.
pub fn gdn_conv_qkv<B: Backend>(
    history: Tensor<B, 2>,
    block: Tensor<B, 2>,
    windows: &[usize],
    weight: Tensor<B, 2>,
    heads: GdnHeads,
) -> GdnConv<B> {
    let GdnHeads {
        key_heads,
        value_heads,
        key_dim,
        value_dim,
    } = heads;
    let [kept, c] = history.dims();
    let n = block.dims()[0];
    let rows = Tensor::cat(vec![history, block.slice([0..n, 0..c])], 0);
    let kw = heads.key_width();
    let mixed = causal_conv1d(rows.clone(), windows, weight);
    let cols = |from: usize, width: usize| mixed.clone().slice([0..n, from..from + width]);
    let unit_heads = |t: Tensor<B, 2>| {
        l2_norm(t.reshape([n * key_heads, key_dim]), GDN_L2_EPS).reshape([n, key_heads, key_dim])
    };
    GdnConv {
        q: unit_heads(cols(0, kw)).mul_scalar((key_dim as f64).powf(-0.5)),
        k: unit_heads(cols(kw, kw)),
        v: cols(2 * kw, heads.value_width()).reshape([n, value_heads, value_dim]),
        history: rows.slice([n..n + kept, 0..c]),
    }
}

/// The committed conv rows after a commit keeps the `accepted` rows of a block: the last
/// `K − 1` rows of `[history; the accepted rows of block's first C columns]` (`history: [K − 1,
/// C]`, `block: [n, ≥ C]`, as in [`gdn_conv_qkv`]).
pub fn gdn_conv_commit<B: Backend>(
    history: Tensor<B, 2>,
    block: Tensor<B, 2>,
    accepted: &[usize],
) -> Tensor<B, 2> {
    let [kept, c] = history.dims();
    let sources = gdn_conv_commit_rows(kept, accepted);
    let n = block.dims()[0];
    let rows = Tensor::cat(vec![history, block.slice([0..n, 0..c])], 0);
    let index = crate::index_tensor(sources, &rows.device());
    rows.select(0, index)
}

/// The rows of `[history (kept rows); block]` that [`gdn_conv_commit`] keeps, oldest first.
pub(crate) fn gdn_conv_commit_rows(kept: usize, accepted: &[usize]) -> Vec<usize> {
    let all: Vec<usize> = (0..kept).chain(accepted.iter().map(|&a| kept + a)).collect();
    all[all.len() - kept..].to_vec()
}

/// Each row's children and the roots of `parents` (`-1`: a root, else an earlier row), both in
/// decreasing row order — popped from a stack, they come out in increasing order.
pub(crate) fn tree_links(parents: &[i32]) -> (Vec<Vec<usize>>, Vec<usize>) {
    let mut children = vec![Vec::new(); parents.len()];
    let mut roots = Vec::new();
    for (row, &parent) in parents.iter().enumerate().rev() {
        match usize::try_from(parent) {
            Ok(p) => {
                assert!(p < row, "row {row}: parent {p} must precede it");
                children[p].push(row);
            }
            Err(_) => roots.push(row),
        }
    }
    (children, roots)
}

/// The state after [`gated_delta_rule`] runs along `rows` of a block as a chain: the first row
/// continues `state`, each later one the row before it in `rows` (a commit's replay of the
/// accepted path of a verified tree). The rows are gathered, then run as a sequence.
pub fn gated_delta_rule_along<B: Backend>(
    q: Tensor<B, 3>,
    k: Tensor<B, 3>,
    v: Tensor<B, 3>,
    g: Tensor<B, 2>,
    beta: Tensor<B, 2>,
    state: Tensor<B, 3>,
    rows: &[usize],
) -> Tensor<B, 3> {
    if rows.is_empty() {
        return state;
    }
    let index = crate::index_tensor(rows.iter().copied(), &state.device());
    let chain: Vec<i32> = (-1..rows.len() as i32 - 1).collect();
    let pick2 = |t: Tensor<B, 2>| t.select(0, index.clone());
    let pick3 = |t: Tensor<B, 3>| t.select(0, index.clone());
    gated_delta_rule(pick3(q), pick3(k), pick3(v), pick2(g), pick2(beta), state, &chain).1
}

/// The gated delta rule over rows linked by `parents` (`-1`: the row continues `state`, else
/// the index of an earlier row it continues). Per value head `h` (reading key head
/// `h / (Hv / Hk)`), with `S` the parent's state:
///
/// `S' = e^g·S + k (β (v − e^g·Sᵀk))ᵀ`, `out = S'ᵀ q`.
///
/// `q, k: [n, Hk, Dk]` (L2-normalised; q scaled by `1/√Dk`), `v: [n, Hv, Dv]`, `g, beta: [n,
/// Hv]`, `state: [Hv, Dk, Dv]` (never modified). Returns `out: [n, Hv, Dv]` and the state after
/// row `n − 1` (after a sequence: the new state). A sequence is the chain `-1, 0, 1, …`; a tree
/// gives every node the state of its own path. Rows are visited depth-first, so at most
/// `depth + 1` states are alive, never one per row. The recurrence runs in f32 at least, as the
/// reference model's does: outputs come back in `q`'s type, the state in its own (callers keep it
/// in f32, so that rounding never depends on how rows were grouped into calls).
pub fn gated_delta_rule<B: Backend>(
    q: Tensor<B, 3>,
    k: Tensor<B, 3>,
    v: Tensor<B, 3>,
    g: Tensor<B, 2>,
    beta: Tensor<B, 2>,
    state: Tensor<B, 3>,
    parents: &[i32],
) -> (Tensor<B, 3>, Tensor<B, 3>) {
    let [n, key_heads, dk] = q.dims();
    let [_, heads, dv] = v.dims();
    let (dtype, state_dtype) = (q.dtype(), state.dtype());
    // At least f32 (f64 stays f64).
    let wide = if dtype.size() < 4 {
        FloatDType::F32
    } else {
        dtype.into()
    };
    let group = heads / key_heads;
    // Value head h reads key head h / group: repeat each key head `group` times in place.
    let expand = |x: Tensor<B, 3>| {
        x.cast(wide)
            .unsqueeze_dim::<4>(2)
            .repeat_dim(2, group)
            .reshape([n, heads, dk])
    };
    let (q, k, v) = (expand(q), expand(k), v.cast(wide));
    let (g, beta, state) = (g.cast(wide), beta.cast(wide), state.cast(wide));
    let decay = g.exp();

    let (children, roots) = tree_links(parents);
    let mut stack: Vec<_> = roots.into_iter().map(|row| (row, state.clone())).collect();
    let mut outputs: Vec<Option<Tensor<B, 3>>> = vec![None; n];
    let mut last = state;
    while let Some((row, parent_state)) = stack.pop() {
        let at = |t: &Tensor<B, 2>| t.clone().slice([row..row + 1, 0..heads]).reshape([heads, 1, 1]);
        let kt = k
            .clone()
            .slice([row..row + 1, 0..heads, 0..dk])
            .reshape([heads, 1, dk]);
        let s = parent_state * at(&decay);
        let predicted = kt.clone().matmul(s.clone());
        let vt = v
            .clone()
            .slice([row..row + 1, 0..heads, 0..dv])
            .reshape([heads, 1, dv]);
        let delta = (vt - predicted) * at(&beta);
        let s = s + kt.swap_dims(1, 2).matmul(delta);
        let qt = q
            .clone()
            .slice([row..row + 1, 0..heads, 0..dk])
            .reshape([heads, 1, dk]);
        outputs[row] = Some(qt.matmul(s.clone()).reshape([1, heads, dv]));
        if row + 1 == n {
            last = s.clone();
        }
        // Reversed so children are visited in increasing order.
        stack.extend(children[row].iter().rev().map(|&c| (c, s.clone())));
    }
    let outputs = outputs
        .into_iter()
        .map(|o| o.expect("every row is reached from a root"))
        .collect();
    (Tensor::cat(outputs, 0).cast(dtype), last.cast(state_dtype))
}

/// `rms_norm(x, weight) ⊙ silu(z)` over each `dim`-wide group of the rows of `x, z: [rows, width]`
/// (`weight: [dim]`, `width` a multiple of `dim`): the Gated DeltaNet's output norm over each
/// value head, a plain weight, normalised before the gate.
pub fn gated_rms_norm<B: Backend>(
    x: Tensor<B, 2>,
    z: Tensor<B, 2>,
    weight: Tensor<B, 1>,
    eps: f64,
) -> Tensor<B, 2> {
    let [rows, width] = x.dims();
    let groups = [rows * width / weight.dims()[0], weight.dims()[0]];
    let (x, z) = (x.reshape(groups), z.reshape(groups));
    (rms_norm(x, weight, eps) * z.clone() / z.neg().exp().add_scalar(1.0)).reshape([rows, width])
}

/// The attention step between the QKV projection and attention, as the composition of the
/// separate ops of `B` (pure burn ops on a backend without overrides): the per-head q/k RMSNorm,
/// RoPE on queries and keys, and the write of keys and values into the cache at row `at`.
/// `qkv: [n, ·]` holds `[q | (gate) | k | v]` per row; returns the queries `[n − context_rows,
/// heads, head_dim]` and the updated key and value caches.
pub fn qk_norm_rope_write<B: crate::KernelOps>(
    qkv: Tensor<B, 2>,
    rows: crate::nn::QkvRows<B>,
    keys: Tensor<B, 3>,
    values: Tensor<B, 3>,
    at: usize,
) -> (Tensor<B, 3>, Tensor<B, 3>, Tensor<B, 3>) {
    let crate::nn::HeadShape {
        heads,
        kv_heads,
        head_dim,
    } = rows.shape;
    let (n, k_at, context_rows) = (qkv.dims()[0], rows.k_at, rows.context_rows);
    let (q_width, kv_width) = (heads * head_dim, kv_heads * head_dim);
    let q = qkv
        .clone()
        .slice([context_rows..n, 0..q_width])
        .reshape([n - context_rows, heads, head_dim]);
    let k = qkv
        .clone()
        .slice([0..n, k_at..k_at + kv_width])
        .reshape([n, kv_heads, head_dim]);
    let v = qkv
        .slice([0..n, k_at + kv_width..k_at + 2 * kv_width])
        .reshape([n, kv_heads, head_dim]);
    let half = rows.cos.dims()[1];
    let (q_cos, q_sin) = (
        rows.cos.clone().slice([context_rows..n, 0..half]),
        rows.sin.clone().slice([context_rows..n, 0..half]),
    );
    let q = B::rope(rows.q_norm.forward_heads(q), q_cos, q_sin);
    let k = B::rope(rows.k_norm.forward_heads(k), rows.cos, rows.sin);
    (
        q,
        B::write_cache_rows(keys, k, at),
        B::write_cache_rows(values, v, at),
    )
}

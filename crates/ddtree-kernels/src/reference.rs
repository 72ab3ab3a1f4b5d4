//! Reference implementations in plain burn ops. They run on any backend (the CPU one in CI) and
//! are the ground truth every fused kernel is tested against.

use burn_tensor::activation::{log_softmax, softmax};
use burn_tensor::backend::Backend;
use burn_tensor::{Bool, Int, Tensor, TensorData};

use crate::mask::AttentionContext;

/// `x · rsqrt(mean(x²) + eps) · weight` over the last dimension of `[rows, hidden]`.
pub fn rms_norm<B: Backend>(x: Tensor<B, 2>, weight: Tensor<B, 1>, eps: f64) -> Tensor<B, 2> {
    // A division, not `recip()`: the CPU backend's SIMD f32 reciprocal is an approximation
    // (~1e-4 relative), enough to miss transformers' outputs.
    let rms = x.clone().square().mean_dim(1).add_scalar(eps).sqrt();
    x / rms * weight.unsqueeze::<2>()
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
    let device = cache.device();
    let sources: Vec<i64> = keep.iter().map(|&k| (at + k) as i64).collect();
    let index = Tensor::<B, 1, Int>::from_data(
        TensorData::new(sources, [keep.len()]).convert::<B::IntElem>(),
        &device,
    );
    let kept = cache.clone().select(1, index);
    cache.slice_assign([0..kv_heads, at..at + keep.len(), 0..head_dim], kept)
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

    let mut hidden = Vec::with_capacity(kv_heads * group * n * kv_len);
    for _ in 0..kv_heads * group {
        for row in 0..n {
            hidden.extend((0..kv_len).map(|key| !ctx.sees(row, key)));
        }
    }
    let mask =
        Tensor::<B, 3, Bool>::from_data(TensorData::new(hidden, [kv_heads, group * n, kv_len]), &device);
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

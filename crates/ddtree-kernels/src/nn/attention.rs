//! The Qwen-family attention layer shared by the targets and the DFlash drafter: fused QKV
//! projection, per-head q/k RMSNorm, rotary embedding, KV-cache write, attention over the
//! cache, output projection.

use burn_tensor::Tensor;

use super::{KvCache, Linear, RmsNorm};
use crate::{AttentionContext, KernelOps};

/// Head counts and sizes of one attention layer.
#[derive(Clone, Copy, Debug)]
pub struct HeadShape {
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (grouped-query attention when fewer than `heads`).
    pub kv_heads: usize,
    /// Dims per head.
    pub head_dim: usize,
}

/// One attention layer with its KV cache.
#[derive(Debug)]
pub struct Attention<B: KernelOps> {
    qkv: Linear<B>,
    o_proj: Linear<B>,
    q_norm: RmsNorm<B>,
    k_norm: RmsNorm<B>,
    shape: HeadShape,
    cache: KvCache<B>,
}

impl<B: KernelOps> Attention<B> {
    /// From the Hugging Face `q_proj`, `k_proj`, `v_proj` (`[out, hidden]`) and `o_proj` weights.
    pub fn new(
        [q_proj, k_proj, v_proj, o_proj]: [Tensor<B, 2>; 4],
        q_norm: RmsNorm<B>,
        k_norm: RmsNorm<B>,
        shape: HeadShape,
        cache: KvCache<B>,
    ) -> Self {
        Self {
            qkv: Linear::fused(vec![q_proj, k_proj, v_proj]),
            o_proj: Linear::new(o_proj),
            q_norm,
            k_norm,
            shape,
            cache,
        }
    }

    /// Attention for the last `n - context_rows` rows of `x: [n, hidden]` (the queries, at cache
    /// rows `ctx.prefix_len..`), whose keys and values, with those of the first `context_rows`
    /// rows (key/value-only rows, written just before the queries: the drafter's projected
    /// context), are written into the cache first. `cos`/`sin` hold the rotary rows of all `n`
    /// rows. Returns `[n - context_rows, hidden]`.
    pub fn forward(
        &mut self,
        x: Tensor<B, 2>,
        cos: Tensor<B, 2>,
        sin: Tensor<B, 2>,
        ctx: &AttentionContext<'_>,
        context_rows: usize,
    ) -> Tensor<B, 2> {
        let HeadShape {
            heads,
            kv_heads,
            head_dim,
        } = self.shape;
        let n = x.dims()[0];
        let queries = n - context_rows;
        let (q_width, kv_width) = (heads * head_dim, kv_heads * head_dim);
        let qkv = self.qkv.forward(x);
        let q = qkv
            .clone()
            .slice([context_rows..n, 0..q_width])
            .reshape([queries, heads, head_dim]);
        let k = qkv
            .clone()
            .slice([0..n, q_width..q_width + kv_width])
            .reshape([n, kv_heads, head_dim]);
        let v = qkv
            .slice([0..n, q_width + kv_width..q_width + 2 * kv_width])
            .reshape([n, kv_heads, head_dim]);

        let [_, half] = cos.dims();
        let (q_cos, q_sin) = (
            cos.clone().slice([context_rows..n, 0..half]),
            sin.clone().slice([context_rows..n, 0..half]),
        );
        let q = B::rope(self.q_norm.forward_heads(q), q_cos, q_sin);
        let k = B::rope(self.k_norm.forward_heads(k), cos, sin);
        self.cache.write(k, v, ctx.prefix_len - context_rows);
        let (keys, values) = self.cache.tensors();
        let scale = (head_dim as f64).powf(-0.5);
        let out = B::cached_attention(q, keys, values, ctx, scale);
        self.o_proj.forward(out.reshape([queries, q_width]))
    }

    /// Commit: moves the accepted rows of the block at `at` to contiguous positions.
    pub fn compact(&mut self, at: usize, keep: &[usize]) {
        self.cache.compact(at, keep);
    }
}

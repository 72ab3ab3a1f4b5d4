//! The self-attention layer of Qwen3 (and of the full-attention layers of the hybrids): fused
//! QKV projection, per-head q/k RMSNorm, rotary embedding, KV-cache write, attention over the
//! cache, output projection.

use burn_tensor::Tensor;
use ddtree_kernels::nn::{KvCache, Linear, RmsNorm};
use ddtree_kernels::{AttentionContext, KernelOps};

/// Head counts and sizes of one attention layer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeadShape {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

/// One attention layer with its KV cache.
#[derive(Debug)]
pub(crate) struct Attention<B: KernelOps> {
    qkv: Linear<B>,
    o_proj: Linear<B>,
    q_norm: RmsNorm<B>,
    k_norm: RmsNorm<B>,
    shape: HeadShape,
    cache: KvCache<B>,
}

impl<B: KernelOps> Attention<B> {
    pub(crate) fn new(
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

    /// `x: [n, hidden]` at the rows described by `ctx`; `cos`/`sin` are the rotary rows of the
    /// block's positions. Writes the block's keys and values at `ctx.prefix_len`.
    pub(crate) fn forward(
        &mut self,
        x: Tensor<B, 2>,
        cos: Tensor<B, 2>,
        sin: Tensor<B, 2>,
        ctx: &AttentionContext<'_>,
    ) -> Tensor<B, 2> {
        let HeadShape {
            heads,
            kv_heads,
            head_dim,
        } = self.shape;
        let n = x.dims()[0];
        let (q_width, kv_width) = (heads * head_dim, kv_heads * head_dim);
        let qkv = self.qkv.forward(x);
        let q = qkv
            .clone()
            .slice([0..n, 0..q_width])
            .reshape([n, heads, head_dim]);
        let k = qkv
            .clone()
            .slice([0..n, q_width..q_width + kv_width])
            .reshape([n, kv_heads, head_dim]);
        let v = qkv
            .slice([0..n, q_width + kv_width..q_width + 2 * kv_width])
            .reshape([n, kv_heads, head_dim]);

        let q = B::rope(self.q_norm.forward_heads(q), cos.clone(), sin.clone());
        let k = B::rope(self.k_norm.forward_heads(k), cos, sin);
        self.cache.write(k, v, ctx.prefix_len);
        let (keys, values) = self.cache.tensors();
        let scale = (head_dim as f64).powf(-0.5);
        let out = B::cached_attention(q, keys, values, ctx, scale);
        self.o_proj.forward(out.reshape([n, q_width]))
    }

    /// Commit: moves the accepted rows of the block at `at` to contiguous positions.
    pub(crate) fn compact(&mut self, at: usize, keep: &[usize]) {
        self.cache.compact(at, keep);
    }
}

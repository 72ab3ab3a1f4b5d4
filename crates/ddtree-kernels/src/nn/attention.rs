//! The Qwen-family attention layer shared by the targets and the DFlash drafter: fused QKV
//! projection, per-head q/k RMSNorm, rotary embedding, KV-cache write, attention over the
//! cache, optional sigmoid output gate (Qwen3.5/3.6), output projection.

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

/// What the step between the QKV projection and attention needs besides the projection and the
/// cache ([`KernelOps::qk_norm_rope_write`]): where queries, keys and values sit in a projection
/// row, the per-head norms and the rotary rows.
#[derive(Clone, Debug)]
pub struct QkvRows<B: KernelOps> {
    /// Heads and dims per head.
    pub shape: HeadShape,
    /// The first column of the keys (the values follow them; the queries start at column 0, and
    /// gated layers keep their gate in between).
    pub k_at: usize,
    /// Leading rows that bring keys and values only (the drafter's context rows): the queries
    /// are the rows after them.
    pub context_rows: usize,
    /// Per-head query RMSNorm.
    pub q_norm: RmsNorm<B>,
    /// Per-head key RMSNorm.
    pub k_norm: RmsNorm<B>,
    /// Rotary cos of every row, `[n, rotary_dim / 2]`.
    pub cos: Tensor<B, 2>,
    /// Rotary sin of every row, `[n, rotary_dim / 2]`.
    pub sin: Tensor<B, 2>,
}

/// One attention layer with its KV cache.
#[derive(Clone, Debug)]
pub struct Attention<B: KernelOps> {
    /// `[q | gate | k | v]` (no gate rows when ungated).
    qkv: Linear<B>,
    gated: bool,
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
            gated: false,
            o_proj: Linear::new(o_proj),
            q_norm,
            k_norm,
            shape,
            cache,
        }
    }

    /// The gated attention of Qwen3.5/3.6: `q_proj` is `[heads · 2 · head_dim, hidden]`, each
    /// head's rows holding its query then its gate (a per-head interleave), and the attention
    /// output is multiplied by `sigmoid(gate)` before `o_proj`. The rows are regrouped here, once,
    /// into all queries then all gates, so the forward slices contiguous columns.
    pub fn new_gated(
        [q_proj, k_proj, v_proj, o_proj]: [Tensor<B, 2>; 4],
        q_norm: RmsNorm<B>,
        k_norm: RmsNorm<B>,
        shape: HeadShape,
        cache: KvCache<B>,
    ) -> Self {
        let (heads, head_dim) = (shape.heads, shape.head_dim);
        let hidden = q_proj.dims()[1];
        let per_head = q_proj.reshape([heads, 2 * head_dim, hidden]);
        let half = |range: std::ops::Range<usize>| {
            per_head
                .clone()
                .slice([0..heads, range, 0..hidden])
                .reshape([heads * head_dim, hidden])
        };
        let (query, gate) = (half(0..head_dim), half(head_dim..2 * head_dim));
        Self {
            qkv: Linear::fused(vec![query, gate, k_proj, v_proj]),
            gated: true,
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
    /// rows. Returns `[n - context_rows, heads · head_dim]`, gated where the layer is, before the
    /// output projection [`Attention::o_proj`], which callers fuse with what follows it
    /// ([`RmsNorm::add_linear_forward`]).
    pub fn attend(
        &mut self,
        x: Tensor<B, 2>,
        cos: Tensor<B, 2>,
        sin: Tensor<B, 2>,
        ctx: &AttentionContext<'_>,
        context_rows: usize,
    ) -> Tensor<B, 2> {
        let HeadShape { heads, head_dim, .. } = self.shape;
        let n = x.dims()[0];
        let queries = n - context_rows;
        let q_width = heads * head_dim;
        let rows = QkvRows {
            shape: self.shape,
            k_at: if self.gated { 2 * q_width } else { q_width },
            context_rows,
            q_norm: self.q_norm.clone(),
            k_norm: self.k_norm.clone(),
            cos,
            sin,
        };
        let scale = (head_dim as f64).powf(-0.5);
        // The gate needs the projection itself; without one, the projection, the rotation and
        // the attention may run as one op.
        if !self.gated {
            return self
                .cache
                .attend_projected(x, &self.qkv, rows, ctx, scale)
                .reshape([queries, q_width]);
        }
        let qkv = self.qkv.forward(x);
        let gate = qkv.clone().slice([context_rows..n, q_width..2 * q_width]);
        let q = self.cache.write_qkv(qkv, rows, ctx.prefix_len - context_rows);
        let (keys, values) = self.cache.tensors();
        let out = B::cached_attention(q, keys, values, ctx, scale).reshape([queries, q_width]);
        B::sigmoid_mul(out, gate)
    }

    /// The output projection `o_proj`.
    pub fn o_proj(&self) -> &Linear<B> {
        &self.o_proj
    }

    /// The layer's KV cache (a commit compacts every layer's at once:
    /// [`KvCache::compact_layers`]).
    pub fn cache_mut(&mut self) -> &mut KvCache<B> {
        &mut self.cache
    }
}

//! Compute primitives for the DDTree models.
//!
//! [`KernelOps`] is a burn backend extension: every method has a default body that calls the
//! plain-burn-ops reference in [`mod@reference`], so any burn backend (the CPU `NdArray` one used in
//! CI, in f32 or f64) runs the models unchanged. A backend with fused kernels (the CubeCL CUDA
//! backend) overrides the methods it accelerates, and its tests compare against [`mod@reference`].
//!
//! [`nn`] builds the layers the models share (linear, RMSNorm, SwiGLU MLP, rotary table, KV
//! cache, attention with an optional output gate) from these primitives. The Gated DeltaNet
//! primitives (the conv stage — causal conv over gathered windows, per-head L2 norm —, gates, the
//! parent-indexed gated delta rule, gated RMSNorm) serve the hybrid Qwen3.5/3.6 targets.
//!
//! ```
//! use burn_ndarray::NdArray;
//! use burn_tensor::Tensor;
//! use ddtree_kernels::KernelOps;
//!
//! type B = NdArray<f32>;
//! let device = Default::default();
//! let x = Tensor::<B, 2>::from_floats([[3.0, 4.0]], &device);
//! let w = Tensor::<B, 1>::from_floats([1.0, 2.0], &device);
//! let y = B::rms_norm(x, w, 0.0).into_data().to_vec::<f32>().unwrap();
//! // rms([3, 4]) = sqrt(12.5)
//! assert!((y[0] - 3.0 / 12.5f32.sqrt()).abs() < 1e-6);
//! assert!((y[1] - 8.0 / 12.5f32.sqrt()).abs() < 1e-6);
//! ```

#[cfg(feature = "cube")]
pub mod cube;
pub mod mask;
pub mod nn;
pub mod reference;

use burn_tensor::backend::Backend;
use burn_tensor::{Int, Tensor, TensorData};

pub use mask::{AncestorBits, AttentionContext, Visibility};

/// A layer's key and value caches, `[kv_heads, capacity, head_dim]` each.
pub type LayerCaches<B> = (Tensor<B, 3>, Tensor<B, 3>);

/// Reads an integer tensor (token ids) back to the host.
pub fn host_ids<B: Backend, const D: usize>(ids: Tensor<B, D, Int>) -> Vec<u32> {
    ids_of(ids.into_data())
}

/// Reads a float tensor back to the host as f32.
pub fn host_f32<B: Backend, const D: usize>(values: Tensor<B, D>) -> Vec<f32> {
    f32_of(values.into_data())
}

/// `rows` (row indices or token ids) as an integer tensor on `device`, the index `select` takes.
pub fn index_tensor<B: Backend>(
    rows: impl IntoIterator<Item = usize>,
    device: &B::Device,
) -> Tensor<B, 1, Int> {
    let rows: Vec<i64> = rows.into_iter().map(|r| r as i64).collect();
    let len = rows.len();
    Tensor::from_data(TensorData::new(rows, [len]).convert::<B::IntElem>(), device)
}

/// Token ids from the data of an integer tensor.
fn ids_of(data: TensorData) -> Vec<u32> {
    data.convert::<i64>()
        .to_vec::<i64>()
        .expect("converted to i64 just above")
        .into_iter()
        .map(|t| t as u32)
        .collect()
}

/// f32 values from the data of a float tensor.
fn f32_of(data: TensorData) -> Vec<f32> {
    data.convert::<f32>()
        .to_vec::<f32>()
        .expect("converted to f32 just above")
}

/// Head counts and sizes of a Gated DeltaNet layer; its conv channels are `[q | k | v]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GdnHeads {
    /// Query/key heads (`Hk`).
    pub key_heads: usize,
    /// Value heads (`Hv`, a multiple of `Hk`).
    pub value_heads: usize,
    /// Dims per query/key head (`Dk`).
    pub key_dim: usize,
    /// Dims per value head (`Dv`).
    pub value_dim: usize,
}

impl GdnHeads {
    /// Width of q (and of k): `Hk · Dk`.
    pub fn key_width(&self) -> usize {
        self.key_heads * self.key_dim
    }

    /// Width of v: `Hv · Dv`.
    pub fn value_width(&self) -> usize {
        self.value_heads * self.value_dim
    }

    /// Conv channels `C = 2 · Hk · Dk + Hv · Dv`.
    pub fn channels(&self) -> usize {
        2 * self.key_width() + self.value_width()
    }
}

/// What [`KernelOps::gdn_conv_qkv`] gives: the recurrence's inputs and the conv rows to keep.
#[derive(Clone, Debug)]
pub struct GdnConv<B: Backend> {
    /// `[n, Hk, Dk]`, L2-normalised per head and scaled by `1/√Dk`.
    pub q: Tensor<B, 3>,
    /// `[n, Hk, Dk]`, L2-normalised per head.
    pub k: Tensor<B, 3>,
    /// `[n, Hv, Dv]`.
    pub v: Tensor<B, 3>,
    /// `[K − 1, C]`: the last `K − 1` pre-conv rows of `[history; block]` (the committed rows
    /// after a sequence block).
    pub history: Tensor<B, 2>,
}

/// The operations the models call. Defaults are the [`mod@reference`] implementations; see each
/// reference function for the exact shapes and semantics.
pub trait KernelOps: Backend {
    /// RMSNorm of `[rows, hidden]` rows with `weight: [hidden]` ([`reference::rms_norm`]).
    fn rms_norm(x: Tensor<Self, 2>, weight: Tensor<Self, 1>, eps: f64) -> Tensor<Self, 2> {
        reference::rms_norm(x, weight, eps)
    }

    /// `x + delta` and its RMSNorm, in one pass over the rows ([`reference::add_rms_norm`]).
    fn add_rms_norm(
        x: Tensor<Self, 2>,
        delta: Tensor<Self, 2>,
        weight: Tensor<Self, 1>,
        eps: f64,
    ) -> (Tensor<Self, 2>, Tensor<Self, 2>) {
        reference::add_rms_norm(x, delta, weight, eps)
    }

    /// Per-head q/k RMSNorm, RoPE and the KV-cache write, from the fused QKV projection
    /// `qkv: [n, ·]` ([`reference::qk_norm_rope_write`]). Returns the queries and the updated
    /// key and value caches.
    fn qk_norm_rope_write(
        qkv: Tensor<Self, 2>,
        rows: nn::QkvRows<Self>,
        keys: Tensor<Self, 3>,
        values: Tensor<Self, 3>,
        at: usize,
    ) -> (Tensor<Self, 3>, Tensor<Self, 3>, Tensor<Self, 3>) {
        reference::qk_norm_rope_write(qkv, rows, keys, values, at)
    }

    /// The fused QKV projection `x · Wᵀ` followed by [`KernelOps::qk_norm_rope_write`], which a
    /// backend may fuse (a k-sliced projection's partial sums read by the rotation itself).
    fn linear_qk_norm_rope_write(
        x: Tensor<Self, 2>,
        weight: Tensor<Self, 2>,
        rows: nn::QkvRows<Self>,
        keys: Tensor<Self, 3>,
        values: Tensor<Self, 3>,
        at: usize,
    ) -> (Tensor<Self, 3>, Tensor<Self, 3>, Tensor<Self, 3>) {
        Self::qk_norm_rope_write(<Self as KernelOps>::linear(x, weight), rows, keys, values, at)
    }

    /// [`KernelOps::linear_qk_norm_rope_write`] at row `ctx.prefix_len − context_rows`, then
    /// [`KernelOps::cached_attention`] of its queries over the updated caches, which a backend may
    /// fuse (an AR step's rotation inside its attention launch). Returns the attention output
    /// `[queries, heads, head_dim]` and the updated key and value caches.
    #[allow(clippy::too_many_arguments)]
    fn linear_qk_norm_rope_attention(
        x: Tensor<Self, 2>,
        weight: Tensor<Self, 2>,
        rows: nn::QkvRows<Self>,
        keys: Tensor<Self, 3>,
        values: Tensor<Self, 3>,
        ctx: &AttentionContext<'_>,
        scale: f64,
    ) -> (Tensor<Self, 3>, Tensor<Self, 3>, Tensor<Self, 3>) {
        linear_qk_norm_rope_attention_unfused(x, weight, rows, keys, values, ctx, scale)
    }

    /// `x · Wᵀ` for a Hugging Face `[out, in]` weight ([`reference::linear`]).
    fn linear(x: Tensor<Self, 2>, weight: Tensor<Self, 2>) -> Tensor<Self, 2> {
        reference::linear(x, weight)
    }

    /// `residual + x · Wᵀ` and its RMSNorm with `norm_weight`: a block's output projection (`o_proj`,
    /// `down_proj`) with the residual add and the next pre-norm — [`KernelOps::linear`] then
    /// [`KernelOps::add_rms_norm`], which a backend may fuse. Returns the sum and its normalised
    /// rows.
    fn linear_add_rms_norm(
        x: Tensor<Self, 2>,
        weight: Tensor<Self, 2>,
        residual: Tensor<Self, 2>,
        norm_weight: Tensor<Self, 1>,
        eps: f64,
    ) -> (Tensor<Self, 2>, Tensor<Self, 2>) {
        linear_add_rms_norm_unfused(x, weight, residual, norm_weight, eps)
    }

    /// `silu(gate) ⊙ up` ([`reference::silu_mul`]).
    fn silu_mul(gate: Tensor<Self, 2>, up: Tensor<Self, 2>) -> Tensor<Self, 2> {
        reference::silu_mul(gate, up)
    }

    /// The SwiGLU half of an MLP: `silu(x · Wgᵀ) ⊙ (x · Wuᵀ)` for a fused gate/up weight
    /// `[2 · inter, in]` (gate rows first), `[rows, in] → [rows, inter]` — [`KernelOps::linear`]
    /// then [`KernelOps::silu_mul`] on the two halves.
    fn gate_up_silu(x: Tensor<Self, 2>, gate_up: Tensor<Self, 2>) -> Tensor<Self, 2> {
        gate_up_silu_unfused(x, gate_up)
    }

    /// Reads `values` and `ids` back to the host ([`host_f32`], [`host_ids`]) — in one round
    /// trip where the backend can (the drafter's top-K: one wait for the device per draft, not
    /// two).
    fn host_values_and_ids(values: Tensor<Self, 2>, ids: Tensor<Self, 2, Int>) -> (Vec<f32>, Vec<u32>) {
        (host_f32(values), host_ids(ids))
    }

    /// NeoX rotary embedding over the first `2·cos.dims()[1]` dims ([`reference::rope`]).
    fn rope(x: Tensor<Self, 3>, cos: Tensor<Self, 2>, sin: Tensor<Self, 2>) -> Tensor<Self, 3> {
        reference::rope(x, cos, sin)
    }

    /// Writes `[n, kv_heads, head_dim]` rows into a `[kv_heads, capacity, head_dim]` cache at
    /// row `at` ([`reference::write_cache_rows`]).
    fn write_cache_rows(cache: Tensor<Self, 3>, rows: Tensor<Self, 3>, at: usize) -> Tensor<Self, 3> {
        reference::write_cache_rows(cache, rows, at)
    }

    /// Moves rows `at + keep[i]` to `at + i` in the key and value caches of every layer (a layer's
    /// two of one shape): a commit's compaction in one call ([`reference::compact_kv_rows`]).
    fn compact_kv_rows(caches: Vec<LayerCaches<Self>>, at: usize, keep: &[usize]) -> Vec<LayerCaches<Self>> {
        reference::compact_kv_rows(caches, at, keep)
    }

    /// Grouped-query attention over a KV cache with the visibility of `ctx`
    /// ([`reference::cached_attention`]).
    fn cached_attention(
        q: Tensor<Self, 3>,
        k_cache: Tensor<Self, 3>,
        v_cache: Tensor<Self, 3>,
        ctx: &AttentionContext<'_>,
        scale: f64,
    ) -> Tensor<Self, 3> {
        reference::cached_attention(q, k_cache, v_cache, ctx, scale)
    }

    /// `x ⊙ sigmoid(gate)`, the gated attention's output gate ([`reference::sigmoid_mul`]).
    fn sigmoid_mul(x: Tensor<Self, 2>, gate: Tensor<Self, 2>) -> Tensor<Self, 2> {
        reference::sigmoid_mul(x, gate)
    }

    /// Gated DeltaNet decay `g` and `β` ([`reference::gdn_gates`]) from the layer's input
    /// projection `proj: [rows, ·]`: `b` is its columns `at..at + heads` and `a` the `heads`
    /// columns after them (`heads` = `a_log`'s length). The projection and an offset rather than
    /// column slices, so that a backend can read the columns in place: burn's CubeCL backends
    /// copy a slice whose byte offsets are not multiples of the memory alignment (512 on CUDA).
    fn gdn_gates(
        proj: Tensor<Self, 2>,
        at: usize,
        a_log: Tensor<Self, 1>,
        dt_bias: Tensor<Self, 1>,
    ) -> (Tensor<Self, 2>, Tensor<Self, 2>) {
        gdn_gates_sliced(proj, at, a_log, dt_bias)
    }

    /// The Gated DeltaNet's conv stage over `[history; first C columns of block]`: causal conv +
    /// SiLU over gathered row windows, per-head L2 norm of q and k, q scaled by `1/√Dk`, and the
    /// last `K − 1` rows ([`reference::gdn_conv_qkv`]).
    fn gdn_conv_qkv(
        history: Tensor<Self, 2>,
        block: Tensor<Self, 2>,
        windows: &[usize],
        weight: Tensor<Self, 2>,
        heads: GdnHeads,
    ) -> GdnConv<Self> {
        reference::gdn_conv_qkv(history, block, windows, weight, heads)
    }

    /// The committed conv rows after a commit keeps the `accepted` rows of a block: the last
    /// `K − 1` of `[history; accepted rows]` ([`reference::gdn_conv_commit`]).
    fn gdn_conv_commit(
        history: Tensor<Self, 2>,
        block: Tensor<Self, 2>,
        accepted: &[usize],
    ) -> Tensor<Self, 2> {
        reference::gdn_conv_commit(history, block, accepted)
    }

    /// The gated delta rule over parent-linked rows (a sequence or a tree), returning every row's
    /// output and the state after the last row; the input state is left untouched
    /// ([`reference::gated_delta_rule`]).
    fn gated_delta_rule(
        q: Tensor<Self, 3>,
        k: Tensor<Self, 3>,
        v: Tensor<Self, 3>,
        g: Tensor<Self, 2>,
        beta: Tensor<Self, 2>,
        state: Tensor<Self, 3>,
        parents: &[i32],
    ) -> (Tensor<Self, 3>, Tensor<Self, 3>) {
        reference::gated_delta_rule(q, k, v, g, beta, state, parents)
    }

    /// The state after the gated delta rule runs along `rows` of a block as a chain — the first
    /// row continues `state`, each later one the row before it — as a commit replays the
    /// accepted path of a verified tree ([`reference::gated_delta_rule_along`]).
    fn gated_delta_rule_along(
        q: Tensor<Self, 3>,
        k: Tensor<Self, 3>,
        v: Tensor<Self, 3>,
        g: Tensor<Self, 2>,
        beta: Tensor<Self, 2>,
        state: Tensor<Self, 3>,
        rows: &[usize],
    ) -> Tensor<Self, 3> {
        reference::gated_delta_rule_along(q, k, v, g, beta, state, rows)
    }

    /// `rms_norm(x, weight) ⊙ silu(z)` over each `weight`-wide group of a row
    /// ([`reference::gated_rms_norm`]), `z` the columns `z_at..z_at + width` of `proj: [rows, ·]`
    /// (`width` = `x`'s; the layer's input projection, read in place where the backend can, as in
    /// [`KernelOps::gdn_gates`]).
    fn gated_rms_norm(
        x: Tensor<Self, 2>,
        proj: Tensor<Self, 2>,
        z_at: usize,
        weight: Tensor<Self, 1>,
        eps: f64,
    ) -> Tensor<Self, 2> {
        gated_rms_norm_sliced(x, proj, z_at, weight, eps)
    }

    /// Row-wise argmax of `[rows, vocab]` logits ([`reference::argmax`]).
    fn argmax(logits: Tensor<Self, 2>) -> Tensor<Self, 1, Int> {
        reference::argmax(logits)
    }

    /// Row-wise top-`k` of the log-softmax, descending ([`reference::top_k_log_softmax`]).
    fn top_k_log_softmax(logits: Tensor<Self, 2>, k: usize) -> (Tensor<Self, 2>, Tensor<Self, 2, Int>) {
        reference::top_k_log_softmax(logits, k)
    }
}

/// The CPU backend runs the reference implementations.
impl<E, I, Q> KernelOps for burn_ndarray::NdArray<E, I, Q>
where
    E: burn_ndarray::FloatNdArrayElement,
    I: burn_ndarray::IntNdArrayElement,
    Q: burn_ndarray::QuantElement,
    burn_ndarray::NdArrayTensor: From<burn_ndarray::SharedArray<E>> + From<burn_ndarray::SharedArray<I>>,
{
}

/// [`KernelOps::linear_add_rms_norm`] as two ops: the projection, then the add and norm.
pub fn linear_add_rms_norm_unfused<B: KernelOps>(
    x: Tensor<B, 2>,
    weight: Tensor<B, 2>,
    residual: Tensor<B, 2>,
    norm_weight: Tensor<B, 1>,
    eps: f64,
) -> (Tensor<B, 2>, Tensor<B, 2>) {
    B::add_rms_norm(residual, <B as KernelOps>::linear(x, weight), norm_weight, eps)
}

/// [`KernelOps::linear_qk_norm_rope_attention`] as two ops: the projection with its rotation and
/// cache write, then the attention.
#[allow(clippy::too_many_arguments)]
pub fn linear_qk_norm_rope_attention_unfused<B: KernelOps>(
    x: Tensor<B, 2>,
    weight: Tensor<B, 2>,
    rows: nn::QkvRows<B>,
    keys: Tensor<B, 3>,
    values: Tensor<B, 3>,
    ctx: &AttentionContext<'_>,
    scale: f64,
) -> (Tensor<B, 3>, Tensor<B, 3>, Tensor<B, 3>) {
    let at = ctx.prefix_len - rows.context_rows;
    let (q, keys, values) = B::linear_qk_norm_rope_write(x, weight, rows, keys, values, at);
    let out = B::cached_attention(q, keys.clone(), values.clone(), ctx, scale);
    (out, keys, values)
}

/// [`KernelOps::gate_up_silu`] as two ops: the fused projection, then the activation on its
/// halves (read in place).
pub fn gate_up_silu_unfused<B: KernelOps>(x: Tensor<B, 2>, gate_up: Tensor<B, 2>) -> Tensor<B, 2> {
    let rows = x.dims()[0];
    let inter = gate_up.dims()[0] / 2;
    let both = <B as KernelOps>::linear(x, gate_up);
    let gate = both.clone().slice([0..rows, 0..inter]);
    let up = both.slice([0..rows, inter..2 * inter]);
    B::silu_mul(gate, up)
}

/// [`KernelOps::gdn_gates`] on column slices: the `b` columns `at..at + heads`, the `a` columns
/// after them, then the reference.
pub fn gdn_gates_sliced<B: Backend>(
    proj: Tensor<B, 2>,
    at: usize,
    a_log: Tensor<B, 1>,
    dt_bias: Tensor<B, 1>,
) -> (Tensor<B, 2>, Tensor<B, 2>) {
    let heads = a_log.dims()[0];
    let b = columns(proj.clone(), at, heads);
    reference::gdn_gates(columns(proj, at + heads, heads), b, a_log, dt_bias)
}

/// [`KernelOps::gated_rms_norm`] on a column slice: `z` is the columns `z_at..z_at + width` of
/// `proj`, then the reference.
pub fn gated_rms_norm_sliced<B: Backend>(
    x: Tensor<B, 2>,
    proj: Tensor<B, 2>,
    z_at: usize,
    weight: Tensor<B, 1>,
    eps: f64,
) -> Tensor<B, 2> {
    let width = x.dims()[1];
    reference::gated_rms_norm(x, columns(proj, z_at, width), weight, eps)
}

/// Columns `from..from + width` of `t: [rows, ·]`.
fn columns<B: Backend>(t: Tensor<B, 2>, from: usize, width: usize) -> Tensor<B, 2> {
    let rows = t.dims()[0];
    t.slice([0..rows, from..from + width])
}

//! Layers shared by the target models and the drafter, built only from [`KernelOps`] calls so a
//! backend's fused kernels apply everywhere.

mod attention;

use burn_tensor::{Tensor, TensorData};

pub use attention::{Attention, HeadShape, QkvRows};

use crate::{AttentionContext, KernelOps};

/// A bias-free linear layer holding a Hugging Face `[out, in]` weight.
#[derive(Clone, Debug)]
pub struct Linear<B: KernelOps> {
    weight: Tensor<B, 2>,
}

impl<B: KernelOps> Linear<B> {
    /// Wraps an `[out, in]` weight.
    pub fn new(weight: Tensor<B, 2>) -> Self {
        Self { weight }
    }

    /// Stacks several `[out_i, in]` weights into one `[Σ out_i, in]` projection, so one launch
    /// computes them all (QKV, gate+up).
    pub fn fused(weights: Vec<Tensor<B, 2>>) -> Self {
        Self::new(Tensor::cat(weights, 0))
    }

    /// `[rows, in] → [rows, out]`.
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        <B as KernelOps>::linear(x, self.weight.clone())
    }

    /// The `[out, in]` weight.
    pub fn weight(&self) -> &Tensor<B, 2> {
        &self.weight
    }
}

/// RMSNorm with a plain weight. Zero-centred `(1 + w)` checkpoints add one at load time.
#[derive(Clone, Debug)]
pub struct RmsNorm<B: KernelOps> {
    weight: Tensor<B, 1>,
    eps: f64,
}

impl<B: KernelOps> RmsNorm<B> {
    /// A norm with `weight: [dim]`.
    pub fn new(weight: Tensor<B, 1>, eps: f64) -> Self {
        Self { weight, eps }
    }

    /// Normalises each row of `[rows, dim]`.
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        B::rms_norm(x, self.weight.clone(), self.eps)
    }

    /// The residual add before this norm: returns `x + delta` and its normalised rows.
    pub fn add_forward(&self, x: Tensor<B, 2>, delta: Tensor<B, 2>) -> (Tensor<B, 2>, Tensor<B, 2>) {
        B::add_rms_norm(x, delta, self.weight.clone(), self.eps)
    }

    /// The residual add of a block's output projection before this norm: returns
    /// `x + linear(input)` and its normalised rows ([`KernelOps::linear_add_rms_norm`]).
    pub fn add_linear_forward(
        &self,
        x: Tensor<B, 2>,
        input: Tensor<B, 2>,
        linear: &Linear<B>,
    ) -> (Tensor<B, 2>, Tensor<B, 2>) {
        B::linear_add_rms_norm(input, linear.weight().clone(), x, self.weight.clone(), self.eps)
    }

    /// The `[dim]` weight.
    pub fn weight(&self) -> &Tensor<B, 1> {
        &self.weight
    }

    /// The ε added to the mean square.
    pub fn eps(&self) -> f64 {
        self.eps
    }

    /// Normalises each `[dim]` vector of `[rows, heads, dim]` (per-head q/k norms).
    pub fn forward_heads(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let [rows, heads, dim] = x.dims();
        self.forward(x.reshape([rows * heads, dim]))
            .reshape([rows, heads, dim])
    }
}

/// The SwiGLU MLP `down(silu(gate(x)) ⊙ up(x))`, with gate and up fused into one projection.
#[derive(Clone, Debug)]
pub struct Mlp<B: KernelOps> {
    gate_up: Linear<B>,
    down: Linear<B>,
}

impl<B: KernelOps> Mlp<B> {
    /// From the three Hugging Face weights (`gate_proj`, `up_proj`: `[inter, hidden]`,
    /// `down_proj`: `[hidden, inter]`).
    pub fn new(gate: Tensor<B, 2>, up: Tensor<B, 2>, down: Tensor<B, 2>) -> Self {
        Self {
            gate_up: Linear::fused(vec![gate, up]),
            down: Linear::new(down),
        }
    }

    /// `[rows, hidden] → [rows, hidden]`.
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.down.forward(self.activate(x))
    }

    /// The MLP up to `down_proj`: `silu(gate(x)) ⊙ up(x)`, `[rows, hidden] → [rows, inter]`.
    pub fn activate(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        B::gate_up_silu(x, self.gate_up.weight().clone())
    }

    /// The down projection.
    pub fn down(&self) -> &Linear<B> {
        &self.down
    }
}

/// Precomputed rotary cos/sin for every position up to a maximum, `[positions, rotary_dim / 2]`.
#[derive(Clone, Debug)]
pub struct RopeTable<B: KernelOps> {
    cos: Tensor<B, 2>,
    sin: Tensor<B, 2>,
}

impl<B: KernelOps> RopeTable<B> {
    /// Builds the table from the inverse frequencies (one per rotated pair) and the attention
    /// scaling that multiplies cos and sin (1 except for YaRN-style scaling). Angles are formed in
    /// f32 as Hugging Face transformers does, so f32 results match it closely.
    pub fn new(inv_freq: &[f32], attention_scaling: f32, positions: usize, device: &B::Device) -> Self {
        let half = inv_freq.len();
        let mut cos = Vec::with_capacity(positions * half);
        let mut sin = Vec::with_capacity(positions * half);
        for pos in 0..positions {
            for &f in inv_freq {
                let angle = (pos as f32 * f) as f64;
                cos.push((angle.cos() as f32 * attention_scaling) as f64);
                sin.push((angle.sin() as f32 * attention_scaling) as f64);
            }
        }
        let to_tensor = |values: Vec<f64>| {
            Tensor::<B, 2>::from_data(
                TensorData::new(values, [positions, half]).convert::<B::FloatElem>(),
                device,
            )
        };
        Self {
            cos: to_tensor(cos),
            sin: to_tensor(sin),
        }
    }

    /// Number of positions covered.
    pub fn positions(&self) -> usize {
        self.cos.dims()[0]
    }

    /// cos and sin rows for `positions` (each `< self.positions()`), as `[n, rotary_dim / 2]`.
    pub fn gather(&self, positions: &[usize]) -> (Tensor<B, 2>, Tensor<B, 2>) {
        let index = crate::index_tensor(positions.iter().copied(), &self.cos.device());
        (
            self.cos.clone().select(0, index.clone()),
            self.sin.clone().select(0, index),
        )
    }

    /// Applies the rotation to `[n, heads, head_dim]` rows at `positions`.
    pub fn apply(&self, x: Tensor<B, 3>, positions: &[usize]) -> Tensor<B, 3> {
        let (cos, sin) = self.gather(positions);
        B::rope(x, cos, sin)
    }
}

/// One attention layer's preallocated key and value cache, `[kv_heads, capacity, head_dim]`
/// each. Which rows are committed is the model's business.
#[derive(Clone, Debug)]
pub struct KvCache<B: KernelOps> {
    // Always `Some` between calls: taken while updating, so the update owns the only reference
    // and backends can write in place instead of copying the whole cache.
    keys_values: Option<(Tensor<B, 3>, Tensor<B, 3>)>,
}

impl<B: KernelOps> KvCache<B> {
    /// A zeroed cache of `capacity` rows.
    pub fn new(kv_heads: usize, capacity: usize, head_dim: usize, device: &B::Device) -> Self {
        let zeros = || Tensor::zeros([kv_heads, capacity, head_dim], device);
        Self {
            keys_values: Some((zeros(), zeros())),
        }
    }

    fn update(&mut self, f: impl FnOnce(Tensor<B, 3>, Tensor<B, 3>) -> (Tensor<B, 3>, Tensor<B, 3>)) {
        let (keys, values) = self.keys_values.take().expect("KvCache always holds its tensors");
        self.keys_values = Some(f(keys, values));
    }

    /// Rows the cache can hold.
    pub fn capacity(&self) -> usize {
        self.tensors().0.dims()[1]
    }

    /// Normalises and rotates the queries and keys of a fused QKV projection, writes the keys and
    /// values at rows `at..`, and returns the queries `[queries, heads, head_dim]`
    /// ([`KernelOps::qk_norm_rope_write`]).
    pub fn write_qkv(&mut self, qkv: Tensor<B, 2>, rows: QkvRows<B>, at: usize) -> Tensor<B, 3> {
        self.write_rows(|keys, values| B::qk_norm_rope_write(qkv, rows, keys, values, at))
    }

    /// [`KvCache::write_qkv`] of the projection `x · qkvᵀ`, then the attention of its queries over
    /// the cache, computed by one call ([`KernelOps::linear_qk_norm_rope_attention`]). Returns
    /// the attention output `[queries, heads, head_dim]`.
    pub fn attend_projected(
        &mut self,
        x: Tensor<B, 2>,
        qkv: &Linear<B>,
        rows: QkvRows<B>,
        ctx: &AttentionContext<'_>,
        scale: f64,
    ) -> Tensor<B, 3> {
        self.write_rows(|keys, values| {
            B::linear_qk_norm_rope_attention(x, qkv.weight().clone(), rows, keys, values, ctx, scale)
        })
    }

    /// Runs an op that takes the caches and returns its output (the queries, or the attention)
    /// with the updated caches; keeps the caches, returns the output.
    fn write_rows(
        &mut self,
        op: impl FnOnce(Tensor<B, 3>, Tensor<B, 3>) -> (Tensor<B, 3>, Tensor<B, 3>, Tensor<B, 3>),
    ) -> Tensor<B, 3> {
        let mut queries = None;
        self.update(|keys, values| {
            let (q, keys, values) = op(keys, values);
            queries = Some(q);
            (keys, values)
        });
        queries.expect("the update closure always runs")
    }

    /// Moves rows `at + keep[i]` to `at + i` (`keep` increasing) in each of `caches` (a model's
    /// layers): one [`KernelOps::compact_kv_rows`] call for all of them.
    pub fn compact_layers<'a>(caches: impl IntoIterator<Item = &'a mut Self>, at: usize, keep: &[usize])
    where
        B: 'a,
    {
        let mut caches: Vec<&mut Self> = caches.into_iter().collect();
        let taken = caches
            .iter_mut()
            .map(|c| c.keys_values.take().expect("KvCache always holds its tensors"))
            .collect();
        for (cache, compacted) in caches.into_iter().zip(B::compact_kv_rows(taken, at, keep)) {
            cache.keys_values = Some(compacted);
        }
    }

    /// The key and value tensors (cheap handles).
    pub fn tensors(&self) -> (Tensor<B, 3>, Tensor<B, 3>) {
        self.keys_values
            .clone()
            .expect("KvCache always holds its tensors")
    }
}

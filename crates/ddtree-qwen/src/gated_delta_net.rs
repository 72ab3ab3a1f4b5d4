//! The Gated DeltaNet token mixer of the Qwen3.5/3.6 hybrids (and of Qwen3-Next, whose fused
//! projections are regrouped at load time): input projections, a depthwise causal conv with SiLU
//! over the q/k/v channels, per-head L2-normalised q and k (q scaled by `1/√Dk`), the decay and
//! β gates, the gated delta rule, a gated RMSNorm and the output projection.
//!
//! **Caches.** The committed recurrent state `[Hv, Dk, Dv]` (in f32, as the reference model keeps
//! it) and the last `K − 1` pre-conv rows `[K − 1, C]`. Prefill runs the recurrence along the
//! sequence and commits at once.
//!
//! **Tree verify** leaves both untouched: every node's conv window is its own pre-conv row and
//! its nearest `K − 1` ancestors' (falling back to the committed rows), and its recurrent state
//! is its parent's advanced by one step (the root's parent is the committed state), so each node
//! sees exactly the context of its own path. What the commit needs is kept per node: the
//! pre-conv rows and the recurrence inputs (q, k, v, g, β).
//!
//! **Commit** replays the accepted path's recurrence from the committed state with those inputs
//! (the same op as verify, so the same state bit for bit) and takes the new conv rows from the
//! path's pre-conv rows. No per-node copy of the state is ever made: per verify round the layer
//! keeps `(2C + 2Hv)` values per node (Qwen3.6-27B: 82 KB in f32, 3.8 MiB per node over its 48
//! GDN layers) instead of a 3 MiB state per node and layer (147 MiB per node), plus, while one
//! layer runs, the states along one root-to-leaf path (at most `depth + 1`).

use burn_tensor::{DType, Tensor, TensorCreationOptions};
use ddtree_kernels::nn::{KvCache, Linear};
use ddtree_kernels::{GdnHeads, KernelOps, index_tensor};
use ddtree_weights::{GdnProjectionLayout, Qwen35Config, TensorSource};

use crate::decoder::{Block, Mixer, Weights};
use crate::error::Result;

/// Head counts and sizes of one Gated DeltaNet layer, and its conv kernel size `K`.
#[derive(Clone, Copy, Debug)]
struct GdnShape {
    heads: GdnHeads,
    kernel: usize,
}

/// What commit needs from the last verified block.
#[derive(Clone, Debug)]
struct Pending<B: KernelOps> {
    /// The block's input projection `[n, P]`, its pre-conv rows in the first `C` columns.
    block: Tensor<B, 2>,
    q: Tensor<B, 3>,
    k: Tensor<B, 3>,
    v: Tensor<B, 3>,
    g: Tensor<B, 2>,
    beta: Tensor<B, 2>,
}

/// One Gated DeltaNet layer with its caches.
#[derive(Clone, Debug)]
pub(crate) struct GatedDeltaNet<B: KernelOps> {
    /// `[qkv | z | b | a]`, one projection.
    in_proj: Linear<B>,
    /// `[C, K]`.
    conv_weight: Tensor<B, 2>,
    a_log: Tensor<B, 1>,
    dt_bias: Tensor<B, 1>,
    /// The gated norm's plain weight `[Dv]`, shared by the value heads.
    norm_weight: Tensor<B, 1>,
    eps: f64,
    out_proj: Linear<B>,
    shape: GdnShape,
    /// Committed recurrent state `[Hv, Dk, Dv]`, in f32.
    state: Tensor<B, 3>,
    /// Committed last `K − 1` pre-conv rows `[K − 1, C]`.
    conv_rows: Tensor<B, 2>,
    pending: Option<Pending<B>>,
}

impl<B: KernelOps> GatedDeltaNet<B> {
    /// Loads `{prefix}.*` (e.g. `layers.0.linear_attn`) in the config's projection layout.
    pub(crate) fn load<S: TensorSource>(
        w: &Weights<'_, B, S>,
        prefix: &str,
        cfg: &Qwen35Config,
    ) -> Result<Self> {
        let h = GdnHeads {
            key_heads: cfg.linear_num_key_heads,
            value_heads: cfg.linear_num_value_heads,
            key_dim: cfg.linear_key_head_dim,
            value_dim: cfg.linear_value_head_dim,
        };
        let shape = GdnShape {
            heads: h,
            kernel: cfg.linear_conv_kernel_dim,
        };
        let (hidden, c, heads) = (cfg.hidden_size, h.channels(), h.value_heads);
        let name = |n: &str| format!("{prefix}.{n}");
        let in_proj = match cfg.gdn_layout {
            GdnProjectionLayout::Separate => Linear::fused(vec![
                w.linear(&name("in_proj_qkv"), c, hidden)?,
                w.linear(&name("in_proj_z"), h.value_width(), hidden)?,
                w.linear(&name("in_proj_b"), heads, hidden)?,
                w.linear(&name("in_proj_a"), heads, hidden)?,
            ]),
            GdnProjectionLayout::FusedGrouped => {
                let qkvz = w.linear(&name("in_proj_qkvz"), c + h.value_width(), hidden)?;
                let ba = w.linear(&name("in_proj_ba"), 2 * heads, hidden)?;
                let (qkvz_order, ba_order) = ungroup(h);
                Linear::fused(vec![select_rows(qkvz, &qkvz_order), select_rows(ba, &ba_order)])
            }
        };
        let conv = w.tensor(&name("conv1d.weight"), [c, 1, shape.kernel])?;
        let device = w.device;
        Ok(Self {
            in_proj,
            conv_weight: conv.reshape([c, shape.kernel]),
            a_log: w.vector(&name("A_log"), heads)?,
            dt_bias: w.vector(&name("dt_bias"), heads)?,
            norm_weight: w.vector(&name("norm.weight"), h.value_dim)?,
            eps: w.eps,
            out_proj: Linear::new(w.linear(&name("out_proj"), hidden, h.value_width())?),
            shape,
            // f32 whatever the activations' type, as in the reference model: the state then
            // rounds the same way whether rows arrive one per AR step or as a verified block.
            state: Tensor::zeros(
                [heads, h.key_dim, h.value_dim],
                TensorCreationOptions::new(device.clone()).with_dtype(DType::F32),
            ),
            conv_rows: Tensor::zeros([shape.kernel - 1, c], device),
            pending: None,
        })
    }
}

impl<B: KernelOps> Mixer<B> for GatedDeltaNet<B> {
    fn mix(&mut self, x: Tensor<B, 2>, block: &Block<'_, B>) -> Tensor<B, 2> {
        let s = self.shape;
        let n = x.dims()[0];
        let h = s.heads;
        let (c, vw) = (h.channels(), h.value_width());
        // `[conv channels | z | b | a]` per row; the ops read their columns in place.
        let proj = self.in_proj.forward(x);

        let windows = block
            .conv_windows
            .get_or_init(|| conv_windows(block.parents, s.kernel));
        // The block's pre-conv rows are the projection's first C columns, read in place.
        let conv = B::gdn_conv_qkv(
            self.conv_rows.clone(),
            proj.clone(),
            windows,
            self.conv_weight.clone(),
            h,
        );
        let (q, k, v) = (conv.q, conv.k, conv.v);
        let (g, beta) = B::gdn_gates(proj.clone(), c + vw, self.a_log.clone(), self.dt_bias.clone());

        let (out, last) = B::gated_delta_rule(
            q.clone(),
            k.clone(),
            v.clone(),
            g.clone(),
            beta.clone(),
            self.state.clone(),
            block.parents,
        );
        if block.commits {
            // A sequence: the new conv rows are the last K − 1 of the history and the block.
            self.state = last;
            self.conv_rows = conv.history;
            self.pending = None;
        } else {
            self.pending = Some(Pending {
                block: proj.clone(),
                q,
                k,
                v,
                g,
                beta,
            });
        }
        // Normalised per value head, gated by the projection's `z` columns.
        B::gated_rms_norm(out.reshape([n, vw]), proj, c, self.norm_weight.clone(), self.eps)
    }

    fn out_proj(&self) -> &Linear<B> {
        &self.out_proj
    }

    fn kv_cache(&mut self) -> Option<&mut KvCache<B>> {
        None
    }

    fn commit(&mut self, _at: usize, accepted: &[usize]) {
        let Some(p) = self.pending.take() else {
            return;
        };
        // The accepted rows are read where the verify left them: one launch each for the
        // state's replay and the conv rows on the GPU backends.
        self.state = B::gated_delta_rule_along(p.q, p.k, p.v, p.g, p.beta, self.state.clone(), accepted);
        self.conv_rows = B::gdn_conv_commit(self.conv_rows.clone(), p.block, accepted);
    }

    fn reset(&mut self) {
        self.state = self.state.zeros_like();
        self.conv_rows = self.conv_rows.zeros_like();
        self.pending = None;
    }
}

/// For each row, the `K` rows of `[committed conv rows (K − 1); block rows]` its conv reads,
/// oldest first: the row, its parent, its grandparent, … and, past the root, the committed rows
/// from the newest back.
fn conv_windows(parents: &[i32], kernel: usize) -> Vec<usize> {
    let history = kernel - 1;
    let mut windows = vec![0; parents.len() * kernel];
    for (row, window) in windows.chunks_exact_mut(kernel).enumerate() {
        let mut node = Some(row);
        let mut back = 0;
        for slot in window.iter_mut().rev() {
            *slot = match node {
                Some(at) => {
                    node = usize::try_from(parents[at]).ok();
                    history + at
                }
                None => {
                    back += 1;
                    history - back
                }
            };
        }
    }
    windows
}

/// Row orders that turn Qwen3-Next's per-key-head groups — `in_proj_qkvz` rows
/// `[q_g | k_g | v_g (r·Dv) | z_g (r·Dv)]` and `in_proj_ba` rows `[b_g (r) | a_g (r)]` for key
/// head `g` — into Qwen3.5's `[all q | all k | all v | all z]` and `[all b | all a]`.
fn ungroup(s: GdnHeads) -> (Vec<usize>, Vec<usize>) {
    let r = s.value_heads / s.key_heads;
    let (dk, rv) = (s.key_dim, r * s.value_dim);
    let group = 2 * dk + 2 * rv;
    let part = |offset: usize, width: usize| -> Vec<usize> {
        (0..s.key_heads)
            .flat_map(|g| (0..width).map(move |i| g * group + offset + i))
            .collect()
    };
    let qkvz = [part(0, dk), part(dk, dk), part(2 * dk, rv), part(2 * dk + rv, rv)].concat();
    let ba_part =
        |offset: usize| (0..s.key_heads).flat_map(move |g| (0..r).map(move |i| g * 2 * r + offset + i));
    let ba = ba_part(0).chain(ba_part(r)).collect();
    (qkvz, ba)
}

fn select_rows<B: KernelOps>(t: Tensor<B, 2>, order: &[usize]) -> Tensor<B, 2> {
    let device = t.device();
    t.select(0, index_tensor(order.iter().copied(), &device))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_follow_ancestors_then_committed_rows() {
        // K = 3: two committed rows (0, 1); block rows start at 2.
        let chain = conv_windows(&[-1, 0, 1], 3);
        assert_eq!(chain, [0, 1, 2, /**/ 1, 2, 3, /**/ 2, 3, 4]);
        // Tree: 0 → {1, 2}, 2 → 3.
        let tree = conv_windows(&[-1, 0, 0, 2], 3);
        assert_eq!(tree, [0, 1, 2, /**/ 1, 2, 3, /**/ 1, 2, 4, /**/ 2, 4, 5]);
    }

    #[test]
    fn qwen3_next_groups_are_regrouped() {
        let s = GdnHeads {
            key_heads: 2,
            value_heads: 4,
            key_dim: 1,
            value_dim: 1,
        };
        // Group g: [q_g, k_g, v_g0, v_g1, z_g0, z_g1] at rows 6g..6g+6.
        let (qkvz, ba) = ungroup(s);
        assert_eq!(qkvz, [0, 6, 1, 7, 2, 3, 8, 9, 4, 5, 10, 11]);
        // Group g: [b_g0, b_g1, a_g0, a_g1] at rows 4g..4g+4.
        assert_eq!(ba, [0, 1, 4, 5, 2, 3, 6, 7]);
    }
}

//! The Gated DeltaNet's steps around its recurrence, one launch each: the conv stage (causal
//! conv + SiLU over gathered windows, per-head L2 norm of q and k), the decay and β gates, the
//! gated RMSNorm and the conv rows a commit keeps. References:
//! [`crate::reference::gdn_conv_qkv`], [`crate::reference::gdn_conv_commit`],
//! [`crate::reference::gdn_gates`], [`crate::reference::gated_rms_norm`] — each a dozen or more
//! burn ops (launches) per layer, where a Qwen3.6-27B step has 48 such layers.

use cubecl::prelude::*;

use super::reduce::cube_sum;

/// One cube per (head slot, row): slot `s` of `2 · Hk + Hv` is q head `s`, k head `s − Hk` or v
/// head `s − 2 · Hk`, each unit one channel `c` of it:
///
/// `x = silu(Σ_j weight[c, j] · rows[windows[row · K + j], c])`, rounded to `F` as the conv's
/// output is stored; q and k heads are then divided by `sqrt(Σ_head x² + eps)` (q also scaled by
/// `scale`), in f32.
///
/// `rows` is `[history; block]` without its concatenation: `history: [K − 1, C]` dense (`C = 2 ·
/// Hk · Dk + Hv · Dv`), then the `n` block rows, the first `C` columns of `block` (row stride
/// `block_stride`: the layer's input projection, read in place). `windows: [n · K]` row indices,
/// `weight: [C, K]`; writes `q, k: [n, Hk · Dk]`, `v: [n, Hv · Dv]` and `next: [K − 1, C]`, the last
/// `K − 1` rows (the committed conv rows after a sequence block; the row-0 cubes copy them), all
/// dense. Launch `(2 · Hk + Hv, n)` cubes of `planes` planes covering `max(Dk, Dv)` units.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn conv_qkv<F: Float>(
    history: &Array<F>,
    block: &Array<F>,
    windows: &Array<u32>,
    weight: &Array<F>,
    q: &mut Array<F>,
    k: &mut Array<F>,
    v: &mut Array<F>,
    next: &mut Array<F>,
    key_heads: usize,
    key_dim: usize,
    value_dim: usize,
    channels: usize,
    block_stride: usize,
    scale: f32,
    eps: f32,
    #[comptime] kernel: usize,
    #[comptime] planes: usize,
) {
    let row = CUBE_POS_Y as usize;
    let slot = CUBE_POS_X as usize;
    let d = UNIT_POS as usize;
    let key_width = key_heads * key_dim;
    let normed = slot < 2 * key_heads;
    let dim = select(normed, key_dim, value_dim);
    let c = select(
        normed,
        slot * key_dim,
        2 * key_width + (slot - 2 * key_heads) * value_dim,
    ) + d;
    let mut x = 0.0f32;
    if d < dim {
        let mut sum = 0.0f32;
        #[unroll]
        for j in 0..kernel {
            let r = windows[row * kernel + j] as usize;
            let value = row_value::<F>(history, block, r, c, channels, block_stride, kernel);
            sum += value * f32::cast_from(weight[c * kernel + j]);
        }
        x = f32::cast_from(F::cast_from(sum / (1.0 + f32::exp(0.0 - sum))));
        if row == 0 {
            let n = CUBE_COUNT_Y as usize;
            #[unroll]
            for j in 0..comptime!(kernel - 1) {
                let value = row_value::<F>(history, block, n + j, c, channels, block_stride, kernel);
                next[j * channels + c] = F::cast_from(value);
            }
        }
    }
    // Every cube reduces (v heads a zero), so the barrier sits outside any branch.
    let norm = f32::sqrt(cube_sum(select(normed, x * x, 0.0), planes) + eps);
    if normed {
        if d < dim {
            if slot < key_heads {
                q[row * key_width + c] = F::cast_from(x / norm * scale);
            } else {
                k[row * key_width + c - key_width] = F::cast_from(x / norm);
            }
        }
    } else if d < dim {
        v[row * (channels - 2 * key_width) + c - 2 * key_width] = F::cast_from(x);
    }
}

/// Channel `c` of row `r` of `[history (K − 1 rows); block]`, in f32.
#[cube]
fn row_value<F: Float>(
    history: &Array<F>,
    block: &Array<F>,
    r: usize,
    c: usize,
    channels: usize,
    block_stride: usize,
    #[comptime] kernel: usize,
) -> f32 {
    let kept = comptime!(kernel - 1);
    if r < kept {
        f32::cast_from(history[r * channels + c])
    } else {
        f32::cast_from(block[(r - kept) * block_stride + c])
    }
}

/// One unit per (row, value head) of `len = rows · heads`: the decay (log space)
/// `g = −e^{a_log[h]} · softplus(a + dt_bias[h])` (softplus linear above 20, as PyTorch's) and
/// `β = 1 / (1 + e^{−b})`, in f32, read in place from the layer's input projection `proj` (row
/// stride `stride`): `b` at columns `b_at..b_at + heads`, `a` the `heads` after them;
/// `g, beta: [rows, heads]` dense.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn gates<F: Float>(
    proj: &Array<F>,
    a_log: &Array<F>,
    dt_bias: &Array<F>,
    g: &mut Array<F>,
    beta: &mut Array<F>,
    len: usize,
    heads: usize,
    stride: usize,
    b_at: usize,
) {
    let i = ABSOLUTE_POS;
    if i < len {
        let (row, h) = (i / heads, i % heads);
        let b_col = row * stride + b_at + h;
        let x = f32::cast_from(proj[b_col + heads]) + f32::cast_from(dt_bias[h]);
        let softplus = select(x > 20.0, x, f32::log1p(f32::exp(x)));
        g[i] = F::cast_from(softplus * (0.0 - f32::exp(f32::cast_from(a_log[h]))));
        let bv = f32::cast_from(proj[b_col]);
        beta[i] = F::cast_from(1.0 / (1.0 + f32::exp(0.0 - bv)));
    }
}

/// `y = x / sqrt(mean(x²) + eps) · weight · silu(z)` over each `dim`-wide group (value head) of
/// the rows of `x, y: [rows, groups · dim]` (dense) and `z` (columns `z_at..` of the layer's input
/// projection, read in place: row stride `z_stride`), `weight: [dim]`, in f32. Launch
/// `(groups, rows)` cubes of `planes` planes.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn gated_rms_norm_rows<F: Float>(
    x: &Array<F>,
    z: &Array<F>,
    weight: &Array<F>,
    y: &mut Array<F>,
    dim: usize,
    z_stride: usize,
    z_at: usize,
    eps: f32,
    #[comptime] planes: usize,
) {
    let (group, row) = (CUBE_POS_X as usize, CUBE_POS_Y as usize);
    let base = (row * CUBE_COUNT_X as usize + group) * dim;
    let z_base = row * z_stride + z_at + group * dim;
    let mut squares = 0.0f32;
    let mut i = UNIT_POS as usize;
    while i < dim {
        let v = f32::cast_from(x[base + i]);
        squares += v * v;
        i += CUBE_DIM as usize;
    }
    let rms = f32::sqrt(cube_sum(squares, planes) / f32::cast_from(dim) + eps);
    let mut j = UNIT_POS as usize;
    while j < dim {
        let v = f32::cast_from(x[base + j]);
        let gate = f32::cast_from(z[z_base + j]);
        let silu = gate / (1.0 + f32::exp(0.0 - gate));
        y[base + j] = F::cast_from(v / rms * f32::cast_from(weight[j]) * silu);
        j += CUBE_DIM as usize;
    }
}

/// `next[i, c]` = row `rows[i]` of `[history; block]` (as in [`conv_qkv()`]: `history: [K − 1,
/// C]` dense, then the first `C` columns of the block's rows at stride `block_stride`): the
/// committed conv rows after a commit. Reference: [`crate::reference::gdn_conv_commit`]. One
/// unit per element of `next: [K − 1, C]`.
#[cube(launch_unchecked)]
pub fn conv_commit<F: Float>(
    history: &Array<F>,
    block: &Array<F>,
    rows: &Array<u32>,
    next: &mut Array<F>,
    kept: usize,
    channels: usize,
    block_stride: usize,
) {
    let i = ABSOLUTE_POS;
    if i < kept * channels {
        let c = i % channels;
        let row = rows[i / channels] as usize;
        if row < kept {
            next[i] = history[row * channels + c];
        } else {
            next[i] = block[(row - kept) * block_stride + c];
        }
    }
}

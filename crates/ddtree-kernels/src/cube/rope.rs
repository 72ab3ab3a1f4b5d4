//! NeoX ("rotate half") rotary embedding, alone and fused into the attention step after the QKV
//! projection. References: [`crate::reference::rope`], [`crate::reference::qk_norm_rope_write`].

use cubecl::prelude::*;

/// `x, y: [rows, heads, head_dim]`, `cos, sin: [rows, half]`; the first `2·half` dims of every
/// head rotate, the rest pass through. One unit per output element.
#[cube(launch_unchecked)]
pub fn rope_rows<F: Float>(
    x: &Array<F>,
    cos: &Array<F>,
    sin: &Array<F>,
    y: &mut Array<F>,
    len: usize,
    heads: usize,
    head_dim: usize,
    half: usize,
) {
    let i = ABSOLUTE_POS;
    if i < len {
        let d = i % head_dim;
        let row = i / (heads * head_dim);
        let head_base = i - d;
        if d < 2 * half {
            let f = d % half;
            let c = f32::cast_from(cos[row * half + f]);
            let s = f32::cast_from(sin[row * half + f]);
            let x1 = f32::cast_from(x[head_base + f]);
            let x2 = f32::cast_from(x[head_base + f + half]);
            y[i] = F::cast_from(rotate_pair(x1, x2, c, s, d < half));
        } else {
            y[i] = x[i];
        }
    }
}

/// The attention step after the fused QKV projection, in one launch (reference:
/// [`crate::reference::qk_norm_rope_write`]): for each row and head of `qkv: [n, width]`,
/// the per-head RMSNorm (query or key weight), then RoPE; queries go to `q_out: [n −
/// context_rows, heads, head_dim]`, keys (and the untouched values) into the caches at row
/// `at + row`.
///
/// One plane per (row, slot): cube `(row, slot)` with slots `0..heads` the queries (rows from
/// `context_rows` on) and `heads..heads + kv_heads` the keys and values. The normalised head,
/// rounded to `F` as the separate norm stores it, is staged in shared memory so each lane can
/// read its rotation partner.
///
/// `qkv` is `[splits, n · width]` of type `D`: with one split the projection (`D = F`); with
/// several the f32 partial sums of a k-sliced [`super::linear::linear_mma()`], summed in slice
/// order and rounded to `F` as [`super::linear::linear_split_sum()`] stores them — bit for bit
/// the split sum followed by this kernel, one launch fewer (`len = n · width`).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn qk_norm_rope_write_rows<F: Float, D: Float>(
    qkv: &Array<D>,
    q_norm: &Array<F>,
    k_norm: &Array<F>,
    cos: &Array<F>,
    sin: &Array<F>,
    q_out: &mut Array<F>,
    keys: &mut Array<F>,
    values: &mut Array<F>,
    width: usize,
    context_rows: usize,
    k_at: usize,
    kv_width: usize,
    half: usize,
    head_stride: usize,
    row_stride: usize,
    at: usize,
    q_eps: f32,
    k_eps: f32,
    len: usize,
    #[comptime] splits: usize,
    #[comptime] heads: usize,
    #[comptime] head_dim: usize,
    #[comptime] plane: usize,
) {
    let row = CUBE_POS_X as usize;
    let slot = CUBE_POS_Y as usize;
    let lane = UNIT_POS_X as usize;
    let is_query = slot < heads;
    let active = !is_query || row >= context_rows;
    let kv_head = slot - select(is_query, slot, heads);
    let src = row * width + select(is_query, slot * head_dim, k_at + kv_head * head_dim);
    let eps = select(is_query, q_eps, k_eps);
    let per_lane = comptime!(head_dim.div_ceil(plane));
    let mut staged = SharedMemory::<F>::new(head_dim);
    normalise_head::<F, D>(
        qkv,
        src,
        len,
        q_norm,
        k_norm,
        is_query,
        eps,
        &mut staged,
        0usize,
        lane,
        splits,
        head_dim,
        plane,
    );
    sync_cube();

    #[unroll]
    for t in 0..per_lane {
        let d = lane + t * plane;
        if d < head_dim && active {
            let out = rotated_dim::<F>(&staged, 0usize, d, cos, sin, row * half, half);
            if is_query {
                q_out[((row - context_rows) * heads + slot) * head_dim + d] = F::cast_from(out);
            } else {
                let cell = kv_head * head_stride + (at + row) * row_stride + d;
                keys[cell] = F::cast_from(out);
                values[cell] = F::cast_from(projected::<F, D>(qkv, src + kv_width + d, len, splits));
            }
        }
    }
}

/// Element `i` of the projection as stored in `F`, widened to f32: read, or with several k-slices
/// their partial sums added in slice order and rounded to `F`.
#[cube]
fn projected<F: Float, D: Float>(qkv: &Array<D>, i: usize, len: usize, #[comptime] splits: usize) -> f32 {
    let mut value = 0.0f32;
    if comptime!(splits > 1) {
        #[unroll]
        for s in 0..splits {
            value += f32::cast_from(qkv[s * len + i]);
        }
        value = f32::cast_from(F::cast_from(value));
    } else {
        value = f32::cast_from(qkv[i]);
    }
    value
}

/// Stages one head of the projection (`qkv` from element `src`, read as [`projected()`] reads it)
/// per-head RMS-normalised with the query or the key weight and rounded to `F`, as the separate
/// norm stores it, into `staged[at..at + head_dim]`. A plane's lane `lane` takes dims `lane, lane
/// + plane, …`; the plane sums the squares. Shared with the AR step's attention launch
/// ([`super::attention_mma::attention_mma()`] with `project`), whose queries and caches must be
/// these bits.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn normalise_head<F: Float, D: Float>(
    qkv: &Array<D>,
    src: usize,
    len: usize,
    q_norm: &Array<F>,
    k_norm: &Array<F>,
    is_query: bool,
    eps: f32,
    staged: &mut SharedMemory<F>,
    at: usize,
    lane: usize,
    #[comptime] splits: usize,
    #[comptime] head_dim: usize,
    #[comptime] plane: usize,
) {
    let per_lane = comptime!(head_dim.div_ceil(plane));
    let mut squares = 0.0f32;
    #[unroll]
    for t in 0..per_lane {
        let d = lane + t * plane;
        if d < head_dim {
            let v = projected::<F, D>(qkv, src + d, len, splits);
            squares += v * v;
        }
    }
    let rms = f32::sqrt(plane_sum(squares) / comptime!(head_dim as f32) + eps);
    #[unroll]
    for t in 0..per_lane {
        let d = lane + t * plane;
        if d < head_dim {
            let w = select(is_query, f32::cast_from(q_norm[d]), f32::cast_from(k_norm[d]));
            staged[at + d] = F::cast_from(projected::<F, D>(qkv, src + d, len, splits) / rms * w);
        }
    }
}

/// Dim `d` of the head staged at `staged[at..]` after the rotation, with the row's cos and sin
/// from `cos[cs_at..]`, `sin[cs_at..]`: the first `2 · half` dims rotate, the rest pass through.
#[cube]
pub(crate) fn rotated_dim<F: Float>(
    staged: &SharedMemory<F>,
    at: usize,
    d: usize,
    cos: &Array<F>,
    sin: &Array<F>,
    cs_at: usize,
    half: usize,
) -> f32 {
    let mut out = f32::cast_from(staged[at + d]);
    if d < 2 * half {
        let f = d % half;
        let c = f32::cast_from(cos[cs_at + f]);
        let s = f32::cast_from(sin[cs_at + f]);
        let x1 = f32::cast_from(staged[at + f]);
        let x2 = f32::cast_from(staged[at + f + half]);
        out = rotate_pair(x1, x2, c, s, d < half);
    }
    out
}

/// NeoX's "rotate half" of one dim: `x1 · c − x2 · s` in the first half, `x2 · c + x1 · s` in
/// the second, where `x1`, `x2` are the dims `f` and `f + half` of its pair.
#[cube]
fn rotate_pair(x1: f32, x2: f32, c: f32, s: f32, first_half: bool) -> f32 {
    let mut out = x2 * c + x1 * s;
    if first_half {
        out = x1 * c - x2 * s;
    }
    out
}

//! Attention of a block of query rows over a KV cache (the committed prefix plus the block's own
//! rows), with causal, full or tree (ancestor bit set) visibility and an optional sliding window —
//! no dense mask. Reference: [`crate::reference::cached_attention`].
//!
//! One cube per (query row, query head). Its planes split the keys (key `j` goes to plane
//! `j mod planes`) and keep an online softmax each; lanes split the head dimension and reduce
//! each score with `plane_sum`. The planes' partial results are merged in shared memory, as in
//! flash-decoding.

use cubecl::prelude::*;

/// Visibility inside the block (the prefix is always visible, subject to the window).
pub const CAUSAL: u32 = 0;
/// Every block row sees every block row.
pub const FULL: u32 = 1;
/// Row `i` sees block row `j` iff bit `j` of row `i` is set in `bits`.
pub const TREE: u32 = 2;

/// `q: [rows, q_heads, head_dim]`, `k`/`v: [kv_heads, capacity, head_dim]` with head and row strides
/// `head_stride`, `row_stride` (elements; rows may be pitched) and the block at cache rows
/// `prefix_len..prefix_len + rows`, `bits: [rows, words]` little-endian u32 words (only read
/// for [`TREE`]), `out: [rows, q_heads, head_dim]`. `window` 0 means none; otherwise the query at
/// cache row `p` sees only cache rows `> p - window`. Launch with `CubeCount = (rows, q_heads)`
/// and `CubeDim = (plane, planes)`.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn attention_rows<F: Float>(
    q: &Array<F>,
    k: &Array<F>,
    v: &Array<F>,
    bits: &Array<u32>,
    out: &mut Array<F>,
    head_stride: usize,
    row_stride: usize,
    prefix_len: usize,
    rows: usize,
    words: usize,
    window: usize,
    scale: f32,
    #[comptime] q_heads: usize,
    #[comptime] kv_heads: usize,
    #[comptime] head_dim: usize,
    #[comptime] plane: usize,
    #[comptime] planes: usize,
    #[comptime] mode: u32,
) {
    let row = CUBE_POS_X as usize;
    let head = CUBE_POS_Y as usize;
    let kv_head = head / comptime!(q_heads / kv_heads);
    let lane = UNIT_POS_X as usize;
    let me = UNIT_POS_Y as usize;
    let per_lane = comptime!(head_dim.div_ceil(plane));
    let q_base = (row * q_heads + head) * head_dim;

    // This lane's slice of the (pre-scaled) query and of the output accumulator.
    let mut qr = Array::<f32>::new(per_lane);
    let mut acc = Array::<f32>::new(per_lane);
    #[unroll]
    for t in 0..per_lane {
        let d = lane + t * plane;
        let mut value = 0.0f32;
        if d < head_dim {
            value = f32::cast_from(q[q_base + d]) * scale;
        }
        qr[t] = value;
        acc[t] = 0.0f32;
    }

    let query_pos = prefix_len + row;
    let kv_len = prefix_len + rows;
    let mut m = f32::min_value();
    let mut l = 0.0f32;
    let mut j = me;
    while j < kv_len {
        let mut visible = window == 0 || j + window > query_pos;
        if j >= prefix_len {
            let col = j - prefix_len;
            if comptime!(mode == CAUSAL) {
                visible = visible && col <= row;
            } else if comptime!(mode == TREE) {
                let word = bits[row * words + col / 32];
                visible = visible && ((word >> u32::cast_from(col % 32)) & 1u32) == 1u32;
            }
        }
        if visible {
            let base = kv_head * head_stride + j * row_stride;
            let mut part = 0.0f32;
            #[unroll]
            for t in 0..per_lane {
                let d = lane + t * plane;
                if d < head_dim {
                    part += qr[t] * f32::cast_from(k[base + d]);
                }
            }
            let score = plane_sum(part);
            let m_new = f32::max(m, score);
            let correction = f32::exp(m - m_new);
            let weight = f32::exp(score - m_new);
            l = l * correction + weight;
            #[unroll]
            for t in 0..per_lane {
                let d = lane + t * plane;
                if d < head_dim {
                    acc[t] = acc[t] * correction + weight * f32::cast_from(v[base + d]);
                }
            }
            m = m_new;
        }
        j += planes;
    }

    // Merge the planes: out = Σ_p acc_p · e^(m_p − M) / Σ_p l_p · e^(m_p − M).
    let mut maxes = SharedMemory::<f32>::new(planes);
    let mut sums = SharedMemory::<f32>::new(planes);
    let mut accs = SharedMemory::<f32>::new(comptime!(planes * head_dim));
    if lane == 0 {
        maxes[me] = m;
        sums[me] = l;
    }
    #[unroll]
    for t in 0..per_lane {
        let d = lane + t * plane;
        if d < head_dim {
            accs[me * head_dim + d] = acc[t];
        }
    }
    sync_cube();
    if me == 0 {
        let mut top = f32::min_value();
        #[unroll]
        for p in 0..planes {
            top = f32::max(top, maxes[p]);
        }
        let mut total = 0.0f32;
        #[unroll]
        for p in 0..planes {
            total += sums[p] * f32::exp(maxes[p] - top);
        }
        #[unroll]
        for t in 0..per_lane {
            let d = lane + t * plane;
            if d < head_dim {
                let mut o = 0.0f32;
                #[unroll]
                for p in 0..planes {
                    o += accs[p * head_dim + d] * f32::exp(maxes[p] - top);
                }
                out[q_base + d] = F::cast_from(o / total);
            }
        }
    }
}

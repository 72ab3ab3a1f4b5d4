//! Attention of a block of query rows over a KV cache (the committed prefix plus the block's own
//! rows), with causal, full or tree (ancestor bit set) visibility and an optional sliding window —
//! no dense mask. Reference: [`crate::reference::cached_attention`].
//!
//! Flash-decoding: [`attention_splits()`] gives each cube one KV head, one split of the keys and a
//! block of query rows with every query head that shares the KV head (grouped-query attention
//! reads each key once per block, not once per head). The cube stages `plane` keys at a time in
//! shared memory; each plane takes one query at a time, each lane scores one key, and the online
//! softmax state of the cube's queries stays in shared memory. [`attention_combine()`] merges the
//! splits' partial results when there is more than one.

use cubecl::prelude::*;

/// Visibility inside the block (the prefix is always visible, subject to the window).
pub const CAUSAL: u32 = 0;
/// Every block row sees every block row.
pub const FULL: u32 = 1;
/// Row `i` sees block row `j` iff bit `j` of row `i` is set in `bits`.
pub const TREE: u32 = 2;

/// Shared-memory floats of query state per cube: `max_queries = QUERY_STATE / head_dim` queries.
pub const QUERY_STATE: usize = 2048;

/// `q: [rows, q_heads, head_dim]`, `k`/`v: [kv_heads, capacity, head_dim]` with head and row strides
/// `head_stride`, `row_stride` (elements; rows may be pitched) and the block at cache rows
/// `prefix_len..prefix_len + rows`, `bits: [rows, words]` little-endian u32 words (only read for
/// [`TREE`]). `window` 0 means none; otherwise the query at cache row `p` sees only cache rows
/// `> p - window`. `q` and `k` are read in vectors of `N`, which divides `head_dim` and both
/// strides.
///
/// Launch with `CubeCount = (kv_heads, splits, ⌈rows / rows_per_block⌉)` and
/// `CubeDim = (plane, planes)`; `keys_per_split` is a multiple of `plane` and
/// `rows_per_block · q_heads / kv_heads ≤ max_queries`. With one split the cube writes
/// `out: [rows, q_heads, head_dim]`; otherwise split `s` writes its unnormalised accumulator to
/// `part_acc[s, row, head, :]` and its running max and sum to `part_ml[s, row, head, 0..2]`.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn attention_splits<F: Float, N: Size>(
    q: &Array<Vector<F, N>>,
    k: &Array<Vector<F, N>>,
    v: &Array<F>,
    bits: &Array<u32>,
    out: &mut Array<F>,
    part_acc: &mut Array<f32>,
    part_ml: &mut Array<f32>,
    head_stride: usize,
    row_stride: usize,
    prefix_len: usize,
    rows: usize,
    words: usize,
    window: usize,
    scale: f32,
    keys_per_split: usize,
    rows_per_block: usize,
    splits: usize,
    #[comptime] q_heads: usize,
    #[comptime] kv_heads: usize,
    #[comptime] head_dim: usize,
    #[comptime] plane: usize,
    #[comptime] planes: usize,
    #[comptime] mode: u32,
) {
    let group = comptime!(q_heads / kv_heads);
    let max_queries = comptime!(QUERY_STATE / head_dim);
    // Queries and keys are read in vectors of `N`; rows of the key tile are padded by one vector
    // so that lanes reading "their" key at the same dimension hit different shared-memory banks.
    let vec = N::value();
    let head_vecs = comptime!(head_dim / vec);
    let pitch = comptime!(head_vecs + 1);
    let units = comptime!(plane * planes);
    let per_lane = comptime!(head_dim.div_ceil(plane));
    let kv_head = CUBE_POS_X as usize;
    let split = CUBE_POS_Y as usize;
    let first_row = CUBE_POS_Z as usize * rows_per_block;
    let lane = UNIT_POS_X as usize;
    let me = UNIT_POS_Y as usize;
    let unit = me * plane + lane;
    let queries = usize::min(rows_per_block, rows - first_row) * group;
    let kv_len = prefix_len + rows;
    let key_start = split * keys_per_split;
    let key_end = usize::min(kv_len, key_start + keys_per_split);

    // Query `i` of the cube is block row `first_row + i / group`, head `kv_head · group + i % group`.
    let mut qs = SharedMemory::<Vector<f32, N>>::new(comptime!(max_queries * head_vecs));
    let mut accs = SharedMemory::<f32>::new(comptime!(max_queries * head_dim));
    let mut ms = SharedMemory::<f32>::new(max_queries);
    let mut ls = SharedMemory::<f32>::new(max_queries);
    let mut ks = SharedMemory::<Vector<F, N>>::new(comptime!(plane * pitch));
    let mut vs = SharedMemory::<F>::new(comptime!(plane * head_dim));

    let mut e = unit;
    while e < queries * head_vecs {
        let i = e / head_vecs;
        let row = first_row + i / group;
        let head = kv_head * group + i % group;
        let query = Vector::<f32, N>::cast_from(q[(row * q_heads + head) * head_vecs + e % head_vecs]);
        qs[e] = query * Vector::<f32, N>::new(scale);
        e += units;
    }
    let mut e = unit;
    while e < queries * head_dim {
        accs[e] = 0.0f32;
        e += units;
    }
    let mut i = unit;
    while i < queries {
        ms[i] = f32::min_value();
        ls[i] = 0.0f32;
        i += units;
    }
    sync_cube();

    let mut tile = key_start;
    while tile < key_end {
        let mut e = unit;
        while e < comptime!(plane * head_vecs) {
            let key = tile + e / head_vecs;
            let mut kv = Vector::<F, N>::new(F::from_int(0));
            if key < key_end {
                kv = k[(kv_head * head_stride + key * row_stride) / vec + e % head_vecs];
            }
            ks[(e / head_vecs) * pitch + e % head_vecs] = kv;
            e += units;
        }
        let mut e = unit;
        while e < comptime!(plane * head_dim) {
            let key = tile + e / head_dim;
            let mut vv = F::from_int(0);
            if key < key_end {
                vv = v[kv_head * head_stride + key * row_stride + e % head_dim];
            }
            vs[e] = vv;
            e += units;
        }
        sync_cube();

        let key = tile + lane;
        let mut i = me;
        while i < queries {
            let row = first_row + i / group;
            let query_pos = prefix_len + row;
            let mut visible = key < key_end && (window == 0 || key + window > query_pos);
            if visible && key >= prefix_len {
                let col = key - prefix_len;
                if comptime!(mode == CAUSAL) {
                    visible = col <= row;
                } else if comptime!(mode == TREE) {
                    let word = bits[row * words + col / 32];
                    visible = ((word >> u32::cast_from(col % 32)) & 1u32) == 1u32;
                }
            }
            // Unrolled, with `N` independent sums: a serial chain of scalar FMAs, each waiting
            // for its shared-memory loads, made the kernel latency-bound (docs/perf-notes.md).
            let mut dot = Vector::<f32, N>::new(0.0);
            #[unroll]
            for c in 0..head_vecs {
                let key_vec = Vector::<f32, N>::cast_from(ks[lane * pitch + c]);
                dot = fma(qs[i * head_vecs + c], key_vec, dot);
            }
            let score = select(visible, f32::cast_from(dot.vector_sum()), f32::min_value());
            let m_old = ms[i];
            let m_new = f32::max(m_old, plane_max(score));
            let weight = select(visible, f32::exp(score - m_new), 0.0f32);
            let correction = f32::exp(m_old - m_new);
            let l_new = ls[i] * correction + plane_sum(weight);

            let mut acc = Array::<f32>::new(per_lane);
            #[unroll]
            for t in 0..per_lane {
                let d = lane + t * plane;
                acc[t] = 0.0f32;
                if d < head_dim {
                    acc[t] = accs[i * head_dim + d] * correction;
                }
            }
            // Every lane takes part in each shuffle; only the head dimension is guarded.
            #[unroll]
            for j in 0..plane {
                let w = plane_shuffle(weight, comptime!(j as u32));
                #[unroll]
                for t in 0..per_lane {
                    let d = lane + t * plane;
                    if d < head_dim {
                        acc[t] += w * f32::cast_from(vs[j * head_dim + d]);
                    }
                }
            }
            #[unroll]
            for t in 0..per_lane {
                let d = lane + t * plane;
                if d < head_dim {
                    accs[i * head_dim + d] = acc[t];
                }
            }
            // The state is read back only after the next `sync_cube`.
            if lane == 0 {
                ms[i] = m_new;
                ls[i] = l_new;
            }
            i += planes;
        }
        sync_cube();
        tile += plane;
    }

    let mut i = me;
    while i < queries {
        let row = first_row + i / group;
        let head = kv_head * group + i % group;
        let query = row * q_heads + head;
        #[unroll]
        for t in 0..per_lane {
            let d = lane + t * plane;
            if d < head_dim {
                if splits == 1 {
                    out[query * head_dim + d] = F::cast_from(accs[i * head_dim + d] / ls[i]);
                } else {
                    part_acc[(split * rows * q_heads + query) * head_dim + d] = accs[i * head_dim + d];
                }
            }
        }
        if splits > 1 && lane == 0 {
            part_ml[2 * (split * rows * q_heads + query)] = ms[i];
            part_ml[2 * (split * rows * q_heads + query) + 1] = ls[i];
        }
        i += planes;
    }
}

/// Merges the splits of [`attention_splits()`]: `out = Σ_s acc_s · e^(m_s − M) / Σ_s l_s · e^(m_s − M)`
/// for each (row, head). Launch with `CubeCount = rows · q_heads` and `CubeDim = plane`.
#[cube(launch_unchecked)]
pub fn attention_combine<F: Float>(
    part_acc: &Array<f32>,
    part_ml: &Array<f32>,
    out: &mut Array<F>,
    queries: usize,
    splits: usize,
    #[comptime] head_dim: usize,
    #[comptime] plane: usize,
) {
    let query = CUBE_POS_X as usize;
    let lane = UNIT_POS_X as usize;
    let mut top = f32::min_value();
    for s in 0..splits {
        top = f32::max(top, part_ml[2 * (s * queries + query)]);
    }
    let mut total = 0.0f32;
    for s in 0..splits {
        let at = 2 * (s * queries + query);
        total += part_ml[at + 1] * f32::exp(part_ml[at] - top);
    }
    #[unroll]
    for t in 0..comptime!(head_dim.div_ceil(plane)) {
        let d = lane + t * plane;
        if d < head_dim {
            let mut o = 0.0f32;
            for s in 0..splits {
                let factor = f32::exp(part_ml[2 * (s * queries + query)] - top);
                o += part_acc[(s * queries + query) * head_dim + d] * factor;
            }
            out[query * head_dim + d] = F::cast_from(o / total);
        }
    }
}

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
/// `> p - window`. `q`, `k` and `v` are read in vectors of `N`, which divides `head_dim` and both
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
    v: &Array<Vector<F, N>>,
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
    // Queries, keys and values are read in vectors of `N`; rows of the key tile are padded by one
    // vector so that lanes reading "their" key at the same dimension hit different shared-memory
    // banks.
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
        while e < comptime!(plane * head_vecs) {
            let key = tile + e / head_vecs;
            let mut vv = Vector::<F, N>::new(F::from_int(0));
            if key < key_end {
                vv = v[(kv_head * head_stride + key * row_stride) / vec + e % head_vecs];
            }
            #[unroll]
            for i in 0..vec {
                vs[e * vec + i] = vv[i];
            }
            e += units;
        }
        sync_cube();

        let key = tile + lane;
        let mut i = me;
        while i < queries {
            let row = first_row + i / group;
            // (Both operands of `&&` are evaluated: `sees` must not read past the block.)
            let mut visible = key < key_end;
            if visible {
                visible = sees(bits, row, key, prefix_len, words, window, mode);
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

/// Whether block row `row` (cache row `prefix_len + row`) sees cache row `key`: the prefix
/// always, the block by `mode`, both subject to the window.
#[cube]
pub(crate) fn sees(
    bits: &Array<u32>,
    row: usize,
    key: usize,
    prefix_len: usize,
    words: usize,
    window: usize,
    #[comptime] mode: u32,
) -> bool {
    let mut visible = window == 0 || key + window > prefix_len + row;
    if visible && key >= prefix_len {
        let col = key - prefix_len;
        if comptime!(mode == CAUSAL) {
            visible = col <= row;
        } else if comptime!(mode == TREE) {
            let word = bits[row * words + col / 32];
            visible = ((word >> u32::cast_from(col % 32)) & 1u32) == 1u32;
        }
    }
    visible
}

/// Planes per cube of [`attention_tiles()`].
pub const TILE_PLANES: usize = 8;
/// Queries per cube of [`attention_tiles()`] (two 16-row tiles).
pub const TILE_QUERIES: usize = 32;
/// Keys per step of [`attention_tiles()`]: `TILE_QUERIES / 16 · TILE_KEYS / 16` score tiles, one
/// per plane.
pub const TILE_KEYS: usize = 64;

/// Shared memory of an [`attention_tiles()`] cube for `head_dim` and `elem`-byte floats: the
/// queries, keys and values (rows padded by 16 bytes), the f32 scores, the weights `P` (high and
/// low parts), the f32 output accumulator and the softmax state.
pub fn tiles_shared_bytes(head_dim: usize, elem: usize) -> usize {
    let row = head_dim * elem + 16;
    (TILE_QUERIES + 2 * TILE_KEYS) * row
        + TILE_QUERIES * ((TILE_KEYS + 4) * 4 + 2 * (TILE_KEYS + 8) * elem + (head_dim + 4) * 4 + 3 * 4)
}

/// [`attention_splits()`] on tensor cores, for blocks of rows with at least 16 queries per KV
/// head (tree verify, drafter blocks): 16×16×16 WMMA tiles with bf16/f16 inputs and f32
/// accumulators.
///
/// The queries of one KV head are numbered `j = row · group + head_in_group`; a cube takes
/// [`TILE_QUERIES`] consecutive ones (zero past the last) and one split of the keys, which it
/// walks in steps of [`TILE_KEYS`]: the step's keys and values are staged in shared memory with
/// 16-byte loads (the next step's in flight during this one), each plane computes one 16×16
/// tile of scores `Q·Kᵀ` into shared memory, each plane then runs the online softmax of its
/// query rows (scaled, masked, each weight kept as the sum of two `F` values so that `P·V` is as
/// exact as the f32 sums of [`attention_splits()`]), and finally each plane rescales its own 16
/// columns of the output accumulator (kept in shared memory in f32, since WMMA accumulators
/// cannot be scaled per row in registers) and adds `P·V`. Same arguments and outputs as
/// [`attention_splits()`], except that `N` must be 16 bytes of `F` and `head_dim` a multiple of
/// 16. Launch with `CubeCount = (kv_heads, splits, ⌈rows · group / TILE_QUERIES⌉)`,
/// `CubeDim = (32, TILE_PLANES)` and `keys_per_split` a multiple of [`TILE_KEYS`].
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn attention_tiles<F: Float, N: Size>(
    q: &Array<Vector<F, N>>,
    k: &Array<Vector<F, N>>,
    v: &Array<Vector<F, N>>,
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
    splits: usize,
    #[comptime] q_heads: usize,
    #[comptime] kv_heads: usize,
    #[comptime] head_dim: usize,
    #[comptime] mode: u32,
) {
    let group = comptime!(q_heads / kv_heads);
    let vec = N::value();
    let head_vecs = comptime!(head_dim / vec);
    let q_tiles = comptime!(TILE_QUERIES / 16);
    let key_tiles = comptime!(TILE_KEYS / 16);
    let d_tiles = comptime!(head_dim / 16);
    let units = comptime!(32 * TILE_PLANES);
    // Row pitches: one 16-byte vector (8 floats for f32) past the row, so that the rows of a
    // fragment fall on different banks while fragment starts stay 32-byte aligned.
    let kv_pitch = comptime!(head_vecs + 1);
    let s_pitch = comptime!(TILE_KEYS + 4);
    let p_pitch = comptime!(TILE_KEYS + 8);
    let o_pitch = comptime!(head_dim + 4);
    let kv_len_s = comptime!(TILE_KEYS * kv_pitch);
    let q_len = comptime!(TILE_QUERIES * kv_pitch);
    let stage_per_unit = comptime!((TILE_KEYS * head_vecs).div_ceil(32 * TILE_PLANES));

    let kv_head = CUBE_POS_X as usize;
    let split = CUBE_POS_Y as usize;
    let first = CUBE_POS_Z as usize * TILE_QUERIES;
    let plane = UNIT_POS_Y as usize;
    let lane = UNIT_POS_X as usize;
    let unit = UNIT_POS as usize;
    let queries = rows * group;
    let kv_len = prefix_len + rows;
    let key_start = split * keys_per_split;
    let key_end = usize::min(kv_len, key_start + keys_per_split);
    let steps = (key_end - key_start).div_ceil(TILE_KEYS);
    let kv_base = kv_head * head_stride / vec;
    let row_vecs = row_stride / vec;

    let mut q_s = SharedMemory::<Vector<F, N>>::new_aligned(q_len, 32usize);
    let mut k_s = SharedMemory::<Vector<F, N>>::new_aligned(kv_len_s, 32usize);
    let mut v_s = SharedMemory::<Vector<F, N>>::new_aligned(kv_len_s, 32usize);
    let mut s_s = SharedMemory::<f32>::new_aligned(comptime!(TILE_QUERIES * s_pitch), 32usize);
    let mut p_s = SharedMemory::<F>::new_aligned(comptime!(TILE_QUERIES * p_pitch), 32usize);
    let mut p_lo = SharedMemory::<F>::new_aligned(comptime!(TILE_QUERIES * p_pitch), 32usize);
    let mut o_s = SharedMemory::<f32>::new_aligned(comptime!(TILE_QUERIES * o_pitch), 32usize);
    let mut ms = SharedMemory::<f32>::new(TILE_QUERIES);
    let mut ls = SharedMemory::<f32>::new(TILE_QUERIES);
    let mut cs = SharedMemory::<f32>::new(TILE_QUERIES);
    let mut k_next = Array::<Vector<F, N>>::new(stage_per_unit);
    let mut v_next = Array::<Vector<F, N>>::new(stage_per_unit);

    // The cube's queries (zero past the last), a zero accumulator, an empty softmax state.
    let mut e = unit;
    while e < comptime!(TILE_QUERIES * head_vecs) {
        let j = first + e / head_vecs;
        let mut value = Vector::<F, N>::new(F::from_int(0));
        if j < queries {
            let head = kv_head * group + j % group;
            value = q[((j / group) * q_heads + head) * head_vecs + e % head_vecs];
        }
        q_s[(e / head_vecs) * kv_pitch + e % head_vecs] = value;
        e += units;
    }
    let mut e = unit;
    while e < comptime!(TILE_QUERIES * o_pitch) {
        o_s[e] = 0.0f32;
        e += units;
    }
    if unit < TILE_QUERIES {
        ms[unit] = f32::min_value();
        ls[unit] = 0.0f32;
    }

    // Keys and values of step `t` into registers (zero past `key_end`).
    let mut step = 0usize;
    while step < steps + 1 {
        if step < steps {
            let tile = key_start + step * TILE_KEYS;
            #[unroll]
            for r in 0..stage_per_unit {
                let e = r * units + unit;
                let key = tile + e / head_vecs;
                let mut kv = Vector::<F, N>::new(F::from_int(0));
                let mut vv = Vector::<F, N>::new(F::from_int(0));
                if e < comptime!(TILE_KEYS * head_vecs) && key < key_end {
                    let at = kv_base + key * row_vecs + e % head_vecs;
                    kv = k[at];
                    vv = v[at];
                }
                k_next[r] = kv;
                v_next[r] = vv;
            }
        }
        if step > 0 {
            let tile = key_start + (step - 1) * TILE_KEYS;
            // Scores: plane `p` computes score tile (p / key_tiles, p % key_tiles).
            let mt = plane / key_tiles;
            let nt = plane % key_tiles;
            let acc = cmma::Matrix::<f32>::from_value(
                cmma::MatrixIdent::Accumulator,
                16usize,
                16usize,
                16usize,
                cmma::MatrixLayout::Undefined,
                0.0,
            );
            #[unroll]
            for dt in 0..d_tiles {
                // SAFETY: loaded on the next line. (`from_slice` takes scalar slices only.)
                let a = unsafe {
                    cmma::Matrix::<F>::uninitialized(
                        cmma::MatrixIdent::A,
                        16usize,
                        16usize,
                        16usize,
                        cmma::MatrixLayout::RowMajor,
                    )
                };
                let at = mt * 16 * kv_pitch + dt * comptime!(16 / vec);
                cmma::load(&a, &q_s.slice(at, q_len), comptime!(kv_pitch * vec) as u32);
                // SAFETY: loaded on the next line.
                let b = unsafe {
                    cmma::Matrix::<F>::uninitialized(
                        cmma::MatrixIdent::B,
                        16usize,
                        16usize,
                        16usize,
                        cmma::MatrixLayout::ColMajor,
                    )
                };
                let at = nt * 16 * kv_pitch + dt * comptime!(16 / vec);
                cmma::load(&b, &k_s.slice(at, kv_len_s), comptime!(kv_pitch * vec) as u32);
                cmma::execute::<F, F, f32, f32>(&a, &b, &acc, &acc);
            }
            let at = mt * 16 * s_pitch + nt * 16;
            cmma::store(
                &mut s_s.slice_mut(at, comptime!(TILE_QUERIES * s_pitch)),
                &acc,
                comptime!(s_pitch) as u32,
                cmma::MatrixLayout::RowMajor,
            );
            sync_cube();

            // Online softmax: plane `p` takes query rows p, p + 8, …; each lane a key per 32.
            #[unroll]
            for r in 0..comptime!(TILE_QUERIES / TILE_PLANES) {
                let i = r * TILE_PLANES + plane;
                let j = first + i;
                let row = j / group;
                // Scores of hidden keys are `f32::min_value()`, below any real score.
                let mut scores = Array::<f32>::new(comptime!(TILE_KEYS / 32));
                let mut top = f32::min_value();
                #[unroll]
                for u in 0..comptime!(TILE_KEYS / 32) {
                    let col = u * 32 + lane;
                    let key = tile + col;
                    let mut visible = j < queries && key < key_end;
                    if visible {
                        visible = sees(bits, row, key, prefix_len, words, window, mode);
                    }
                    let score = select(visible, s_s[i * s_pitch + col] * scale, f32::min_value());
                    scores[u] = score;
                    top = f32::max(top, score);
                }
                let m_old = ms[i];
                let m_new = f32::max(m_old, plane_max(top));
                let mut sum = 0.0f32;
                #[unroll]
                for u in 0..comptime!(TILE_KEYS / 32) {
                    let weight = select(scores[u] > f32::min_value(), f32::exp(scores[u] - m_new), 0.0f32);
                    // The weight as a sum of two `F` values, so that `P·V` loses no more than the
                    // f32 sums of `attention_splits` (AR's kernel where `attention_mma` cannot run).
                    let high = F::cast_from(weight);
                    p_s[i * p_pitch + u * 32 + lane] = high;
                    p_lo[i * p_pitch + u * 32 + lane] = F::cast_from(weight - f32::cast_from(high));
                    sum += weight;
                }
                let correction = f32::exp(m_old - m_new);
                let l_new = ls[i] * correction + plane_sum(sum);
                // Every lane has read `ms[i]` and `ls[i]` before lane 0 overwrites them.
                sync_plane();
                if lane == 0 {
                    ms[i] = m_new;
                    ls[i] = l_new;
                    cs[i] = correction;
                }
            }
            sync_cube();

            // Output: plane `p` owns the 16-column tiles p, p + 8, … of every query tile.
            #[unroll]
            for c in 0..comptime!(d_tiles.div_ceil(TILE_PLANES)) {
                let dt = c * TILE_PLANES + plane;
                if dt < d_tiles {
                    let mut e = lane;
                    while e < comptime!(TILE_QUERIES * 16) {
                        let at = (e / 16) * o_pitch + dt * 16 + e % 16;
                        o_s[at] = o_s[at] * cs[e / 16];
                        e += 32;
                    }
                    sync_plane();
                    #[unroll]
                    for mt in 0..q_tiles {
                        let at_o = mt * 16 * o_pitch + dt * 16;
                        // SAFETY: loaded on the next line.
                        let acc = unsafe {
                            cmma::Matrix::<f32>::uninitialized(
                                cmma::MatrixIdent::Accumulator,
                                16usize,
                                16usize,
                                16usize,
                                cmma::MatrixLayout::Undefined,
                            )
                        };
                        cmma::load_with_layout(
                            &acc,
                            &o_s.slice(at_o, comptime!(TILE_QUERIES * o_pitch)),
                            comptime!(o_pitch) as u32,
                            cmma::MatrixLayout::RowMajor,
                        );
                        #[unroll]
                        for kt in 0..key_tiles {
                            // SAFETY: loaded on the next line.
                            let a = unsafe {
                                cmma::Matrix::<F>::uninitialized(
                                    cmma::MatrixIdent::A,
                                    16usize,
                                    16usize,
                                    16usize,
                                    cmma::MatrixLayout::RowMajor,
                                )
                            };
                            let at = mt * 16 * p_pitch + kt * 16;
                            cmma::load(
                                &a,
                                &p_s.slice(at, comptime!(TILE_QUERIES * p_pitch)),
                                comptime!(p_pitch) as u32,
                            );
                            // SAFETY: loaded on the next line.
                            let a_lo = unsafe {
                                cmma::Matrix::<F>::uninitialized(
                                    cmma::MatrixIdent::A,
                                    16usize,
                                    16usize,
                                    16usize,
                                    cmma::MatrixLayout::RowMajor,
                                )
                            };
                            cmma::load(
                                &a_lo,
                                &p_lo.slice(at, comptime!(TILE_QUERIES * p_pitch)),
                                comptime!(p_pitch) as u32,
                            );
                            // SAFETY: loaded on the next line.
                            let b = unsafe {
                                cmma::Matrix::<F>::uninitialized(
                                    cmma::MatrixIdent::B,
                                    16usize,
                                    16usize,
                                    16usize,
                                    cmma::MatrixLayout::RowMajor,
                                )
                            };
                            let at = kt * 16 * kv_pitch + dt * comptime!(16 / vec);
                            cmma::load(&b, &v_s.slice(at, kv_len_s), comptime!(kv_pitch * vec) as u32);
                            cmma::execute::<F, F, f32, f32>(&a, &b, &acc, &acc);
                            cmma::execute::<F, F, f32, f32>(&a_lo, &b, &acc, &acc);
                        }
                        cmma::store(
                            &mut o_s.slice_mut(at_o, comptime!(TILE_QUERIES * o_pitch)),
                            &acc,
                            comptime!(o_pitch) as u32,
                            cmma::MatrixLayout::RowMajor,
                        );
                    }
                }
            }
        }
        if step < steps {
            // Every plane is done with the previous step's keys and values.
            sync_cube();
            #[unroll]
            for r in 0..stage_per_unit {
                let e = r * units + unit;
                if e < comptime!(TILE_KEYS * head_vecs) {
                    let at = (e / head_vecs) * kv_pitch + e % head_vecs;
                    k_s[at] = k_next[r];
                    v_s[at] = v_next[r];
                }
            }
            sync_cube();
        }
        step += 1;
    }
    sync_cube();

    let mut e = unit;
    while e < comptime!(TILE_QUERIES * head_dim) {
        let i = e / head_dim;
        let d = e % head_dim;
        let j = first + i;
        if j < queries {
            let query = (j / group) * q_heads + kv_head * group + j % group;
            let value = o_s[i * o_pitch + d];
            if splits == 1 {
                out[query * head_dim + d] = F::cast_from(value / ls[i]);
            } else {
                part_acc[(split * rows * q_heads + query) * head_dim + d] = value;
            }
        }
        e += units;
    }
    if splits > 1 && unit < TILE_QUERIES {
        let j = first + unit;
        if j < queries {
            let query = (j / group) * q_heads + kv_head * group + j % group;
            part_ml[2 * (split * rows * q_heads + query)] = ms[unit];
            part_ml[2 * (split * rows * q_heads + query) + 1] = ls[unit];
        }
    }
}

/// Merges the splits of [`attention_splits()`], [`attention_tiles()`] or
/// [`super::attention_mma::attention_mma()`]: a plane per query ([`merge_splits()`]).
/// Launch with `CubeCount = ⌈queries / planes⌉`, `CubeDim = (plane, planes)`.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn attention_combine<F: Float>(
    part_acc: &Array<f32>,
    part_ml: &Array<f32>,
    out: &mut Array<F>,
    queries: usize,
    splits: usize,
    #[comptime] head_dim: usize,
    #[comptime] plane: usize,
) {
    let query = CUBE_POS_X as usize * CUBE_DIM_Y as usize + UNIT_POS_Y as usize;
    if query < queries {
        merge_splits::<F>(
            part_acc,
            part_ml,
            out,
            query,
            queries,
            splits,
            UNIT_POS_X as usize,
            head_dim,
            plane,
        );
    }
}

/// Splits whose loads one plane of [`merge_splits()`] has in flight at once.
pub const MERGE_AHEAD: usize = 12;

/// `out[query] = Σ_s acc_s · e^(m_s − M) / Σ_s l_s · e^(m_s − M)` over the `splits` partial
/// results of `query` (`M` their maximum), by one plane: lanes over the head dimension, the
/// splits in order, [`MERGE_AHEAD`] at a time with every load of a group in flight together (a
/// walk of one split after the other costs a memory latency per split); a group raises the
/// running maximum and rescales what came before, as the attention kernels do over keys. Every
/// lane computes the maxima and sums itself, the same bits everywhere. Split `s` of query `q`
/// lies at `s · queries + q` of `part_ml` (maximum, sum) and of `part_acc` (`head_dim` values).
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn merge_splits<F: Float>(
    part_acc: &Array<f32>,
    part_ml: &Array<f32>,
    out: &mut Array<F>,
    query: usize,
    queries: usize,
    splits: usize,
    lane: usize,
    #[comptime] head_dim: usize,
    #[comptime] plane: usize,
) {
    let per_lane = comptime!(head_dim.div_ceil(plane));
    let mut top = f32::min_value();
    let mut total = 0.0f32;
    let mut acc = Array::<f32>::new(per_lane);
    #[unroll]
    for t in 0..per_lane {
        acc[t] = 0.0f32;
    }
    let mut first = 0usize;
    while first < splits {
        // A group's loads first; past the last split, the last one again (weighed 0).
        let mut ms = Array::<f32>::new(MERGE_AHEAD);
        let mut ls = Array::<f32>::new(MERGE_AHEAD);
        let mut vals = Array::<f32>::new(comptime!(MERGE_AHEAD * per_lane));
        #[unroll]
        for i in 0..MERGE_AHEAD {
            let at = usize::min(first + i, splits - 1) * queries + query;
            ms[i] = part_ml[2 * at];
            ls[i] = part_ml[2 * at + 1];
            #[unroll]
            for t in 0..per_lane {
                let d = usize::min(lane + t * plane, head_dim - 1);
                vals[comptime!(i * per_lane + t)] = part_acc[at * head_dim + d];
            }
        }
        let mut group_top = top;
        #[unroll]
        for i in 0..MERGE_AHEAD {
            group_top = f32::max(group_top, ms[i]);
        }
        let rescale = f32::exp(top - group_top);
        top = group_top;
        total *= rescale;
        #[unroll]
        for t in 0..per_lane {
            acc[t] *= rescale;
        }
        #[unroll]
        for i in 0..MERGE_AHEAD {
            let w = select(first + i < splits, f32::exp(ms[i] - top), 0.0f32);
            total += ls[i] * w;
            #[unroll]
            for t in 0..per_lane {
                acc[t] += vals[comptime!(i * per_lane + t)] * w;
            }
        }
        first += MERGE_AHEAD;
    }
    #[unroll]
    for t in 0..per_lane {
        let d = lane + t * plane;
        if d < head_dim {
            out[query * head_dim + d] = F::cast_from(acc[t] / total);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One score tile per plane, and the tiles of Qwen3 (head_dim 128) and Qwen3.5 (256) fit an
    /// H100/H200's 227 KB of shared memory.
    #[test]
    fn tile_constants_agree() {
        assert_eq!((TILE_QUERIES / 16) * (TILE_KEYS / 16), TILE_PLANES);
        assert_eq!(TILE_QUERIES % TILE_PLANES, 0);
        assert_eq!(TILE_KEYS % 32, 0);
        assert!(
            tiles_shared_bytes(128, 2) <= 100 * 1024,
            "{}",
            tiles_shared_bytes(128, 2)
        );
        assert!(
            tiles_shared_bytes(256, 2) <= 227 * 1024,
            "{}",
            tiles_shared_bytes(256, 2)
        );
    }
}

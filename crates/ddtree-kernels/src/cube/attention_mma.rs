//! Attention of a block of rows (tree verify, drafter blocks, AR steps) on tensor cores with
//! `mma.sync` m16n8k16 and register-resident fragments, flash-attention style: scores, softmax
//! weights and the output accumulator never leave the registers. Same arguments and outputs as
//! [`super::attention::attention_tiles()`], which it replaces where the head dimension allows.
//! AR and verify share the kernel; with AR's four queries per KV head its planes share the
//! queries and split the keys instead (`split_keys`). On CUDA the blocks of rows (without
//! `split_keys`) take [`super::attention_rows::attention_rows()`], the same design with its loop
//! written in CUDA C++.
//! Reference: [`crate::reference::cached_attention`].

use cubecl::prelude::barrier::{Barrier, copy_async};
use cubecl::prelude::*;

use super::attention::{FULL, merge_splits, sees};
use super::fence::last_cube;
use super::rope::{normalise_head, rotated_dim};

/// Planes per cube of [`attention_mma()`], each with [`MMA_PLANE_QUERIES`] queries of the cube's
/// KV head.
pub const MMA_QUERY_PLANES: usize = 4;
/// Queries per plane of [`attention_mma()`]: the 16 rows of an `mma.sync` m16n8k16 tile. With
/// `split_keys` they are the whole cube's.
pub const MMA_PLANE_QUERIES: usize = 16;
/// Queries per cube of [`attention_mma()`].
pub const MMA_QUERIES: usize = MMA_PLANE_QUERIES * MMA_QUERY_PLANES;
/// Keys per step of [`attention_mma()`].
pub const MMA_KEYS: usize = 64;
/// The largest head dimension [`attention_mma()`] takes: its output accumulator (`head_dim / 2`
/// f32 per lane) and query fragments (`head_dim / 4` words) live in registers.
pub const MMA_MAX_HEAD_DIM: usize = 128;

/// Shared memory of an [`attention_mma()`] cube for `head_dim` and `elem`-byte floats, at most:
/// three slots of [`MMA_KEYS`] keys and values, rows padded by 16 bytes; with `split_keys`, two
/// slots, the other planes' f32 accumulators, maxima and sums for the merge, and with `project`
/// the normalised and the rotated heads (up to 16 queries and a key).
pub fn mma_shared_bytes(head_dim: usize, elem: usize) -> usize {
    let step = 2 * MMA_KEYS * (head_dim * elem + 16);
    let merge = (MMA_QUERY_PLANES - 1) * 16 * (merge_pitch(head_dim) + 2) * 4;
    let staged = 2 * (MMA_PLANE_QUERIES + 1) * head_dim * elem;
    usize::max(mma_slots(false) * step, mma_slots(true) * step + merge + staged)
}

/// Shared-memory slots of [`attention_mma()`]'s keys and values.
fn mma_slots(split_keys: bool) -> usize {
    if split_keys { 2 } else { 3 }
}

/// The f32 row pitch of [`merge_planes()`]'s accumulators: eight floats of padding put the
/// rows `g` (0–7) that the lanes of a plane write at once on different banks (8-way conflicts
/// with rows of `head_dim`, a multiple of 32 floats; at most 2-way with the padding).
fn merge_pitch(head_dim: usize) -> usize {
    head_dim + 8
}

/// Attention over the committed prefix plus the block's rows for one KV head, [`MMA_QUERIES`]
/// of its queries (numbered `j = row · group + head_in_group`, as in
/// [`super::attention::attention_tiles()`]) and one split of the keys, walked [`MMA_KEYS`] at a
/// time.
///
/// Each plane holds the `Q` fragments of its 16 queries for the whole walk (read once from `q`,
/// passed as 32-bit words). A step's keys and values are copied asynchronously (`cp.async`) into
/// one of three shared-memory slots (two with `split_keys`), as many steps ahead of the one
/// being consumed as the other slots hold; one barrier per slot both waits
/// for the bytes and tells that every unit has finished the slot's previous step (the pattern of
/// [`super::linear::linear_mma()`]). Per step and plane: `S = Q·Kᵀ` (16 × 64, K fragments by
/// `ldmatrix`), the online softmax on the accumulator fragments themselves — a lane holds two
/// query rows (`g`, `g + 8`, `g = lane / 4`), the four lanes of a row meet by shuffles — and
/// `O += P·V`, where the score accumulators of two key tiles are exactly the `P` fragment of one
/// k-step and the V fragments come transposed by `ldmatrix.trans`. Each weight is the sum of two
/// `F` values (two MMAs), so that `P·V` is as exact as the f32 sums of
/// [`super::attention::attention_splits()`]. Keys past the split's end are copied from its last
/// key (finite values) and masked. Only the steps that reach the block's rows, the split's end or
/// a window test each score's visibility; a step of prefix keys (all keys in `FULL` mode) is seen
/// by every query and skips the test — in a verify, all but the last step or two of the walk.
/// Planes whose queries all lie past the last only copy keys and meet the barriers.
///
/// With `split_keys` (for at most 16 queries per KV head, as in an AR step) the planes share
/// the cube's 16 queries and each takes its own 16 keys of every step: one plane with all the
/// work would walk a dependent chain four times as long while three planes idle. The planes'
/// running maxima, sums and accumulators are then merged through shared memory, in plane order.
///
/// With `project` (an AR step: one row, `split_keys`) `q` is not read: the cube normalises and
/// rotates its query heads from the QKV projection row in `rotation` itself, and the cube of the
/// last split also the new key, which it writes with its value into the caches at row
/// `prefix_len` before copying keys — the launch of [`super::rope::qk_norm_rope_write_rows()`]
/// folded in, in its arithmetic (the same bits). The other splits issue their first copies first.
///
/// With `fold` (`split_keys`, more than one split; CUDA only, for its fence) the cube that
/// stores a KV head's last partial results merges the head's splits itself ([`last_cube()`] on
/// `counters[kv_head]`, [`merge_splits()`] a plane per query) — the launch of
/// [`super::attention::attention_combine()`] folded in, in its arithmetic (the same bits).
///
/// With `fast_exp` the softmax's exponentials are the GPU's `ex2` approximation ([`fast_exp()`])
/// instead of the accurate `expf`, which takes about twice its instructions.
///
/// Launch with `CubeCount = (kv_heads, splits, ⌈rows · group / queries per cube⌉)` — the
/// queries per cube are [`MMA_QUERIES`], or [`MMA_PLANE_QUERIES`] with `split_keys` —,
/// `CubeDim = (32, MMA_QUERY_PLANES)`, `N` 16 bytes of `F` (a 2-byte float), `head_dim` a
/// multiple of 32 up to [`MMA_MAX_HEAD_DIM`], `keys_per_split` a multiple of [`MMA_KEYS`].
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments, clippy::collapsible_if)]
pub fn attention_mma<F: Float, N: Size>(
    q: &Array<u32>,
    k: &mut Array<Vector<F, N>>,
    v: &mut Array<Vector<F, N>>,
    bits: &Array<u32>,
    out: &mut Array<F>,
    part_acc: &mut Array<f32>,
    part_ml: &mut Array<f32>,
    rotation: &Rotation<F>,
    counters: &Array<Atomic<u32>>,
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
    #[comptime] split_keys: bool,
    #[comptime] project: bool,
    #[comptime] fold: bool,
    #[comptime] fast_exp: bool,
) {
    let def = cmma::MmaDefinition::<F, F, f32>::new(16usize, 8usize, 16usize);
    let size!(NA) = def.vector_size(cmma::MatrixIdent::A);
    let size!(NC) = def.vector_size(cmma::MatrixIdent::Accumulator);
    let group = comptime!(q_heads / kv_heads);
    let vec = N::value();
    let head_vecs = comptime!(head_dim / vec);
    let pitch = comptime!(head_vecs + 1);
    let slot = comptime!(MMA_KEYS * pitch);
    let d_steps = comptime!(head_dim / 16);
    let d_tiles = comptime!(head_dim / 8);
    let key_tiles = comptime!(MMA_KEYS / 8);
    // The key tiles of a step that a plane takes (with `split_keys` a quarter, from `key0`).
    let plane_tiles = comptime!(if split_keys {
        key_tiles / MMA_QUERY_PLANES
    } else {
        key_tiles
    });
    let units = comptime!(32 * MMA_QUERY_PLANES);

    let kv_head = CUBE_POS_X as usize;
    let split = CUBE_POS_Y as usize;
    let plane = UNIT_POS_Y as usize;
    let lane = UNIT_POS_X as usize;
    let unit = UNIT_POS as usize;
    let g = lane / 4;
    let t = lane % 4;
    let mut first = CUBE_POS_Z as usize * MMA_QUERIES + plane * MMA_PLANE_QUERIES;
    let mut key0 = 0usize;
    if comptime!(split_keys) {
        first = CUBE_POS_Z as usize * MMA_PLANE_QUERIES;
        key0 = plane * comptime!(8 * plane_tiles);
    }
    let queries = rows * group;
    let active = first < queries;
    let kv_len = prefix_len + rows;
    let key_start = split * keys_per_split;
    let key_end = usize::min(kv_len, key_start + keys_per_split);
    let steps = (key_end - key_start).div_ceil(MMA_KEYS);
    // Keys before `open_end` are seen by every query (without a window): the prefix, and in
    // `FULL` mode the block too.
    let open_end = if comptime!(mode == FULL) {
        key_end
    } else {
        usize::min(prefix_len, key_end)
    };
    let kv_base = kv_head * head_stride / vec;
    let row_vecs = row_stride / vec;

    // Shared-memory slots of a step's keys and values: `slots − 1` steps load while one is
    // consumed (two with `split_keys`, whose merge needs the room and whose cubes walk one step).
    let slots = comptime!(mma_slots(split_keys));
    let mut k_s = SharedMemory::<Vector<F, N>>::new_aligned(comptime!(slots * slot), 16usize);
    let mut v_s = SharedMemory::<Vector<F, N>>::new_aligned(comptime!(slots * slot), 16usize);
    let mut barriers = Sequence::<Shared<Barrier>>::new();
    #[unroll]
    for _ in 0..slots {
        barriers.push(Barrier::shared(CUBE_DIM, UNIT_POS == 0));
    }
    let walk = Walk {
        steps,
        key_start,
        key_end,
        kv_base,
        row_vecs,
        unit,
    };

    // With `project`, the queries are normalised and rotated here (and the new key written
    // before its split's cube copies it); the other splits' first copies go out first.
    let staged_len = comptime!(if project { (group + 1) * head_dim } else { 1 });
    let mut staged = SharedMemory::<F>::new(staged_len);
    let mut q_s = SharedMemory::<F>::new(staged_len);
    let write_key = comptime!(project) && split + 1 == splits;
    if !write_key {
        copy_ahead::<F, N>(
            k, v, &mut k_s, &mut v_s, &barriers, &walk, head_vecs, units, slots,
        );
    }
    if comptime!(project) {
        project_heads::<F, N>(
            rotation,
            k,
            v,
            &mut staged,
            &mut q_s,
            kv_head,
            write_key,
            kv_base + prefix_len * row_vecs,
            plane,
            lane,
            unit,
            group,
            kv_heads,
            head_dim,
        );
        if write_key {
            copy_ahead::<F, N>(
                k, v, &mut k_s, &mut v_s, &barriers, &walk, head_vecs, units, slots,
            );
        }
    }

    // The plane's query fragments: k-step `s` holds rows g / g + 8 at dims 16s + 2t (+ 8).
    let mut qf = Sequence::<Array<Vector<F, NA>>>::new();
    #[unroll]
    for _ in 0..d_steps {
        qf.push(Array::<Vector<F, NA>>::new(4usize));
    }
    #[unroll]
    for h in 0..2usize {
        let j = first + g + comptime!(8 * h);
        let mut base = 0usize;
        if j < queries {
            base = ((j / group) * q_heads + kv_head * group + j % group) * comptime!(head_dim / 2);
        }
        #[unroll]
        for s in 0..d_steps {
            #[unroll]
            for half in 0..2usize {
                if comptime!(project) {
                    // One row: query `j` is the KV head's query head `j`, staged in `q_s`.
                    let mut pair = Vector::<F, NA>::empty();
                    #[unroll]
                    for e in 0..2usize {
                        let mut x = F::new(0.0);
                        if j < queries {
                            x = q_s[j * head_dim + comptime!(16 * s + 8 * half + e) + 2 * t];
                        }
                        pair[e] = x;
                    }
                    qf.index_mut(s)[comptime!(2 * half + h)] = pair;
                } else {
                    let mut word = 0u32;
                    if j < queries {
                        word = q[base + comptime!(8 * s + 4 * half) + t];
                    }
                    qf.index_mut(s)[comptime!(2 * half + h)] = Vector::<F, NA>::reinterpret(word);
                }
            }
        }
    }
    let mut acc_o = Sequence::<Array<Vector<f32, NC>>>::new();
    #[unroll]
    for _ in 0..d_tiles {
        let mut acc = Array::<Vector<f32, NC>>::new(2usize);
        acc[0] = Vector::<f32, NC>::new(0.0);
        acc[1] = Vector::<f32, NC>::new(0.0);
        acc_o.push(acc);
    }
    // Rows g and g + 8: running maximum, and this lane's share of the running sum.
    let mut m = Array::<f32>::new(2usize);
    let mut l = Array::<f32>::new(2usize);
    #[unroll]
    for h in 0..2usize {
        m[h] = f32::min_value();
        l[h] = 0.0f32;
    }

    for step in 0..steps {
        // The slot is chosen at run time, so the step's code exists once (unrolled per slot it
        // outgrew the instruction cache); only the barriers branch on the slot.
        let s = step % slots;
        slot_wait(&barriers, s, slots);
        // Every unit is past the previous step: its slot takes the step `slots − 1` ahead.
        let ahead = step + comptime!(slots - 1);
        if ahead < steps {
            let refill = ahead % slots;
            copy_keys::<F, N>(
                k,
                v,
                &mut k_s,
                &mut v_s,
                refill * slot,
                ahead,
                &walk,
                head_vecs,
                units,
            );
            slot_commit(&barriers, refill, slots);
        }
        // A plane whose queries all lie past the last (the last block's) only takes part
        // in the copies and barriers.
        if active {
            let at = s * slot;
            let tile = key_start + step * MMA_KEYS;

            // S = Q·Kᵀ: ldmatrix gives a lane key `g` of a key tile at dims 2t, 2t + 1 of
            // four 8-dim groups (two k-steps).
            let mut acc_s = Sequence::<Array<Vector<f32, NC>>>::new();
            #[unroll]
            for _ in 0..plane_tiles {
                let mut acc = Array::<Vector<f32, NC>>::new(2usize);
                acc[0] = Vector::<f32, NC>::new(0.0);
                acc[1] = Vector::<f32, NC>::new(0.0);
                acc_s.push(acc);
            }
            #[unroll]
            for s2 in 0..comptime!(d_steps / 2) {
                #[unroll]
                for nt in 0..plane_tiles {
                    let row =
                        at + (key0 + comptime!(8 * nt) + lane % 8) * pitch + comptime!(4 * s2) + lane / 8;
                    let kf = def.load_matrix::<Vector<F, N>, NA>(
                        &k_s.slice(row, row + 1),
                        cmma::MatrixIdent::B,
                        4usize,
                        false,
                    );
                    #[unroll]
                    for half in 0..2usize {
                        let mut b = Array::<Vector<F, NA>>::new(2usize);
                        b[0] = kf[comptime!(2 * half)];
                        b[1] = kf[comptime!(2 * half + 1)];
                        def.execute_inplace(qf.index(comptime!(2 * s2 + half)), &b, acc_s.index_mut(nt));
                    }
                }
            }

            // Online softmax on the fragments: element (h, e) of key tile nt is query row
            // g + 8h, key tile + 8nt + 2t + e. A step of keys that every query sees skips
            // the mask (same scores for the rows that exist); `masked` is a compile-time
            // argument, so the two calls are the kernel's two versions of the step.
            let mut tops = Array::<f32>::new(2usize);
            let keys = Keys {
                first,
                group,
                queries,
                tile: tile + key0,
                key_end,
                prefix_len,
                words,
                window,
            };
            if window == 0 && tile + MMA_KEYS <= open_end {
                scale_scores::<NC>(
                    &mut acc_s,
                    &mut tops,
                    bits,
                    &keys,
                    scale,
                    g,
                    t,
                    plane_tiles,
                    mode,
                    false,
                );
            } else {
                scale_scores::<NC>(
                    &mut acc_s,
                    &mut tops,
                    bits,
                    &keys,
                    scale,
                    g,
                    t,
                    plane_tiles,
                    mode,
                    true,
                );
            }
            let mut corr = Array::<f32>::new(2usize);
            #[unroll]
            for h in 0..2usize {
                let mut top = tops[h];
                top = f32::max(top, plane_shuffle_xor(top, 1u32));
                top = f32::max(top, plane_shuffle_xor(top, 2u32));
                let m_new = f32::max(m[h], top);
                corr[h] = softmax_exp(m[h] - m_new, fast_exp);
                m[h] = m_new;
                let mut sum = 0.0f32;
                #[unroll]
                for nt in 0..plane_tiles {
                    let mut weights = acc_s.index(nt)[h];
                    #[unroll]
                    for e in 0..2usize {
                        let w = select(
                            weights[e] > f32::min_value(),
                            softmax_exp(weights[e] - m_new, fast_exp),
                            0.0f32,
                        );
                        weights[e] = w;
                        sum += w;
                    }
                    acc_s.index_mut(nt)[h] = weights;
                }
                l[h] = l[h] * corr[h] + sum;
            }
            #[unroll]
            for dt in 0..d_tiles {
                #[unroll]
                for h in 0..2usize {
                    let scaled = acc_o.index(dt)[h] * Vector::<f32, NC>::new(corr[h]);
                    acc_o.index_mut(dt)[h] = scaled;
                }
            }

            // O += P·V: key tiles 2kk and 2kk + 1 are the P fragment of k-step kk, split into
            // high and low `F` parts; ldmatrix.trans gives V at keys 2t, 2t + 1 (+ 8) of a dim.
            #[unroll]
            for kk in 0..comptime!(plane_tiles / 2) {
                let mut p_hi = Array::<Vector<F, NA>>::new(4usize);
                let mut p_lo = Array::<Vector<F, NA>>::new(4usize);
                #[unroll]
                for i in 0..4usize {
                    let w = acc_s.index(comptime!(2 * kk + i / 2))[comptime!(i % 2)];
                    let mut hi = Vector::<F, NA>::empty();
                    let mut lo = Vector::<F, NA>::empty();
                    #[unroll]
                    for e in 0..2usize {
                        let high = F::cast_from(w[e]);
                        hi[e] = high;
                        lo[e] = F::cast_from(w[e] - f32::cast_from(high));
                    }
                    p_hi[i] = hi;
                    p_lo[i] = lo;
                }
                #[unroll]
                for dp in 0..comptime!(d_tiles / 2) {
                    let key = key0 + comptime!(16 * kk) + ((lane / 8) % 2) * 8 + lane % 8;
                    let row = at + key * pitch + comptime!(2 * dp) + lane / 16;
                    let vf = def.load_matrix::<Vector<F, N>, NA>(
                        &v_s.slice(row, row + 1),
                        cmma::MatrixIdent::B,
                        4usize,
                        true,
                    );
                    #[unroll]
                    for half in 0..2usize {
                        let mut b = Array::<Vector<F, NA>>::new(2usize);
                        b[0] = vf[comptime!(2 * half)];
                        b[1] = vf[comptime!(2 * half + 1)];
                        def.execute_inplace(&p_hi, &b, acc_o.index_mut(comptime!(2 * dp + half)));
                        def.execute_inplace(&p_lo, &b, acc_o.index_mut(comptime!(2 * dp + half)));
                    }
                }
            }
        }
    }

    // The row sums over the four lanes of each row, then the output or the split's partials.
    #[unroll]
    for h in 0..2usize {
        let mut sum = l[h];
        sum += plane_shuffle_xor(sum, 1u32);
        sum += plane_shuffle_xor(sum, 2u32);
        l[h] = sum;
    }
    if comptime!(split_keys) {
        merge_planes(&mut acc_o, &mut m, &mut l, plane, g, t, head_dim);
    }
    #[unroll]
    for h in 0..2usize {
        let j = first + g + comptime!(8 * h);
        if j < queries && (!split_keys || plane == 0) {
            let query = (j / group) * q_heads + kv_head * group + j % group;
            #[unroll]
            for dt in 0..d_tiles {
                let o = acc_o.index(dt)[h];
                #[unroll]
                for e in 0..2usize {
                    let d = comptime!(8 * dt + e) + 2 * t;
                    if splits == 1 {
                        out[query * head_dim + d] = F::cast_from(o[e] / l[h]);
                    } else {
                        part_acc[(split * rows * q_heads + query) * head_dim + d] = o[e];
                    }
                }
            }
            if splits > 1 && t == 0 {
                part_ml[2 * (split * rows * q_heads + query)] = m[h];
                part_ml[2 * (split * rows * q_heads + query) + 1] = l[h];
            }
        }
    }
    // With `fold`, the last of a KV head's splits to finish merges them, a plane per query.
    if comptime!(fold) {
        if last_cube(counters, kv_head, splits, true) {
            let mut j = first + plane;
            while j < usize::min(queries, first + MMA_PLANE_QUERIES) {
                let query = (j / group) * q_heads + kv_head * group + j % group;
                merge_splits::<F>(
                    part_acc,
                    part_ml,
                    out,
                    query,
                    rows * q_heads,
                    splits,
                    lane,
                    head_dim,
                    32usize,
                );
                j += MMA_QUERY_PLANES;
            }
        }
    }
}

/// `e^x` for [`attention_mma()`]'s softmax: [`fast_exp()`] where `fast`, else the accurate `expf`.
#[cube]
fn softmax_exp(x: f32, #[comptime] fast: bool) -> f32 {
    if comptime!(fast) { fast_exp(x) } else { f32::exp(x) }
}

/// `e^x` as `__expf`, an `ex2.approx` of `x · log2 e`. CUDA's intrinsic-function table puts its
/// error at about 2 + 1.2 · |x| ulp: ≈ 3e-6 relative at `x = −20`, where a softmax weight is
/// already below 2⁻²⁸, so far below the bf16 weights' 2⁻⁹. cubecl emits it for an f32 `exp`
/// only in reduced-precision mode.
#[cube(fast_math = FastMath::ReducedPrecision | FastMath::NotNaN | FastMath::NotInf)]
pub fn fast_exp(x: f32) -> f32 {
    f32::exp(x)
}

/// What [`attention_mma()`] reads with `project` to normalise and rotate an AR step's queries and
/// its new key itself, in the arithmetic of [`super::rope::qk_norm_rope_write_rows()`] (the same
/// bits, one launch fewer per layer). Without `project` the kernel never reads it.
#[derive(CubeLaunch, CubeType)]
pub struct Rotation<F: Float> {
    /// The fused QKV projection of the row: queries from column 0, keys from `k_at`, values
    /// after the keys.
    pub qkv: Array<F>,
    /// Per-head query RMSNorm weight, `[head_dim]`.
    pub q_norm: Array<F>,
    /// Per-head key RMSNorm weight, `[head_dim]`.
    pub k_norm: Array<F>,
    /// The row's rotary cos, `[half]`.
    pub cos: Array<F>,
    /// The row's rotary sin, `[half]`.
    pub sin: Array<F>,
    /// The first column of the keys.
    pub k_at: usize,
    /// Rotated dims per half of a head (the first `2 · half` dims rotate).
    pub half: usize,
    /// The query norm's epsilon.
    pub q_eps: f32,
    /// The key norm's epsilon.
    pub k_eps: f32,
}

/// With `project` (an AR step: one row), the step of [`super::rope::qk_norm_rope_write_rows()`]
/// for the cube's KV head, through its helpers (the same bits). Plane `p` takes slots `p, p + 4,
/// …`: slots `0..group` are the KV head's query heads, normalised and rotated into `q_s`; with
/// `write_key` (the cube of the split that holds the new key) slot `group` is that key, written
/// with its value into the caches at vector `cell`, all before the cube copies any key.
#[cube]
#[allow(clippy::too_many_arguments)]
fn project_heads<F: Float, N: Size>(
    rotation: &Rotation<F>,
    k: &mut Array<Vector<F, N>>,
    v: &mut Array<Vector<F, N>>,
    staged: &mut SharedMemory<F>,
    q_s: &mut SharedMemory<F>,
    kv_head: usize,
    write_key: bool,
    cell: usize,
    plane: usize,
    lane: usize,
    unit: usize,
    #[comptime] group: usize,
    #[comptime] kv_heads: usize,
    #[comptime] head_dim: usize,
) {
    let per_lane = comptime!(head_dim.div_ceil(32));
    let rounds = comptime!((group + 1).div_ceil(MMA_QUERY_PLANES));
    let slots = group + select(write_key, 1usize, 0usize);
    #[unroll]
    for r in 0..rounds {
        let slot = comptime!(r * MMA_QUERY_PLANES) + plane;
        if slot < slots {
            let is_query = slot < group;
            let src = select(
                is_query,
                (kv_head * group + slot) * head_dim,
                rotation.k_at + kv_head * head_dim,
            );
            let eps = select(is_query, rotation.q_eps, rotation.k_eps);
            normalise_head::<F, F>(
                &rotation.qkv,
                src,
                0usize,
                &rotation.q_norm,
                &rotation.k_norm,
                is_query,
                eps,
                staged,
                slot * head_dim,
                lane,
                1usize,
                head_dim,
                32usize,
            );
        }
    }
    sync_cube();
    #[unroll]
    for r in 0..rounds {
        let slot = comptime!(r * MMA_QUERY_PLANES) + plane;
        if slot < slots {
            let at = slot * head_dim;
            #[unroll]
            for i in 0..per_lane {
                let d = lane + comptime!(32 * i);
                if d < head_dim {
                    let out =
                        rotated_dim::<F>(staged, at, d, &rotation.cos, &rotation.sin, 0usize, rotation.half);
                    q_s[at + d] = F::cast_from(out);
                }
            }
        }
    }
    sync_cube();
    if write_key {
        let vec = N::value();
        let head_vecs = comptime!(head_dim / vec);
        let i = unit % head_vecs;
        let mut row = Vector::<F, N>::empty();
        if unit < head_vecs {
            #[unroll]
            for e in 0..vec {
                row[e] = q_s[comptime!(group * head_dim) + i * vec + e];
            }
            k[cell + i] = row;
        } else if unit < 2 * head_vecs {
            let src = rotation.k_at + comptime!(kv_heads * head_dim) + kv_head * head_dim + i * vec;
            #[unroll]
            for e in 0..vec {
                row[e] = rotation.qkv[src + e];
            }
            v[cell + i] = row;
        }
        // The writes land before the cube's copies read them back.
        sync_cube();
    }
}

/// Where a cube's keys lie and which unit copies, for [`copy_keys()`].
#[derive(CubeType, Clone, Copy)]
struct Walk {
    steps: usize,
    key_start: usize,
    key_end: usize,
    kv_base: usize,
    row_vecs: usize,
    unit: usize,
}

/// Issues the copies of the walk's first `slots − 1` steps, one slot each.
#[cube]
#[allow(clippy::too_many_arguments)]
fn copy_ahead<F: Float, N: Size>(
    k: &Array<Vector<F, N>>,
    v: &Array<Vector<F, N>>,
    k_s: &mut SharedMemory<Vector<F, N>>,
    v_s: &mut SharedMemory<Vector<F, N>>,
    barriers: &Sequence<Shared<Barrier>>,
    walk: &Walk,
    #[comptime] head_vecs: usize,
    #[comptime] units: usize,
    #[comptime] slots: usize,
) {
    let slot = comptime!(MMA_KEYS * (head_vecs + 1));
    #[unroll]
    for ahead in 0..comptime!(slots - 1) {
        if ahead < walk.steps {
            copy_keys::<F, N>(
                k,
                v,
                k_s,
                v_s,
                comptime!(ahead * slot),
                ahead,
                walk,
                head_vecs,
                units,
            );
            barriers.index(ahead).commit_copy_async();
        }
    }
}

/// Waits on slot `s`'s barrier (its keys and values arrived, every unit is past its previous
/// step).
#[cube]
fn slot_wait(barriers: &Sequence<Shared<Barrier>>, s: usize, #[comptime] slots: usize) {
    #[unroll]
    for i in 0..slots {
        if s == i {
            barriers.index(i).arrive_and_wait();
        }
    }
}

/// Commits this unit's copies of a step to slot `s`'s barrier.
#[cube]
fn slot_commit(barriers: &Sequence<Shared<Barrier>>, s: usize, #[comptime] slots: usize) {
    #[unroll]
    for i in 0..slots {
        if s == i {
            barriers.index(i).commit_copy_async();
        }
    }
}

/// Where a plane's keys of one step lie, for [`scale_scores()`].
#[derive(CubeType, Clone, Copy)]
struct Keys {
    /// The plane's first query (rows `g`, `g + 8` of its tile are queries `first + g (+ 8)`).
    first: usize,
    group: usize,
    queries: usize,
    /// The plane's first key of the step.
    tile: usize,
    key_end: usize,
    prefix_len: usize,
    words: usize,
    window: usize,
}

/// Scales a plane's scores of one step in place and puts the maximum of each of the lane's two
/// rows into `tops`; with `masked`, keys a row does not see (or past the split's end, or of a
/// query past the last) score `f32::min_value()`, below any real score.
#[cube]
#[allow(clippy::too_many_arguments)]
fn scale_scores<NC: Size>(
    acc_s: &mut Sequence<Array<Vector<f32, NC>>>,
    tops: &mut Array<f32>,
    bits: &Array<u32>,
    keys: &Keys,
    scale: f32,
    g: usize,
    t: usize,
    #[comptime] plane_tiles: usize,
    #[comptime] mode: u32,
    #[comptime] masked: bool,
) {
    #[unroll]
    for h in 0..2usize {
        let j = keys.first + g + comptime!(8 * h);
        let row = j / keys.group;
        let mut top = f32::min_value();
        #[unroll]
        for nt in 0..plane_tiles {
            let mut scores = acc_s.index(nt)[h];
            #[unroll]
            for e in 0..2usize {
                if comptime!(masked) {
                    let key = keys.tile + comptime!(8 * nt + e) + 2 * t;
                    let mut visible = j < keys.queries && key < keys.key_end;
                    if visible {
                        visible = sees(bits, row, key, keys.prefix_len, keys.words, keys.window, mode);
                    }
                    scores[e] = select(visible, scores[e] * scale, f32::min_value());
                } else {
                    scores[e] *= scale;
                }
                top = f32::max(top, scores[e]);
            }
            acc_s.index_mut(nt)[h] = scores;
        }
        tops[h] = top;
    }
}

/// With `split_keys`: plane 0 takes over the other planes' running maxima `m`, sums `l` and
/// accumulators (each over its own keys), merged in plane order — `m = max m_p`,
/// `l = Σ l_p · e^(m_p − m)`, `O = Σ O_p · e^(m_p − m)` — through shared memory.
#[cube]
fn merge_planes<NC: Size>(
    acc_o: &mut Sequence<Array<Vector<f32, NC>>>,
    m: &mut Array<f32>,
    l: &mut Array<f32>,
    plane: usize,
    g: usize,
    t: usize,
    #[comptime] head_dim: usize,
) {
    let others = comptime!(MMA_QUERY_PLANES - 1);
    let d_tiles = comptime!(head_dim / 8);
    let pitch = comptime!(merge_pitch(head_dim));
    let mut o_s = SharedMemory::<f32>::new(comptime!(others * 16 * pitch));
    let mut ml_s = SharedMemory::<f32>::new(comptime!(others * 16 * 2));
    if plane > 0 {
        #[unroll]
        for h in 0..2usize {
            let row = (plane - 1) * 16 + g + comptime!(8 * h);
            if t == 0 {
                ml_s[2 * row] = m[h];
                ml_s[2 * row + 1] = l[h];
            }
            #[unroll]
            for dt in 0..d_tiles {
                let o = acc_o.index(dt)[h];
                #[unroll]
                for e in 0..2usize {
                    o_s[row * pitch + comptime!(8 * dt + e) + 2 * t] = o[e];
                }
            }
        }
    }
    sync_cube();
    if plane == 0 {
        #[unroll]
        for h in 0..2usize {
            let r = g + comptime!(8 * h);
            let mut top = m[h];
            #[unroll]
            for p in 0..others {
                top = f32::max(top, ml_s[2 * (p * 16 + r)]);
            }
            let mut scales = Array::<f32>::new(comptime!(others + 1));
            scales[0] = f32::exp(m[h] - top);
            let mut sum = l[h] * scales[0];
            #[unroll]
            for p in 0..others {
                let scale = f32::exp(ml_s[2 * (p * 16 + r)] - top);
                scales[comptime!(p + 1)] = scale;
                sum += ml_s[2 * (p * 16 + r) + 1] * scale;
            }
            m[h] = top;
            l[h] = sum;
            #[unroll]
            for dt in 0..d_tiles {
                let mut o = acc_o.index(dt)[h] * Vector::<f32, NC>::new(scales[0]);
                #[unroll]
                for p in 0..others {
                    #[unroll]
                    for e in 0..2usize {
                        let d = comptime!(8 * dt + e) + 2 * t;
                        o[e] += o_s[(p * 16 + r) * pitch + d] * scales[comptime!(p + 1)];
                    }
                }
                acc_o.index_mut(dt)[h] = o;
            }
        }
    }
}

/// A unit's share of the walk's step `step` of keys and values for [`attention_mma()`], copied
/// asynchronously into the slot at `at`; keys past the walk's end repeat its last key (their
/// scores are masked).
#[cube]
#[allow(clippy::too_many_arguments)]
fn copy_keys<F: Float, N: Size>(
    k: &Array<Vector<F, N>>,
    v: &Array<Vector<F, N>>,
    k_s: &mut SharedMemory<Vector<F, N>>,
    v_s: &mut SharedMemory<Vector<F, N>>,
    at: usize,
    step: usize,
    walk: &Walk,
    #[comptime] head_vecs: usize,
    #[comptime] units: usize,
) {
    let pitch = comptime!(head_vecs + 1);
    let vec = N::value();
    #[unroll]
    for i in 0..comptime!((MMA_KEYS * head_vecs).div_ceil(units)) {
        let e = i * units + walk.unit;
        if e < comptime!(MMA_KEYS * head_vecs) {
            let key = usize::min(walk.key_start + step * MMA_KEYS + e / head_vecs, walk.key_end - 1);
            let from = walk.kv_base + key * walk.row_vecs + e % head_vecs;
            let to = at + (e / head_vecs) * pitch + e % head_vecs;
            copy_async(
                &k.slice(from, from + 1),
                &mut k_s.slice_mut(to, to + 1),
                comptime!(vec as u32),
            );
            copy_async(
                &v.slice(from, from + 1),
                &mut v_s.slice_mut(to, to + 1),
                comptime!(vec as u32),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A k-step of `P·V` pairs two 8-key score tiles, and two cubes of Qwen3's head size
    /// (128) fit an H100/H200's 227 KB of shared memory.
    #[test]
    fn mma_constants_agree() {
        assert_eq!(MMA_KEYS % 16, 0);
        assert_eq!(MMA_QUERIES, 16 * MMA_QUERY_PLANES);
        assert_eq!(MMA_MAX_HEAD_DIM % 32, 0);
        let bytes = mma_shared_bytes(MMA_MAX_HEAD_DIM, 2);
        assert!(2 * bytes <= 227 * 1024, "{bytes}");
    }
}

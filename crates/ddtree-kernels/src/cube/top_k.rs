//! Row-wise top-`k` of the log-softmax, the DFlash drafter's candidate step.
//! Reference: [`crate::reference::top_k_log_softmax`].
//!
//! The kernel makes two launches and never sorts a row.
//!
//! 1. [`top_k_chunks()`] runs one cube of `CUBE_UNITS` units per (row, chunk of
//!    `COLS_PER_UNIT · CUBE_UNITS` = 4096 columns). Each unit keeps its 16 columns in registers,
//!    sorted best first once (a bitonic network). The cube computes the chunk's max and
//!    `Σ exp(x − max)`. It then finds the chunk's `k` best columns with `k` rounds of a
//!    cube-wide argmax. In each round every plane publishes its best `(value, column)` to shared
//!    memory, one `sync_cube`, then every unit reads all planes' entries and gets the same
//!    winner. Only the unit that held the winner moves its list up by one (register moves, where
//!    it had rescanned its 16 columns), and only its plane redoes the plane reduction. The
//!    shared-memory entries alternate between two buffers, which is why one barrier per round is
//!    enough.
//! 2. [`top_k_merge()`] runs one cube per row. It merges the chunks' `(max, Σexp)` into the row's
//!    `(M, S)`. Each chunk's candidates are already sorted, so it then picks the row's `k` best
//!    by a k-way merge with the same rounds. Each unit holds the head of its chunk lists (one
//!    list per unit up to 256 chunks), and a winning list advances by one element, whose load
//!    was issued when that list last won. It writes `(value − M) − ln S` (as `F`) and the column
//!    (as `I`).
//!
//! Ordering: values compare as f32 through an order-preserving u32 key (−0 folded into +0).
//! Equal values rank by lower column, and `NONE` = `(key 0, column u32::MAX)` ranks last. Chunks
//! shorter than `k` pad their candidate lists with `NONE`, and stage 2 never picks a pad because
//! `k ≤ cols`.
//!
//! Cost: `k` latency-bound rounds per stage, each a barrier, a few shared loads, one plane's two
//! shuffle reductions and one unit's rescan. Per-round latency, not bandwidth, sets the time
//! (the 4.5 MB of logits load in about 2 µs).
//!
//! Measured on an H200 with bf16 `[15, 151936]`, per call, back to back (then synced alone):
//!
//! | k | µs/call | synced | stage 1 alone |
//! | ---: | ---: | ---: | ---: |
//! | 1 | 32 | 59 | 10 |
//! | 8 | 41 | 82 | 21 |
//! | 64 | 163 | 202 | 107 |
//! | 256 | 581 | 651 | 403 |
//!
//! burn's sort-based `topk` takes about 250 ms. Stage 1 costs about 1.6 µs a round. It has 570
//! cubes of 256 units, which may not all be resident at once on 132 SMs. A larger chunk, or a
//! first pass that drops columns below a per-row threshold, would be the next step if this ever
//! matters.

use burn_cubecl::CubeRuntime;
use burn_cubecl::element::{FloatElement, IntElement};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use super::{array, contiguous};

/// Columns each stage-1 unit holds in registers. A chunk is `COLS_PER_UNIT · CUBE_UNITS` columns.
const COLS_PER_UNIT: usize = 16;
/// Units per cube in both stages.
const CUBE_UNITS: u32 = 256;
/// The column of "no element". With key 0 it ranks after every real `(key, column)`.
const NONE: u32 = u32::MAX;

/// An order-preserving u32 key of an f32: `a < b ⇔ key(a) < key(b)` for non-NaN values.
/// −0 maps to +0's key because the two compare equal as floats.
#[cube]
fn sort_key(value: f32) -> u32 {
    let bits = u32::reinterpret(value);
    let bits = select(bits == 0x8000_0000u32, 0u32, bits);
    select(bits >= 0x8000_0000u32, !bits, bits | 0x8000_0000u32)
}

/// The f32 whose [`sort_key`] is `key`.
#[cube]
fn key_value(key: u32) -> f32 {
    let bits = select(key >= 0x8000_0000u32, key ^ 0x8000_0000u32, !key);
    f32::reinterpret(bits)
}

/// `(key_a, id_a)` ranks before `(key_b, id_b)`: a larger value, or the same value at a lower
/// column.
#[cube]
fn ranks_before(key_a: u32, id_a: u32, key_b: u32, id_b: u32) -> bool {
    key_a > key_b || (key_a == key_b && id_a < id_b)
}

/// The plane's best `(key, column)`: the largest key, and the lowest column among the lanes that
/// hold it. The result is uniform across the plane.
#[cube]
fn plane_best(key: u32, id: u32) -> (u32, u32) {
    let top = plane_max(key);
    let first = plane_min(select(key == top, id, NONE));
    (top, first)
}

/// Sorts `n` (key, column) pairs best first ([`ranks_before`]) by a bitonic network whose
/// indices are all known at compile time, so the pairs stay in registers.
#[cube]
fn sort_best_first(keys: &mut Array<u32>, ids: &mut Array<u32>, #[comptime] n: usize) {
    // Bitonic merges of sorted runs of `size`, then `size / 2`, … pairs apart.
    #[unroll]
    for level in 0..comptime!(n.trailing_zeros() as usize) {
        let size = comptime!(2usize << level);
        #[unroll]
        for pass in 0..comptime!(level + 1) {
            let stride = comptime!(1usize << (level - pass));
            #[unroll]
            for i in 0..n {
                let l = comptime!(i ^ stride);
                if comptime!(l > i) {
                    // Runs with `i & size == 0` end best first, the others worst first.
                    let (ki, ii, kl, il) = (keys[i], ids[i], keys[l], ids[l]);
                    let swap = if comptime!(i & size == 0) {
                        ranks_before(kl, il, ki, ii)
                    } else {
                        ranks_before(ki, ii, kl, il)
                    };
                    keys[i] = select(swap, kl, ki);
                    ids[i] = select(swap, il, ii);
                    keys[l] = select(swap, ki, kl);
                    ids[l] = select(swap, ii, il);
                }
            }
        }
    }
}

/// One round of the cube-wide argmax. Lane 0 of every plane publishes its plane's best
/// (`planes` entries from `slot` on). After one barrier every unit reads them all and returns
/// the same winner. Callers alternate `slot` between two buffers from round to round, so a
/// round's writes never race the previous round's reads.
#[cube]
fn cube_winner(
    plane_key: u32,
    plane_id: u32,
    keys: &mut SharedMemory<u32>,
    ids: &mut SharedMemory<u32>,
    slot: usize,
    #[comptime] planes: usize,
) -> (u32, u32) {
    if UNIT_POS_X == 0 {
        let at = slot + UNIT_POS_Y as usize;
        keys[at] = plane_key;
        ids[at] = plane_id;
    }
    sync_cube();
    let mut win_key = keys[slot];
    let mut win_id = ids[slot];
    for p in 1..planes {
        let key = keys[slot + p];
        let id = ids[slot + p];
        if ranks_before(key, id, win_key, win_id) {
            win_key = key;
            win_id = id;
        }
    }
    (win_key, win_id)
}

/// Combines every plane's `(max, Σ exp(x − max))`, given in lane 0 of each plane, into the
/// cube's `(max, Σ exp(x − max))`, returned to every unit. Empty planes report
/// `(f32::MIN, 0)`.
#[cube]
fn cube_exp_sum(plane_max_value: f32, plane_sum_value: f32, #[comptime] planes: usize) -> (f32, f32) {
    let mut maxes = SharedMemory::<f32>::new(planes);
    let mut sums = SharedMemory::<f32>::new(planes);
    if UNIT_POS_X == 0 {
        let plane = UNIT_POS_Y as usize;
        maxes[plane] = plane_max_value;
        sums[plane] = plane_sum_value;
    }
    sync_cube();
    let mut m = maxes[0];
    for p in 1..planes {
        m = max(m, maxes[p]);
    }
    let mut s = 0.0f32.runtime();
    for p in 0..planes {
        s += sums[p] * f32::exp(maxes[p] - m);
    }
    (m, s)
}

/// Stage 1. One cube per `(chunk, row)` (`CUBE_POS_X`, `CUBE_POS_Y`), `CubeDim = (plane size,
/// planes)`, and each cube covers `per_unit · CUBE_DIM` columns. Writes:
/// * `stats[2·(row·chunks + chunk)..][..2]`: the chunk's max and `Σ exp(x − max)` in f32;
/// * `cand_keys` and `cand_ids` at `(row·chunks + chunk)·k..`: the chunk's `k` best as
///   `(sort key, column)`, best first, padded with `(0, NONE)`.
#[cube(launch_unchecked)]
pub fn top_k_chunks<F: Float>(
    logits: &Array<F>,
    stats: &mut Array<f32>,
    cand_keys: &mut Array<u32>,
    cand_ids: &mut Array<u32>,
    cols: usize,
    chunks: usize,
    k: usize,
    #[comptime] per_unit: usize,
    #[comptime] planes: usize,
) {
    let chunk = CUBE_POS_X as usize;
    let row = CUBE_POS_Y as usize;
    let threads = CUBE_DIM as usize;
    let unit = UNIT_POS as usize;
    // This unit's columns are `first + j·threads` for j < per_unit (coalesced loads).
    let first = chunk * per_unit * threads + unit;
    let base = row * cols;

    let mut keys = Array::<u32>::new(per_unit);
    let mut vals = Array::<f32>::new(per_unit);
    let mut local_max = f32::min_value();
    #[unroll]
    for j in 0..per_unit {
        let col = first + j * threads;
        let mut v = f32::min_value();
        if col < cols {
            v = f32::cast_from(logits[base + col]);
        }
        vals[j] = v;
        keys[j] = sort_key(v);
        local_max = max(local_max, v);
    }

    // The chunk's max and Σ exp(x − max). Missing columns are skipped. −inf logits add
    // exp(−inf) = 0 because every max starts at f32::MIN, so there is no NaN.
    let pm = plane_max(local_max);
    let mut local_sum = 0.0f32.runtime();
    #[unroll]
    for j in 0..per_unit {
        if first + j * threads < cols {
            local_sum += f32::exp(vals[j] - pm);
        }
    }
    let ps = plane_sum(local_sum);
    let chunk_stats = cube_exp_sum(pm, ps, planes);
    if unit == 0 {
        let at = 2 * (row * chunks + chunk);
        stats[at] = chunk_stats.0;
        stats[at + 1] = chunk_stats.1;
    }

    // The unit's columns sorted best first, once: a unit whose best wins a round then moves
    // its list up by one (register moves) instead of rescanning for the next best.
    let mut ids = Array::<u32>::new(per_unit);
    #[unroll]
    for j in 0..per_unit {
        let col = first + j * threads;
        ids[j] = select(col < cols, u32::cast_from(col), NONE);
        keys[j] = select(col < cols, keys[j], 0u32);
    }
    sort_best_first(&mut keys, &mut ids, per_unit);

    // k rounds of cube-wide argmax.
    let mut best_key = keys[0];
    let mut best_id = ids[0];
    let plane_init = plane_best(best_key, best_id);
    let mut plane_key = plane_init.0;
    let mut plane_id = plane_init.1;
    let mut round_keys = SharedMemory::<u32>::new(2 * planes);
    let mut round_ids = SharedMemory::<u32>::new(2 * planes);
    let out = (row * chunks + chunk) * k;
    for r in 0..k {
        let win = cube_winner(
            plane_key,
            plane_id,
            &mut round_keys,
            &mut round_ids,
            (r % 2) * planes,
            planes,
        );
        let win_key = win.0;
        let win_id = win.1;
        if unit == 0 {
            cand_keys[out + r] = win_key;
            cand_ids[out + r] = win_id;
        }
        // Only the winner's plane changes: the condition is uniform within a plane.
        if win_id != NONE && plane_key == win_key && plane_id == win_id {
            if best_key == win_key && best_id == win_id {
                #[unroll]
                for j in 0..comptime!(per_unit - 1) {
                    keys[j] = keys[comptime!(j + 1)];
                    ids[j] = ids[comptime!(j + 1)];
                }
                keys[comptime!(per_unit - 1)] = 0u32;
                ids[comptime!(per_unit - 1)] = NONE;
                best_key = keys[0];
                best_id = ids[0];
            }
            let plane_next = plane_best(best_key, best_id);
            plane_key = plane_next.0;
            plane_id = plane_next.1;
        }
    }
}

/// Stage 2. One cube per row (`CUBE_POS_X`), `CubeDim = (plane size, planes)`. Merges the
/// chunks' statistics into `(M, S)` and the chunks' `chunks · k` candidates into the row's
/// top `k`. Writes `values[row·k + r] = (x − M) − ln S` and `ids[row·k + r] = column`, best
/// first.
#[cube(launch_unchecked)]
pub fn top_k_merge<F: Float, I: Int>(
    stats: &Array<f32>,
    cand_keys: &Array<u32>,
    cand_ids: &Array<u32>,
    values: &mut Array<F>,
    ids: &mut Array<I>,
    chunks: usize,
    k: usize,
    #[comptime] lists_per_unit: usize,
    #[comptime] planes: usize,
) {
    let row = CUBE_POS_X as usize;
    let threads = CUBE_DIM as usize;
    let unit = UNIT_POS as usize;

    // The row max M and S = Σ_c s_c·exp(m_c − M), merged online per unit, then across the cube.
    let mut m = f32::min_value();
    let mut s = 0.0f32.runtime();
    let mut c = unit;
    while c < chunks {
        let at = 2 * (row * chunks + c);
        let chunk_max = stats[at];
        let merged = max(m, chunk_max);
        s = s * f32::exp(m - merged) + stats[at + 1] * f32::exp(chunk_max - merged);
        m = merged;
        c += threads;
    }
    let pm = plane_max(m);
    let ps = plane_sum(s * f32::exp(m - pm));
    let row_stats = cube_exp_sum(pm, ps, planes);
    // Outputs are `(x − M) − ln S`, as in the reference: `x − M` is exact near the top, where
    // forming `M + ln S` first would round at the magnitude of M (1e-3 absolute at |M| = 1e4).
    let row_max = row_stats.0;
    let ln_sum = f32::ln(row_stats.1);

    // Each chunk's candidate list is sorted best first, so picking the row's top k is a
    // k-way merge. Unit `u` owns the lists `u + l·threads` for l < lists_per_unit and keeps each
    // list's head and the element after it in registers. `pos[l]` is the position of the
    // element after the head. When a head wins, the next element becomes the head and the load
    // of the following one is issued. That load is needed only when this list wins again, so
    // its latency mostly overlaps later rounds.
    let cand_base = row * chunks * k;
    let mut head_keys = Array::<u32>::new(lists_per_unit);
    let mut head_ids = Array::<u32>::new(lists_per_unit);
    let mut next_keys = Array::<u32>::new(lists_per_unit);
    let mut next_ids = Array::<u32>::new(lists_per_unit);
    let mut pos = Array::<usize>::new(lists_per_unit);
    let mut best_key = 0u32.runtime();
    let mut best_id = NONE.runtime();
    #[unroll]
    for l in 0..lists_per_unit {
        let list = unit + l * threads;
        let mut head_key = 0u32.runtime();
        let mut head_id = NONE.runtime();
        let mut next_key = 0u32.runtime();
        let mut next_id = NONE.runtime();
        if list < chunks {
            let at = cand_base + list * k;
            head_key = cand_keys[at];
            head_id = cand_ids[at];
            if k > 1 {
                next_key = cand_keys[at + 1];
                next_id = cand_ids[at + 1];
            }
        }
        head_keys[l] = head_key;
        head_ids[l] = head_id;
        next_keys[l] = next_key;
        next_ids[l] = next_id;
        pos[l] = 1;
        if ranks_before(head_key, head_id, best_key, best_id) {
            best_key = head_key;
            best_id = head_id;
        }
    }
    let plane_init = plane_best(best_key, best_id);
    let mut plane_key = plane_init.0;
    let mut plane_id = plane_init.1;
    let mut round_keys = SharedMemory::<u32>::new(2 * planes);
    let mut round_ids = SharedMemory::<u32>::new(2 * planes);
    for r in 0..k {
        let win = cube_winner(
            plane_key,
            plane_id,
            &mut round_keys,
            &mut round_ids,
            (r % 2) * planes,
            planes,
        );
        let win_key = win.0;
        let win_id = win.1;
        if unit == 0 {
            values[row * k + r] = F::cast_from((key_value(win_key) - row_max) - ln_sum);
            ids[row * k + r] = I::cast_from(win_id);
        }
        if win_id != NONE && plane_key == win_key && plane_id == win_id {
            if best_key == win_key && best_id == win_id {
                let mut new_key = 0u32.runtime();
                let mut new_id = NONE.runtime();
                #[unroll]
                for l in 0..lists_per_unit {
                    // Real columns are unique, so only the winning list's head matches.
                    if head_ids[l] == win_id {
                        head_keys[l] = next_keys[l];
                        head_ids[l] = next_ids[l];
                        let p = pos[l] + 1;
                        pos[l] = p;
                        let mut next_key = 0u32.runtime();
                        let mut next_id = NONE.runtime();
                        if p < k {
                            let at = cand_base + (unit + l * threads) * k + p;
                            next_key = cand_keys[at];
                            next_id = cand_ids[at];
                        }
                        next_keys[l] = next_key;
                        next_ids[l] = next_id;
                    }
                    if ranks_before(head_keys[l], head_ids[l], new_key, new_id) {
                        new_key = head_keys[l];
                        new_id = head_ids[l];
                    }
                }
                best_key = new_key;
                best_id = new_id;
            }
            let plane_next = plane_best(best_key, best_id);
            plane_key = plane_next.0;
            plane_id = plane_next.1;
        }
    }
}

/// The top `k` of each row's log-softmax for contiguous `logits: [rows, cols]` of element type
/// `F`, with `1 ≤ k ≤ cols`. Returns `values: [rows, k]` (`F`, descending) and
/// `ids: [rows, k]` (`I`, the columns; on equal values the lower column comes first). Both are
/// densely packed. Two launches (see the module docs); the scratch is
/// `rows · ⌈cols / 4096⌉ · (2 + 2k)` u32/f32 words.
pub fn top_k_log_softmax<R: CubeRuntime, F: FloatElement, I: IntElement>(
    logits: CubeTensor<R>,
    k: usize,
) -> (CubeTensor<R>, CubeTensor<R>) {
    let logits = into_contiguous(logits);
    assert_eq!(
        logits.dtype,
        F::dtype(),
        "top_k_log_softmax: logits are not of the float type F"
    );
    let [rows, cols] = logits.meta.shape().dims::<2>();
    assert!(
        (1..=cols).contains(&k),
        "top_k_log_softmax: k = {k} must lie in 1..={cols} (the row length)"
    );
    assert!(
        cols < NONE as usize,
        "top_k_log_softmax: {cols} columns do not fit u32 ids"
    );
    let client = logits.client.clone();
    let values = contiguous::<R, F, _>(&logits, [rows, k]);
    let ids = contiguous::<R, I, _>(&logits, [rows, k]);
    if rows == 0 {
        return (values, ids);
    }

    let plane = client.properties().hardware.plane_size_max.clamp(1, CUBE_UNITS);
    let planes = (CUBE_UNITS / plane) as usize;
    let dim = CubeDim::new_2d(plane, planes as u32);
    let chunk_cols = COLS_PER_UNIT * CUBE_UNITS as usize;
    let chunks = cols.div_ceil(chunk_cols);

    let stats_len = rows * chunks * 2;
    let cand_len = rows * chunks * k;
    let stats = client.empty(stats_len * size_of::<f32>());
    let cand_keys = client.empty(cand_len * size_of::<u32>());
    let cand_ids = client.empty(cand_len * size_of::<u32>());

    // SAFETY: `logits` is a contiguous `[rows, cols]` buffer. The scratch buffers hold
    // `stats_len` and `cand_len` elements, which is what the grid indexes: `chunks × rows`
    // cubes write `2` stats and `k` candidates each. Every column read is guarded by `cols`.
    unsafe {
        top_k_chunks::launch_unchecked::<F, R>(
            &client,
            CubeCount::Static(chunks as u32, rows as u32, 1),
            dim,
            array(&logits),
            ArrayArg::from_raw_parts(stats.clone(), stats_len),
            ArrayArg::from_raw_parts(cand_keys.clone(), cand_len),
            ArrayArg::from_raw_parts(cand_ids.clone(), cand_len),
            cols,
            chunks,
            k,
            COLS_PER_UNIT,
            planes,
        );
    }
    // SAFETY: stage 1 wrote every element of the scratch buffers. `values` and `ids` are dense
    // `[rows, k]` buffers, and one cube per row writes its `k` outputs.
    unsafe {
        top_k_merge::launch_unchecked::<F, I, R>(
            &client,
            CubeCount::Static(rows as u32, 1, 1),
            dim,
            ArrayArg::from_raw_parts(stats, stats_len),
            ArrayArg::from_raw_parts(cand_keys, cand_len),
            ArrayArg::from_raw_parts(cand_ids, cand_len),
            array(&values),
            array(&ids),
            chunks,
            k,
            chunks.div_ceil(CUBE_UNITS as usize),
            planes,
        );
    }
    (values, ids)
}

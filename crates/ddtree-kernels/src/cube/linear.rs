//! `y = x · Wᵀ` for a few rows of `x` (decode, drafter blocks) with the weight in the Hugging Face
//! `[out, in]` layout: a GEMV that streams each weight row once, reused across the `x` rows.
//! Reference: [`crate::reference::linear`].

use cubecl::prelude::barrier::{Barrier, copy_async};
use cubecl::prelude::*;

/// The most `x` rows one launch handles; more rows go to the tiled matmul.
pub const MAX_ROWS: usize = 8;

/// `k_planes` planes (warps) per output feature `n`: their lanes stride over the `in` dimension
/// with `N`-wide vector loads, accumulate in f32 for each of the `rows` inputs and reduce with
/// `plane_sum`, then across the `k_planes` planes through shared memory. `x: [rows, k]`,
/// `w: [n_out, k]`, `y: [rows, n_out]`, all contiguous; `k_vecs` is `k / N`. Launch with
/// `CubeDim = (plane size, planes)`, `k_planes` dividing `planes`, and enough cubes to cover
/// `n_out · k_planes` planes. Several planes per feature ([`GEMV_K_PLANES`]) fill the GPU when
/// `n_out` is small (4096 features × one plane is half an H200's warp slots) and shorten each
/// plane's walk, so the launch's last planes finish sooner.
///
/// With `swiglu`, `w` is a fused gate/up projection `[2 · n_out, k]` and the planes stream both
/// of its rows (`n` and `n_out + n`) to write `y = silu(gate) ⊙ up` — the MLP's activation without
/// a launch of its own. Gate and up are rounded to `F` first, as the separate [`linear_rows()`]
/// and [`super::activation::silu_mul()`] launches store them.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn linear_rows<F: Float, N: Size>(
    x: &Array<Vector<F, N>>,
    w: &Array<Vector<F, N>>,
    y: &mut Array<F>,
    k_vecs: usize,
    n_out: usize,
    #[comptime] rows: usize,
    #[comptime] swiglu: bool,
    #[comptime] planes: usize,
    #[comptime] k_planes: usize,
) {
    let part = UNIT_POS_Y as usize % k_planes;
    let slot = UNIT_POS_Y as usize / k_planes;
    let n = CUBE_POS_X as usize * comptime!(planes / k_planes) + slot;
    let lane = UNIT_POS_X as usize;
    let plane = CUBE_DIM_X as usize;
    let outputs = comptime!(if swiglu { 2 * rows } else { rows });
    // Row `r`'s gate (or only) sum in `totals[r]`, its up sum in `totals[rows + r]`.
    let mut totals = Array::<f32>::new(outputs);
    let mut acc = Array::<Vector<f32, N>>::new(outputs);
    #[unroll]
    for o in 0..outputs {
        acc[o] = Vector::<f32, N>::new(0.0);
    }
    if n < n_out {
        let base = n * k_vecs;
        let up_base = (n_out + n) * k_vecs;
        let mut kv = part * plane + lane;
        while kv < k_vecs {
            let wv = Vector::<f32, N>::cast_from(w[base + kv]);
            let mut uv = Vector::<f32, N>::new(0.0);
            if comptime!(swiglu) {
                uv = Vector::<f32, N>::cast_from(w[up_base + kv]);
            }
            #[unroll]
            for r in 0..rows {
                let xv = Vector::<f32, N>::cast_from(x[r * k_vecs + kv]);
                acc[r] = fma(wv, xv, acc[r]);
                if comptime!(swiglu) {
                    acc[rows + r] = fma(uv, xv, acc[rows + r]);
                }
            }
            kv += plane * k_planes;
        }
    }
    #[unroll]
    for o in 0..outputs {
        totals[o] = plane_sum(f32::cast_from(acc[o].vector_sum()));
    }
    if comptime!(k_planes > 1) {
        let mut partial = SharedMemory::<f32>::new(comptime!(planes * outputs));
        if lane == 0 {
            #[unroll]
            for o in 0..outputs {
                partial[UNIT_POS_Y as usize * outputs + o] = totals[o];
            }
        }
        sync_cube();
        #[unroll]
        for o in 0..outputs {
            let mut sum = 0.0f32;
            #[unroll]
            for p in 0..k_planes {
                sum += partial[(slot * k_planes + p) * outputs + o];
            }
            totals[o] = sum;
        }
    }
    if n < n_out && part == 0 && lane == 0 {
        #[unroll]
        for r in 0..rows {
            if comptime!(swiglu) {
                y[r * n_out + n] = silu_times::<F>(totals[r], totals[rows + r]);
            } else {
                y[r * n_out + n] = F::cast_from(totals[r]);
            }
        }
    }
}

/// The most `x` rows the tensor-core kernel handles (a verify of up to 128 tree nodes plus the
/// root needs 129); more go to burn's matmul.
pub const MAX_TILED_ROWS: usize = 144;

/// Planes per cube of [`linear_mma()`], each with its own output features.
pub const MMA_PLANES: usize = 8;

/// `y = x · Wᵀ` on tensor cores for 9–144 rows with `mma.sync` m16n8k16 and register-resident
/// fragments: the weight is the 16-row A operand and the rows of `x` the 8-column B operand
/// (`yᵀ = W · xᵀ`), so 65 rows pad to 72, not 80.
///
/// W and `x` are staged in shared memory by asynchronous copies (`cp.async`), `stages` chunks of
/// `32 · steps` k deep: the bytes in flight take no registers, so a multiprocessor keeps
/// `stages − 1` chunks loading while it multiplies one. A slot holds one chunk: the cube's
/// `MMA_PLANES · 16 · f_tiles` rows of W, then `8 · t_tiles` rows of `x` (rows past `rows` zeroed
/// once), each row an odd multiple of 64 bytes (the two rows a quarter-plane reads then fall on
/// different banks). Slot `s` has its own barrier: every unit copies its share of a chunk and
/// commits the copies to the slot's barrier; `arrive_and_wait` on it both waits for the chunk's
/// bytes and tells that every unit has finished the previous chunk, whose slot is then refilled.
///
/// Because a dot product does not care in which order it visits `k`, a lane's 16 bytes of a W
/// row (8 values) serve as its A fragments of two MMAs (elements 0–3 for the k-slots
/// `2t, 2t+1, 2t+8, 2t+9` of the first, 4–7 of the second, `t = lane % 4`); the B fragments of `x`
/// use the same slots, read as 16 contiguous bytes of a staged row. `x` and `w` are read as
/// vectors of 4 32-bit words (`N` = 4), each word a pair of `F` values: exactly one fragment
/// register, so fragments are bit-casts rather than element moves.
///
/// A cube of [`MMA_PLANES`] planes covers `MMA_PLANES · 16 · f_tiles` output features and one of
/// `k_splits` slices of `k` (`CUBE_POS_Y`); several slices write f32 partial sums
/// `partial: [k_splits, rows, n_out]` for [`linear_split_sum()`]. Launch with
/// `CubeDim = (32, MMA_PLANES)` and `(⌈n_out / (MMA_PLANES · 16 · f_tiles)⌉, k_splits)` cubes;
/// `rows ≤ 8 · t_tiles`, `n_out` a multiple of `16 · f_tiles`, `k / (32 · steps · k_splits)`
/// chunks per slice, a multiple of `stages` (at least 2).
///
/// With `swiglu` (and `f_tiles = 2`), `w` is a fused gate/up weight of `n_out = 2 · inter` rows
/// and a plane's two feature tiles are the gate and the up rows of the same 16 features, so a
/// lane holds both sums of each of its outputs and writes `y: [rows, inter] = silu(gate) ⊙ up`
/// — the MLP's activation without a launch of its own (partial sums keep the `[rows, n_out]`
/// layout; [`linear_split_sum()`] applies the activation then).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn linear_mma<F: Float, N: Size>(
    x: &Array<Vector<u32, N>>,
    w: &Array<Vector<u32, N>>,
    y: &mut Array<F>,
    partial: &mut Array<f32>,
    rows: usize,
    n_out: usize,
    #[comptime] k: usize,
    #[comptime] t_tiles: usize,
    #[comptime] f_tiles: usize,
    #[comptime] k_splits: usize,
    #[comptime] steps: usize,
    #[comptime] stages: usize,
    #[comptime] swiglu: bool,
) {
    let def = cmma::MmaDefinition::<F, F, f32>::new(16usize, 8usize, 16usize);
    let size!(NA) = def.vector_size(cmma::MatrixIdent::A);
    let size!(NC) = def.vector_size(cmma::MatrixIdent::Accumulator);
    let plane = UNIT_POS_Y as usize;
    let lane = UNIT_POS_X as usize;
    let unit = UNIT_POS as usize;
    let g = lane / 4;
    let t = lane % 4;
    let w_rows = comptime!(MMA_PLANES * 16 * f_tiles);
    let plane_row = plane * comptime!(16 * f_tiles);
    // The cube's first output feature and the plane's (with `swiglu`, both tiles of a plane
    // hold the same features).
    let cube_f0 = CUBE_POS_X as usize * comptime!(if swiglu { MMA_PLANES * 16 } else { w_rows });
    let f0 = cube_f0 + comptime!(if swiglu { 16 } else { 16 * f_tiles }) * plane;
    let chunk_vecs = comptime!(4 * steps);
    let k_vecs = comptime!(k / 8);
    let slice_vecs = comptime!(k_vecs / k_splits);
    let chunks = comptime!(slice_vecs / chunk_vecs);
    let k_begin = CUBE_POS_Y as usize * slice_vecs;
    let pitch = comptime!(staged_row_vecs(steps));
    let tokens = comptime!(8 * t_tiles);
    let slot = comptime!((w_rows + tokens) * pitch);
    let x_vecs = comptime!(tokens * chunk_vecs);
    let mut staged = SharedMemory::<Vector<u32, N>>::new_aligned(comptime!(stages * slot), 16usize);

    #[unroll]
    for s in 0..stages {
        #[unroll]
        for i in 0..comptime!(x_vecs.div_ceil(MMA_PLANES * 32)) {
            let e = i * comptime!(MMA_PLANES * 32) + unit;
            let row = e / chunk_vecs;
            if e < x_vecs && row >= rows {
                staged[comptime!(s * slot) + (w_rows + row) * pitch + e % chunk_vecs] =
                    Vector::<u32, N>::new(0u32);
            }
        }
    }
    // One barrier per slot (each initialisation ends with a cube-wide sync).
    let mut barriers = Sequence::<Shared<Barrier>>::new();
    #[unroll]
    for _ in 0..stages {
        barriers.push(Barrier::shared(CUBE_DIM, UNIT_POS == 0));
    }

    let mut accs = Sequence::<Array<Vector<f32, NC>>>::new();
    #[unroll]
    for _ in 0..f_tiles * t_tiles {
        let mut acc = Array::<Vector<f32, NC>>::new(2usize);
        acc[0] = Vector::<f32, NC>::new(0.0);
        acc[1] = Vector::<f32, NC>::new(0.0);
        accs.push(acc);
    }

    // The first `stages − 1` chunks in flight (a slice holds at least `stages`).
    #[unroll]
    for s in 0..comptime!(stages - 1) {
        copy_chunk::<N>(
            x,
            w,
            &mut staged,
            comptime!(s * slot),
            rows,
            n_out,
            cube_f0,
            unit,
            k_vecs,
            k_begin + comptime!(s * chunk_vecs),
            steps,
            w_rows,
            tokens,
            swiglu,
        );
        barriers.index(s).commit_copy_async();
    }

    for c0 in 0..comptime!(chunks / stages) {
        #[unroll]
        for s in 0..stages {
            barriers.index(s).arrive_and_wait();
            // Every unit is past the previous chunk: its slot takes the chunk `stages − 1` ahead.
            let ahead = c0 * stages + comptime!(s + stages - 1);
            let refill = comptime!((s + stages - 1) % stages);
            if ahead < chunks {
                copy_chunk::<N>(
                    x,
                    w,
                    &mut staged,
                    comptime!(refill * slot),
                    rows,
                    n_out,
                    cube_f0,
                    unit,
                    k_vecs,
                    k_begin + ahead * chunk_vecs,
                    steps,
                    w_rows,
                    tokens,
                    swiglu,
                );
                barriers.index(refill).commit_copy_async();
            }
            let at = comptime!(s * slot);
            #[unroll]
            for st in 0..steps {
                let mut wv = Array::<Vector<u32, N>>::new(comptime!(2 * f_tiles));
                #[unroll]
                for f in 0..f_tiles {
                    #[unroll]
                    for h in 0..2usize {
                        let row = plane_row + comptime!(16 * f + 8 * h) + g;
                        wv[comptime!(2 * f + h)] = staged[at + row * pitch + comptime!(4 * st) + t];
                    }
                }
                let mut xv = Array::<Vector<u32, N>>::new(t_tiles);
                #[unroll]
                for j in 0..t_tiles {
                    xv[j] = staged[at + (w_rows + comptime!(8 * j) + g) * pitch + comptime!(4 * st) + t];
                }
                // The two MMAs of a step (elements 0–3, then 4–7 of every vector) in separate
                // passes over the tiles, so that consecutive MMAs update different accumulators.
                #[unroll]
                for h in 0..2usize {
                    #[unroll]
                    for j in 0..t_tiles {
                        let mut b = Array::<Vector<F, NA>>::new(2usize);
                        b[0] = Vector::<F, NA>::reinterpret(xv[j][comptime!(2 * h)]);
                        b[1] = Vector::<F, NA>::reinterpret(xv[j][comptime!(2 * h + 1)]);
                        #[unroll]
                        for f in 0..f_tiles {
                            let lo = wv[comptime!(2 * f)];
                            let hi = wv[comptime!(2 * f + 1)];
                            let mut a = Array::<Vector<F, NA>>::new(4usize);
                            a[0] = Vector::<F, NA>::reinterpret(lo[comptime!(2 * h)]);
                            a[1] = Vector::<F, NA>::reinterpret(hi[comptime!(2 * h)]);
                            a[2] = Vector::<F, NA>::reinterpret(lo[comptime!(2 * h + 1)]);
                            a[3] = Vector::<F, NA>::reinterpret(hi[comptime!(2 * h + 1)]);
                            def.execute_inplace(&a, &b, accs.index_mut(comptime!(f * t_tiles + j)));
                        }
                    }
                }
            }
        }
    }

    let features = comptime!(if swiglu { 2usize } else { 1usize });
    if f0 < n_out / features {
        store_accumulators::<F, NC>(
            &accs, y, partial, rows, n_out, f0, g, t, t_tiles, f_tiles, k_splits, swiglu,
        );
    }
}

/// A unit's share of one chunk for [`linear_mma()`], copied asynchronously into the slot at
/// `at`: the cube's W rows that exist, then the `x` rows that exist — one 16-byte vector per copy
/// (`copy_async` counts 4 words). Staged W row `r` is weight row `cube_f0 + r`; with `swiglu`,
/// plane `r / 32`'s gate (`r % 32 < 16`) or up row of feature `cube_f0 + 16 · (r / 32) + r % 16`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn copy_chunk<N: Size>(
    x: &Array<Vector<u32, N>>,
    w: &Array<Vector<u32, N>>,
    staged: &mut SharedMemory<Vector<u32, N>>,
    at: usize,
    rows: usize,
    n_out: usize,
    cube_f0: usize,
    unit: usize,
    k_vecs: usize,
    k0: usize,
    #[comptime] steps: usize,
    #[comptime] w_rows: usize,
    #[comptime] tokens: usize,
    #[comptime] swiglu: bool,
) {
    let chunk_vecs = comptime!(4 * steps);
    let pitch = comptime!(staged_row_vecs(steps));
    #[unroll]
    for i in 0..comptime!((w_rows * chunk_vecs).div_ceil(MMA_PLANES * 32)) {
        let e = i * comptime!(MMA_PLANES * 32) + unit;
        let r = e / chunk_vecs;
        let v = e % chunk_vecs;
        let mut feature = cube_f0 + r;
        let mut row = feature;
        let mut features = n_out;
        if comptime!(swiglu) {
            features = n_out / 2;
            feature = cube_f0 + (r / 32) * 16 + r % 16;
            row = feature + (r / 16) % 2 * features;
        }
        if feature < features {
            let from = row * k_vecs + k0 + v;
            let to = at + r * pitch + v;
            copy_async(&w.slice(from, from + 1), &mut staged.slice_mut(to, to + 1), 4u32);
        }
    }
    let x_vecs = comptime!(tokens * chunk_vecs);
    #[unroll]
    for i in 0..comptime!(x_vecs.div_ceil(MMA_PLANES * 32)) {
        let e = i * comptime!(MMA_PLANES * 32) + unit;
        let r = e / chunk_vecs;
        let v = e % chunk_vecs;
        if e < x_vecs && r < rows {
            let from = r * k_vecs + k0 + v;
            let to = at + (w_rows + r) * pitch + v;
            copy_async(&x.slice(from, from + 1), &mut staged.slice_mut(to, to + 1), 4u32);
        }
    }
}

/// Writes a plane's accumulators: element `(h, e)` of tile `(f, j)` is feature
/// `f0 + 16f + 8h + g`, row `8j + 2t + e` — into `y`, or into the k-slice's partial sums. With
/// `swiglu`, tiles 0 and 1 are the gate and up sums of features `f0 + 8h + g`: `y` gets
/// `silu(gate) ⊙ up`, the partial sums both (at columns `f` and `n_out / 2 + f`).
#[cube]
#[allow(clippy::too_many_arguments)]
fn store_accumulators<F: Float, NC: Size>(
    accs: &Sequence<Array<Vector<f32, NC>>>,
    y: &mut Array<F>,
    partial: &mut Array<f32>,
    rows: usize,
    n_out: usize,
    f0: usize,
    g: usize,
    t: usize,
    #[comptime] t_tiles: usize,
    #[comptime] f_tiles: usize,
    #[comptime] k_splits: usize,
    #[comptime] swiglu: bool,
) {
    if comptime!(swiglu && k_splits == 1) {
        let inter = n_out / 2;
        #[unroll]
        for j in 0..t_tiles {
            let gate = accs.index(j);
            let up = accs.index(comptime!(t_tiles + j));
            #[unroll]
            for h in 0..2usize {
                #[unroll]
                for e in 0..2usize {
                    let row = comptime!(8 * j) + 2 * t + e;
                    if row < rows {
                        let col = f0 + comptime!(8 * h) + g;
                        y[row * inter + col] = silu_times::<F>(gate[h][e], up[h][e]);
                    }
                }
            }
        }
    } else {
        #[unroll]
        for f in 0..f_tiles {
            #[unroll]
            for j in 0..t_tiles {
                let acc = accs.index(comptime!(f * t_tiles + j));
                #[unroll]
                for h in 0..2usize {
                    let v = acc[h];
                    let mut col = f0 + comptime!(16 * f + 8 * h) + g;
                    if comptime!(swiglu) {
                        col = comptime!(f) * (n_out / 2) + f0 + comptime!(8 * h) + g;
                    }
                    #[unroll]
                    for e in 0..2usize {
                        let row = comptime!(8 * j) + 2 * t + e;
                        if row < rows {
                            if comptime!(k_splits == 1) {
                                y[row * n_out + col] = F::cast_from(v[e]);
                            } else {
                                partial[(CUBE_POS_Y as usize * rows + row) * n_out + col] = v[e];
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The 16-byte vectors per staged row of W or `x` in [`linear_mma()`]: a chunk of `steps` 32-wide
/// k-steps, plus 64 bytes when that makes the row an odd multiple of 64 bytes — the two rows a
/// quarter-plane reads then fall on different shared-memory banks.
pub(crate) fn staged_row_vecs(steps: usize) -> usize {
    let chunk_vecs = 4 * steps;
    if steps.is_multiple_of(2) {
        chunk_vecs + 4
    } else {
        chunk_vecs
    }
}

/// `y = Σ_s partial[s]` over the `splits` k-slices of [`linear_mma()`], one unit per element of
/// `y` (`len` of them). With `swiglu`, each row of the partial sums holds the gate then the up
/// sums (`2 · cols` wide) and `y: [len / cols, cols] = silu(gate) ⊙ up`.
#[cube(launch_unchecked)]
pub fn linear_split_sum<F: Float>(
    partial: &Array<f32>,
    y: &mut Array<F>,
    len: usize,
    cols: usize,
    #[comptime] splits: usize,
    #[comptime] swiglu: bool,
) {
    let i = ABSOLUTE_POS;
    if i < len {
        if comptime!(swiglu) {
            // Element `i` of y: the gate at `2 · cols · row + col`, the up `cols` further.
            let at = i + i / cols * cols;
            let mut gate = 0.0f32;
            let mut up = 0.0f32;
            #[unroll]
            for s in 0..splits {
                gate += partial[2 * s * len + at];
                up += partial[2 * s * len + at + cols];
            }
            y[i] = silu_times::<F>(gate, up);
        } else {
            let mut sum = 0.0f32;
            #[unroll]
            for s in 0..splits {
                sum += partial[s * len + i];
            }
            y[i] = F::cast_from(sum);
        }
    }
}

/// `silu(gate) ⊙ up` from f32 sums, with the arithmetic of the separate launches: both rounded
/// to `F` first (as the projection stores them), then `g / (1 + e^(0 − g)) · u` in f32.
#[cube]
pub(crate) fn silu_times<F: Float>(gate: f32, up: f32) -> F {
    let g = f32::cast_from(F::cast_from(gate));
    let u = f32::cast_from(F::cast_from(up));
    F::cast_from(g / (1.0 + f32::exp(0.0 - g)) * u)
}

/// Planes per output feature of [`linear_rows()`] by default: at every Qwen3-8B AR shape the
/// fastest of 1, 2, 4 and 8 or within its spread (QKV and down 9–11 % faster than with 1–2;
/// `self-test --sweep-gemv`, docs/perf-notes.md, thirteenth session).
pub const GEMV_K_PLANES: usize = 4;

/// A launch shape for [`linear_mma()`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmaShape {
    /// 8-row tiles of `x` (rows padded up to `8 · t_tiles` in shared memory).
    pub t_tiles: usize,
    /// 16-feature tiles of W per plane.
    pub f_tiles: usize,
    /// Slices of `k` across cubes (partial sums added by [`linear_split_sum()`] when more than
    /// one).
    pub k_splits: usize,
    /// 32-wide k-steps per staged chunk of W and `x`.
    pub steps: usize,
    /// Chunks in shared memory, filled by asynchronous copies (at least 2).
    pub stages: usize,
}

impl MmaShape {
    /// The most k-slices: each adds `rows · n_out` f32 partial sums to write and read back.
    pub const MAX_K_SPLITS: usize = 16;

    /// The most 16×8 accumulator tiles per plane (`f_tiles · t_tiles`; four f32 registers per
    /// lane each): 144 rows at one feature tile, 72 at two.
    pub const MAX_ACCUMULATOR_TILES: usize = 18;

    /// The shape for `rows × k` by `[n_out, k]` on a device with `cores` streaming
    /// multiprocessors and `shared` bytes of shared memory per cube, or `None` when the sizes do
    /// not tile (`n_out` must be a multiple of 16, `k` of 32 with at least two 32-wide chunks for
    /// the stages to divide) or the rows are too many.
    ///
    /// From the H200 sweep of 16, 65 and 129 rows on 4096 × 12288 and 12288 × 4096
    /// (`ddtree-bench self-test --sweep-tiles`; the table in docs/perf-notes.md):
    /// - up to 16 rows: one feature tile per plane, chunks of 128 k, four stages;
    /// - 17–72 rows: two feature tiles (every cube reads all of `x`: at 65 rows half the
    ///   weight's bytes with one tile per plane, a quarter with two), chunks of 128 k, two stages;
    ///   but where the output is so narrow that two tiles take 8 k-slices to fill the cores
    ///   (Qwen3-8B's o_proj and down), one tile and the pipeline with the most bytes in flight
    ///   (the H100 sweeps' fastest: 14 % and 7 % under the two-tile shape);
    /// - 73–144 rows: one feature tile (two would take 80 or more accumulator registers),
    ///   chunks of 64 k, three stages;
    ///
    /// shorter chunks, then fewer (or, for an odd number of chunks, more) stages where `k` or the
    /// shared memory needs them; then the k-slices ([`MmaShape::k_splits_for`]).
    pub fn choose(rows: usize, n_out: usize, k: usize, cores: usize, shared: usize) -> Option<Self> {
        Self::choose_tiles(rows, n_out, k, cores, shared, false)
    }

    /// The shape for the SwiGLU variant of [`linear_mma()`] on a fused gate/up weight of `n_out`
    /// rows (gate then up): [`MmaShape::choose`]'s with two feature tiles per plane, its gate and
    /// up rows — `None` above 72 rows (the accumulators of both would not fit the registers).
    pub fn choose_swiglu(rows: usize, n_out: usize, k: usize, cores: usize, shared: usize) -> Option<Self> {
        Self::choose_tiles(rows, n_out, k, cores, shared, true)
    }

    fn choose_tiles(
        rows: usize,
        n_out: usize,
        k: usize,
        cores: usize,
        shared: usize,
        paired: bool,
    ) -> Option<Self> {
        if rows == 0 || rows > MAX_TILED_ROWS || !n_out.is_multiple_of(16) {
            return None;
        }
        let t_tiles = rows.div_ceil(8);
        let (f_tiles, longest, deepest) = match t_tiles {
            1..=2 => (1, 4, 4),
            3..=9 => (2, 4, 2),
            _ => (1, 2, 3),
        };
        let f_tiles = if paired {
            if 2 * t_tiles > Self::MAX_ACCUMULATOR_TILES || !n_out.is_multiple_of(32) {
                return None;
            }
            2
        } else if n_out.is_multiple_of(16 * f_tiles) {
            f_tiles
        } else {
            1
        };
        let shape = |f_tiles, steps, stages| Self {
            t_tiles,
            f_tiles,
            k_splits: 1,
            steps,
            stages,
        };
        // Narrow outputs at 17–72 rows (Qwen3-8B's o_proj and down: 16 cubes of two feature tiles,
        // which take 8 k-slices to fill the cores): one feature tile, and the pipeline that keeps
        // the most bytes in flight — (stages − 1) chunks of the same staged rows; on a tie the
        // longer chunks.
        let narrow_output = shape(2, 1, 2).columns(n_out) * 8 <= cores;
        if (3..=9).contains(&t_tiles) && !paired && narrow_output {
            let narrow = [2, 4]
                .into_iter()
                .flat_map(|steps| (2..=4).map(move |stages| (steps, stages)))
                .filter(|&(steps, _)| k.is_multiple_of(32 * steps))
                .filter_map(|(steps, stages)| shape(1, steps, stages).sliced(n_out, k, cores, shared))
                .max_by_key(|s| (s.stages - 1) * s.steps);
            if narrow.is_some() {
                return narrow;
            }
        }
        for steps in [4, 2, 1] {
            if steps > longest || !k.is_multiple_of(32 * steps) {
                continue;
            }
            // Fewer stages first; more only where `k` leaves an odd number of chunks.
            for stages in (2..=deepest).rev().chain(deepest + 1..=4) {
                if let Some(sliced) = shape(f_tiles, steps, stages).sliced(n_out, k, cores, shared) {
                    return Some(sliced);
                }
            }
        }
        None
    }

    /// This shape with the k-slices [`MmaShape::k_splits_for`] picks among those that give every
    /// slice whole stages of chunks, or `None` where none does or its slots pass `shared`.
    fn sliced(self, n_out: usize, k: usize, cores: usize, shared: usize) -> Option<Self> {
        if self.shared_bytes() > shared {
            return None;
        }
        let chunks = k / (32 * self.steps);
        let splits = (1..=Self::MAX_K_SPLITS).filter(|s| chunks.is_multiple_of(s * self.stages));
        let k_splits = Self::k_splits_for(self.columns(n_out), splits, cores)?;
        Some(Self { k_splits, ..self })
    }

    /// Whether this shape computes `rows × k` by `[n_out, k]`: enough row tiles, whole W tiles
    /// across `n_out`, a whole number of stages' chunks in every k-slice.
    pub fn fits(&self, rows: usize, n_out: usize, k: usize) -> bool {
        rows > 0
            && self.f_tiles > 0
            && self.k_splits > 0
            && self.steps > 0
            && self.stages >= 2
            && rows <= 8 * self.t_tiles
            && n_out.is_multiple_of(16 * self.f_tiles)
            && k.is_multiple_of(32 * self.steps * self.k_splits * self.stages)
    }

    /// The k-slices for a grid of `columns` cubes per slice out of those that tile, `splits`
    /// (ascending), with one cube per core at a time (a cube takes most of a core's shared
    /// memory):
    /// - where one slice fits in one wave, the most slices that keep one wave: a slice more
    ///   re-reads `x` and writes partial sums, and on Qwen3-8B's and Qwen3.6-27B's shapes no
    ///   grid of two or more waves measured faster than the one-wave grid (`self-test
    ///   --sweep-splits`, docs/perf-notes.md, seventeenth session);
    /// - where it does not, the fewest slices whose grid keeps the cores at least
    ///   [`MmaShape::MIN_FILL`] busy over its waves — a grid just past a whole number of waves
    ///   (Qwen3.6-27B's fused gate/up: 136 cubes on 132 cores) would idle most of them through a
    ///   last wave as long as the others; or, if none does, the best-filled grid.
    pub fn k_splits_for(columns: usize, splits: impl Iterator<Item = usize>, cores: usize) -> Option<usize> {
        let splits: Vec<usize> = splits.collect();
        let cores = cores.max(1);
        if columns <= cores {
            return splits
                .iter()
                .rfind(|&&s| s * columns <= cores)
                .or(splits.first())
                .copied();
        }
        // The share of the cores' time the grid of `s` slices keeps busy over its waves.
        let fill = |s: usize| (columns * s) as f64 / ((columns * s).div_ceil(cores) * cores) as f64;
        splits
            .iter()
            .find(|&&s| fill(s) >= Self::MIN_FILL)
            .or_else(|| splits.iter().max_by(|&&a, &&b| fill(a).total_cmp(&fill(b))))
            .copied()
    }

    /// The least share of the cores' time a grid of several waves keeps busy: at 65 rows on
    /// Qwen3.6-27B's fused gate/up, 4 slices (544 cubes, 82 %) took 182 µs, 2 (272, 69 %) 190
    /// and 1 (136, 52 %) 224 on an H100; 5 (680, 86 %) 193, paying for more partial sums.
    pub const MIN_FILL: f64 = 0.8;

    /// Cubes along the output features.
    pub fn columns(&self, n_out: usize) -> usize {
        n_out.div_ceil(MMA_PLANES * 16 * self.f_tiles)
    }

    /// Shared memory of a cube: `stages` slots of W and `x` rows, 16 bytes per vector.
    pub fn shared_bytes(&self) -> usize {
        let staged_rows = MMA_PLANES * 16 * self.f_tiles + 8 * self.t_tiles;
        self.stages * staged_rows * staged_row_vecs(self.steps) * 16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An H200's shared memory per cube.
    const H200_SHARED: usize = 227 * 1024;

    /// Every shape the decode path meets tiles exactly: whole stages of chunks in every k-slice,
    /// W tiles that divide `n_out`, accumulators that fit the registers, slots that fit the
    /// shared memory — of an H200 and of a GPU with 99 KB per cube — and grids of one wave, or
    /// of several that keep the cores busy.
    #[test]
    fn mma_shapes_divide_the_work() {
        for shared in [H200_SHARED, 99 * 1024] {
            for rows in [9, 16, 17, 33, 65, 129, 144] {
                for (n_out, k) in [
                    (6144, 4096),
                    (4096, 4096),
                    (24576, 4096),
                    (4096, 12288),
                    (151936, 4096),
                    (4096, 20480),
                    (34816, 5120),
                    (5120, 17408),
                    (80, 96),
                ] {
                    let s = MmaShape::choose(rows, n_out, k, 132, shared).expect("tiles");
                    assert_eq!(s.t_tiles, rows.div_ceil(8));
                    assert!(s.fits(rows, n_out, k), "{rows} {n_out} {k}: {s:?}");
                    assert!(
                        s.f_tiles * s.t_tiles <= MmaShape::MAX_ACCUMULATOR_TILES,
                        "accumulators per plane: {s:?}"
                    );
                    assert!(s.shared_bytes() <= shared, "{s:?}: {} bytes", s.shared_bytes());
                    // One wave where one slice fits in it (Qwen3-8B's layers: the picks of
                    // before the fill rule); else the cores at least `MIN_FILL` busy.
                    let (columns, cubes) = (s.columns(n_out), s.columns(n_out) * s.k_splits);
                    if columns <= 132 {
                        assert!(cubes <= 132, "{rows} {n_out} {k}: {s:?} gives {cubes} cubes");
                    } else {
                        let fill = cubes as f64 / (cubes.div_ceil(132) * 132) as f64;
                        assert!(
                            fill >= MmaShape::MIN_FILL,
                            "{rows} {n_out} {k}: {s:?} fills {fill}"
                        );
                    }
                }
            }
        }
        // The sweeps' picks: on an H200, 16 rows on 4096 → 12288 and 12288 → 4096; on an H100,
        // the fused gate/up of Qwen3-8B at 16 rows (one wave: 1 slice) and of Qwen3.6-27B at 65
        // rows (136 cubes a slice: 4 slices).
        assert_eq!(
            MmaShape::choose_swiglu(16, 24576, 4096, 132, H200_SHARED).map(|s| s.k_splits),
            Some(1)
        );
        assert_eq!(
            MmaShape::choose_swiglu(65, 34816, 5120, 132, H200_SHARED).map(|s| s.k_splits),
            Some(4)
        );
        let pick = |rows, n_out, k| MmaShape::choose(rows, n_out, k, 132, H200_SHARED).unwrap();
        assert_eq!(
            (pick(16, 12288, 4096).k_splits, pick(16, 4096, 12288).k_splits),
            (1, 4)
        );
        assert_eq!(
            pick(65, 12288, 4096),
            MmaShape {
                t_tiles: 9,
                f_tiles: 2,
                k_splits: 2,
                steps: 4,
                stages: 2
            }
        );
        // Narrow outputs at 65 rows: the fastest shapes of the H100 sweeps (o_proj 4096 → 4096
        // in the seventeenth session, 12288 → 4096 in the fifteenth).
        assert_eq!(
            pick(65, 4096, 4096),
            MmaShape {
                t_tiles: 9,
                f_tiles: 1,
                k_splits: 4,
                steps: 2,
                stages: 4
            }
        );
        assert_eq!(
            pick(65, 4096, 12288),
            MmaShape {
                t_tiles: 9,
                f_tiles: 1,
                k_splits: 4,
                steps: 4,
                stages: 3
            }
        );
        assert_eq!(MmaShape::choose(145, 4096, 4096, 132, H200_SHARED), None);
        // SwiGLU: gate and up tiles in every plane, up to 72 rows; the fused gate/up weights of
        // Qwen3-8B (2 × 12288) and its drafter fit both GPUs' shared memory.
        for shared in [H200_SHARED, 99 * 1024] {
            for rows in [9, 16, 20, 33, 65, 72] {
                let s = MmaShape::choose_swiglu(rows, 24576, 4096, 132, shared).expect("tiles");
                assert_eq!(s.f_tiles, 2, "{rows}: {s:?}");
                assert!(s.fits(rows, 24576, 4096) && s.shared_bytes() <= shared, "{s:?}");
            }
            assert_eq!(MmaShape::choose_swiglu(73, 24576, 4096, 132, shared), None);
            assert_eq!(MmaShape::choose_swiglu(16, 2000, 4096, 132, shared), None);
        }
        assert_eq!(MmaShape::choose(16, 4100, 4096, 132, H200_SHARED), None);
        assert_eq!(MmaShape::choose(16, 4096, 48, 132, H200_SHARED), None);
    }

    /// Staged rows of `x` are odd multiples of 64 bytes at every chunk length.
    #[test]
    fn staged_rows_alternate_banks() {
        for steps in [1, 2, 4, 8] {
            let bytes = 16 * staged_row_vecs(steps);
            assert!(bytes >= 64 * steps, "{steps} steps: {bytes} bytes");
            assert_eq!(bytes % 128, 64, "{steps} steps: {bytes} bytes");
        }
    }
}

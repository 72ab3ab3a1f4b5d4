//! `y = x · Wᵀ` for a few rows of `x` (decode, drafter blocks) with the weight in the Hugging Face
//! `[out, in]` layout: a GEMV that streams each weight row once, reused across the `x` rows.
//! Reference: [`crate::reference::linear`].

use cubecl::prelude::*;

/// The most `x` rows one launch handles; more rows go to the tiled matmul.
pub const MAX_ROWS: usize = 8;

/// `k_planes` planes (warps) per output feature `n`: their lanes stride over the `in` dimension
/// with `N`-wide vector loads, accumulate in f32 for each of the `rows` inputs and reduce with
/// `plane_sum`, then across the `k_planes` planes through shared memory. `x: [rows, k]`,
/// `w: [n_out, k]`, `y: [rows, n_out]`, all contiguous; `k_vecs` is `k / N`. Launch with
/// `CubeDim = (plane size, planes)`, `k_planes` dividing `planes`, and enough cubes to cover
/// `n_out · k_planes` planes. Several planes per feature fill the GPU when `n_out` is small
/// (4096 features × one plane is half an H200's warp slots).
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
                // The separate launches' arithmetic: `F` values, `g / (1 + e^(0 − g)) · u` in f32.
                let g = f32::cast_from(F::cast_from(totals[r]));
                let u = f32::cast_from(F::cast_from(totals[rows + r]));
                y[r * n_out + n] = F::cast_from(g / (1.0 + f32::exp(0.0 - g)) * u);
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
/// W goes from global memory straight into registers — each lane loads 16 contiguous bytes of a
/// W row per 32-wide k-step, one chunk ahead of the MMAs — and is read exactly once. Because a
/// dot product does not care in which order it visits `k`, a lane's 8 loaded elements serve as
/// its A fragments of two MMAs (elements 0–3 for the k-slots `2t, 2t+1, 2t+8, 2t+9` of the first,
/// 4–7 of the second, `t = lane % 4`); the B fragments of `x` use the same slots, read as 16
/// contiguous bytes of a staged row. The chunk of `x` for all rows is staged in shared memory,
/// double-buffered: one barrier per chunk, zeros past `rows`.
///
/// `x` and `w` are read as vectors of 4 32-bit words (`N` = 4), each word a pair of `F` values:
/// exactly one fragment register, so fragments are bit-casts rather than element moves.
///
/// A cube of [`MMA_PLANES`] planes covers `MMA_PLANES · 16 · f_tiles` output features and one of
/// `k_splits` slices of `k` (`CUBE_POS_Y`); several slices write f32 partial sums
/// `partial: [k_splits, rows, n_out]` for [`linear_split_sum()`]. Launch with
/// `CubeDim = (32, MMA_PLANES)` and `(⌈n_out / (MMA_PLANES · 16 · f_tiles)⌉, k_splits)` cubes;
/// `rows ≤ 8 · t_tiles`, `n_out` a multiple of `16 · f_tiles`, `k` of `32 · steps · k_splits`.
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
) {
    let def = cmma::MmaDefinition::<F, F, f32>::new(16usize, 8usize, 16usize);
    let size!(NA) = def.vector_size(cmma::MatrixIdent::A);
    let size!(NC) = def.vector_size(cmma::MatrixIdent::Accumulator);
    let plane = UNIT_POS_Y as usize;
    let lane = UNIT_POS_X as usize;
    let unit = UNIT_POS as usize;
    let g = lane / 4;
    let t = lane % 4;
    let f0 = (CUBE_POS_X as usize * MMA_PLANES + plane) * comptime!(16 * f_tiles);
    let active = f0 < n_out;
    // Inactive planes (past `n_out`) stream the first rows of W instead.
    let mut w_row0 = 0usize;
    if active {
        w_row0 = f0;
    }
    let chunk_vecs = comptime!(4 * steps);
    let k_vecs = comptime!(k / 8);
    let slice_vecs = comptime!(k_vecs / k_splits);
    let chunks = comptime!(slice_vecs / chunk_vecs);
    let k_begin = CUBE_POS_Y as usize * slice_vecs;
    let pitch = comptime!(staged_row_vecs(steps));
    let tokens = comptime!(8 * t_tiles);
    let x_vecs = comptime!(tokens * chunk_vecs);
    let x_per_unit = comptime!(x_vecs.div_ceil(MMA_PLANES * 32));
    let buffer = comptime!(tokens * pitch);
    let mut x_staged = SharedMemory::<Vector<u32, N>>::new_aligned(comptime!(2 * buffer), 16usize);
    // Per lane and chunk: for each feature tile, its rows `g` and `g + 8`, one vector per step.
    let w_per_lane = comptime!(f_tiles * 2 * steps);
    let mut w_now = Array::<Vector<u32, N>>::new(w_per_lane);
    let mut w_next = Array::<Vector<u32, N>>::new(w_per_lane);
    let mut x_next = Array::<Vector<u32, N>>::new(x_per_unit);

    let mut accs = Sequence::<Array<Vector<f32, NC>>>::new();
    #[unroll]
    for _ in 0..f_tiles * t_tiles {
        let mut acc = Array::<Vector<f32, NC>>::new(2usize);
        acc[0] = Vector::<f32, NC>::new(0.0);
        acc[1] = Vector::<f32, NC>::new(0.0);
        accs.push(acc);
    }

    // Chunk 0 into registers (W) and the first buffer (x).
    load_w_chunk::<N>(w, &mut w_now, w_row0 + g, k_vecs, k_begin + t, f_tiles, steps);
    load_x_chunk::<N>(x, &mut x_next, rows, unit, k_vecs, k_begin, chunk_vecs, x_vecs);
    store_x_chunk::<N>(&mut x_staged, &x_next, unit, 0usize, pitch, chunk_vecs, x_vecs);
    sync_cube();

    for c in 0..chunks {
        let next = c + 1 < chunks;
        if next {
            let k0 = k_begin + (c + 1) * chunk_vecs;
            load_w_chunk::<N>(w, &mut w_next, w_row0 + g, k_vecs, k0 + t, f_tiles, steps);
            load_x_chunk::<N>(x, &mut x_next, rows, unit, k_vecs, k0, chunk_vecs, x_vecs);
        }
        let staged = (c % 2) * buffer;
        #[unroll]
        for s in 0..steps {
            // The two MMAs of a step (elements 0–3, then 4–7 of every loaded vector) in separate
            // passes over the tiles, so that consecutive MMAs update different accumulators.
            #[unroll]
            for h in 0..2usize {
                #[unroll]
                for j in 0..t_tiles {
                    let xv = x_staged[staged + (j * 8 + g) * pitch + s * 4 + t];
                    let mut b = Array::<Vector<F, NA>>::new(2usize);
                    b[0] = Vector::<F, NA>::reinterpret(xv[comptime!(2 * h)]);
                    b[1] = Vector::<F, NA>::reinterpret(xv[comptime!(2 * h + 1)]);
                    #[unroll]
                    for f in 0..f_tiles {
                        let lo = w_now[comptime!((f * 2) * steps + s)];
                        let hi = w_now[comptime!((f * 2 + 1) * steps + s)];
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
        if next {
            // The other buffer was last read before the previous barrier.
            let other = ((c + 1) % 2) * buffer;
            store_x_chunk::<N>(&mut x_staged, &x_next, unit, other, pitch, chunk_vecs, x_vecs);
            #[unroll]
            for i in 0..w_per_lane {
                w_now[i] = w_next[i];
            }
        }
        sync_cube();
    }

    // Accumulator element `(h, e)` of tile `(f, j)` is feature `f0 + 16f + 8h + g`, row
    // `8j + 2t + e`.
    if active {
        #[unroll]
        for f in 0..f_tiles {
            #[unroll]
            for j in 0..t_tiles {
                let acc = accs.index(comptime!(f * t_tiles + j));
                #[unroll]
                for h in 0..2usize {
                    let v = acc[h];
                    let col = f0 + comptime!(16 * f + 8 * h) + g;
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

/// The 16-byte vectors per staged row of `x` in [`linear_mma()`]: a chunk of `steps` 32-wide
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

/// A lane's W vectors of one chunk for [`linear_mma()`]: rows `row` and `row + 8` of each
/// feature tile, one vector per step, from vector column `k0` (the lane's `t` included).
#[cube]
fn load_w_chunk<N: Size>(
    w: &Array<Vector<u32, N>>,
    regs: &mut Array<Vector<u32, N>>,
    row: usize,
    k_vecs: usize,
    k0: usize,
    #[comptime] f_tiles: usize,
    #[comptime] steps: usize,
) {
    #[unroll]
    for f in 0..f_tiles {
        #[unroll]
        for h in 0..2usize {
            #[unroll]
            for s in 0..steps {
                let r = row + comptime!(16 * f + 8 * h);
                regs[comptime!((f * 2 + h) * steps + s)] = w[r * k_vecs + k0 + s * 4];
            }
        }
    }
}

/// A unit's share of the `x` chunk at vector column `k0` for [`linear_mma()`], zeros past `rows`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_x_chunk<N: Size>(
    x: &Array<Vector<u32, N>>,
    regs: &mut Array<Vector<u32, N>>,
    rows: usize,
    unit: usize,
    k_vecs: usize,
    k0: usize,
    #[comptime] chunk_vecs: usize,
    #[comptime] x_vecs: usize,
) {
    #[unroll]
    for i in 0..comptime!(x_vecs.div_ceil(MMA_PLANES * 32)) {
        let e = i * comptime!(MMA_PLANES * 32) + unit;
        let row = e / chunk_vecs;
        let mut value = Vector::<u32, N>::new(0u32);
        if e < x_vecs && row < rows {
            value = x[row * k_vecs + k0 + e % chunk_vecs];
        }
        regs[i] = value;
    }
}

/// Stores a unit's share of an `x` chunk into the staging buffer at `at`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn store_x_chunk<N: Size>(
    staged: &mut SharedMemory<Vector<u32, N>>,
    regs: &Array<Vector<u32, N>>,
    unit: usize,
    at: usize,
    #[comptime] pitch: usize,
    #[comptime] chunk_vecs: usize,
    #[comptime] x_vecs: usize,
) {
    #[unroll]
    for i in 0..comptime!(x_vecs.div_ceil(MMA_PLANES * 32)) {
        let e = i * comptime!(MMA_PLANES * 32) + unit;
        if e < x_vecs {
            staged[at + (e / chunk_vecs) * pitch + e % chunk_vecs] = regs[i];
        }
    }
}

/// `y = Σ_s partial[s]` over the `splits` k-slices of [`linear_mma()`], one unit per element.
#[cube(launch_unchecked)]
pub fn linear_split_sum<F: Float>(
    partial: &Array<f32>,
    y: &mut Array<F>,
    len: usize,
    #[comptime] splits: usize,
) {
    let i = ABSOLUTE_POS;
    if i < len {
        let mut sum = 0.0f32;
        #[unroll]
        for s in 0..splits {
            sum += partial[s * len + i];
        }
        y[i] = F::cast_from(sum);
    }
}

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
    /// 32-wide k-steps per staged chunk of `x` (and per chunk of W loaded ahead).
    pub steps: usize,
}

impl MmaShape {
    /// The most k-slices: each adds `rows · n_out` f32 partial sums to write and read back.
    pub const MAX_K_SPLITS: usize = 16;

    /// The most 16×8 accumulator tiles per plane (`f_tiles · t_tiles`; four f32 registers per
    /// lane each): 144 rows at one feature tile, 72 at two.
    pub const MAX_ACCUMULATOR_TILES: usize = 18;

    /// The shape for `rows × k` by `[n_out, k]` on a device with `cores` streaming
    /// multiprocessors, or `None` when the sizes do not tile (`k` must be a multiple of 32,
    /// `n_out` of 16) or the rows are too many.
    ///
    /// Chunks of 128 k (64 or 32 where `k` needs it); two feature tiles per plane for 17–72 rows
    /// (every cube reads all of `x`: at 65 rows half the weight's bytes with one tile per plane,
    /// a quarter with two), one below (the two W chunks in flight would take 128 registers per
    /// lane) and above (the accumulators alone would take 80 or more); then the
    /// fewest k-slices (dividing the chunks) that give three cubes for every four cores: more
    /// slices re-read `x` and write partial sums, fewer leave cores idle. From the H200 sweep of
    /// 16, 65 and 129 rows on 4096 × 12288 and 12288 × 4096 (`ddtree-bench self-test
    /// --sweep-tiles`; the table, and how far each choice is from the best, in
    /// docs/perf-notes.md).
    pub fn choose(rows: usize, n_out: usize, k: usize, cores: usize) -> Option<Self> {
        if rows == 0 || rows > MAX_TILED_ROWS || !k.is_multiple_of(32) {
            return None;
        }
        let t_tiles = rows.div_ceil(8);
        let two = t_tiles >= 3 && 2 * t_tiles <= Self::MAX_ACCUMULATOR_TILES && n_out.is_multiple_of(32);
        let f_tiles = if two { 2 } else { 1 };
        if !n_out.is_multiple_of(16 * f_tiles) {
            return None;
        }
        let steps = [4, 2, 1].into_iter().find(|&s| k.is_multiple_of(32 * s))?;
        let shape = |k_splits| Self {
            t_tiles,
            f_tiles,
            k_splits,
            steps,
        };
        let chunks = k / (32 * steps);
        let wanted = (3 * cores).div_ceil(4 * shape(1).columns(n_out));
        let splits = || (1..=Self::MAX_K_SPLITS.min(chunks)).filter(|s| chunks.is_multiple_of(*s));
        let k_splits = splits()
            .find(|&s| s >= wanted)
            .or_else(|| splits().next_back())
            .unwrap_or(1);
        Some(shape(k_splits))
    }

    /// Whether this shape computes `rows × k` by `[n_out, k]`: enough row tiles, whole W tiles
    /// across `n_out`, whole chunks in every k-slice.
    pub fn fits(&self, rows: usize, n_out: usize, k: usize) -> bool {
        rows > 0
            && self.f_tiles > 0
            && self.k_splits > 0
            && self.steps > 0
            && rows <= 8 * self.t_tiles
            && n_out.is_multiple_of(16 * self.f_tiles)
            && k.is_multiple_of(32 * self.steps * self.k_splits)
    }

    /// Cubes along the output features.
    pub fn columns(&self, n_out: usize) -> usize {
        n_out.div_ceil(MMA_PLANES * 16 * self.f_tiles)
    }

    /// Shared memory of a cube: two staged chunks of `x`, 16 bytes per vector.
    pub fn shared_bytes(&self) -> usize {
        2 * 8 * self.t_tiles * staged_row_vecs(self.steps) * 16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shape the decode path meets tiles exactly: the k-slices divide the chunks, the W
    /// tiles divide `n_out`, and the grid has enough cubes for an H200's 132 cores.
    #[test]
    fn mma_shapes_divide_the_work() {
        for rows in [9, 16, 17, 33, 65, 129, 144] {
            for (n_out, k) in [
                (6144, 4096),
                (4096, 4096),
                (24576, 4096),
                (4096, 12288),
                (151936, 4096),
                (4096, 20480),
                (80, 96),
            ] {
                let s = MmaShape::choose(rows, n_out, k, 132).expect("tiles");
                assert_eq!(s.t_tiles, rows.div_ceil(8));
                assert!(s.fits(rows, n_out, k), "{rows} {n_out} {k}: {s:?}");
                assert!(
                    s.f_tiles * s.t_tiles <= MmaShape::MAX_ACCUMULATOR_TILES,
                    "accumulators per plane: {s:?}"
                );
                // An H200 gives a cube up to 227 KB.
                assert!(s.shared_bytes() <= 96 * 1024, "{s:?}: {} bytes", s.shared_bytes());
                let cubes = s.columns(n_out) * s.k_splits;
                assert!(
                    4 * cubes >= 3 * 132 || s.k_splits == MmaShape::MAX_K_SPLITS || k == 96,
                    "{rows} {n_out} {k}: {s:?} gives {cubes} cubes"
                );
            }
        }
        assert_eq!(MmaShape::choose(145, 4096, 4096, 132), None);
        assert_eq!(MmaShape::choose(16, 4100, 4096, 132), None);
        assert_eq!(MmaShape::choose(16, 4096, 48, 132), None);
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

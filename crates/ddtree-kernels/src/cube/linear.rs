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

/// Planes per cube of [`linear_tiles()`], each with its own output features.
pub const TILE_PLANES: usize = 8;

/// `y = x · Wᵀ` on tensor cores for 9–144 rows (tree verify, drafter blocks): 16×16×16 WMMA
/// tiles with bf16/f16 inputs and f32 accumulators.
///
/// A cube of [`TILE_PLANES`] planes covers `TILE_PLANES · 16 · n_tiles` output features (each
/// plane its own `16 · n_tiles`) and one of `k_splits` slices of the reduction (`CUBE_POS_Y`). It
/// walks its slice in chunks of `16 · unroll`, software-pipelined: while the planes run the MMAs
/// of one chunk from shared memory, the 16-byte loads of the next are in flight — each plane's
/// rows of W (W streams once, row-major and untransposed: the B tiles are column-major views of
/// it), and the chunk of `x` for all rows, read once per cube and zero past `rows` (no padded
/// copy of `x`). One slice writes `y`; several write f32 partial sums
/// `partial: [k_splits, rows, n_out]` for [`linear_split_sum()`]. `x` and `w` are read in
/// vectors of `N`.
///
/// Launch with `CubeDim = (32, TILE_PLANES)` and `(⌈n_out / (TILE_PLANES · 16 · n_tiles)⌉,
/// k_splits)` cubes; `n_out` must be a multiple of `16 · n_tiles`, `k` of
/// `16 · unroll · k_splits`, and every tile start 32-byte aligned.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn linear_tiles<F: Float, N: Size>(
    x: &Array<Vector<F, N>>,
    w: &Array<Vector<F, N>>,
    y: &mut Array<F>,
    partial: &mut Array<f32>,
    rows: usize,
    n_out: usize,
    #[comptime] k: usize,
    #[comptime] m_tiles: usize,
    #[comptime] n_tiles: usize,
    #[comptime] k_splits: usize,
    #[comptime] unroll: usize,
) {
    let plane = UNIT_POS_Y as usize;
    let lane = UNIT_POS_X as usize;
    let unit = UNIT_POS as usize;
    let n0 = (CUBE_POS_X as usize * TILE_PLANES + plane) * comptime!(16 * n_tiles);
    let active = n0 < n_out;
    // Inactive planes (past `n_out`) stream the cube's first rows instead.
    let mut w_row0 = 0usize;
    if active {
        w_row0 = n0;
    }
    let vec = N::value();
    let chunk_vecs = comptime!(16 * unroll / vec);
    let chunks = comptime!(k / k_splits / (16 * unroll));
    let k_vecs = comptime!(k / vec);
    let k_begin = CUBE_POS_Y as usize * comptime!(k_vecs / k_splits);
    // Staged rows are a chunk wide plus 16 bytes, so that the rows of a fragment load fall on
    // different shared-memory banks; fragment starts stay 32-byte aligned.
    let pitch = comptime!(chunk_vecs + 1);
    let w_rows = comptime!(16 * n_tiles);
    let w_vecs = comptime!(16 * n_tiles * chunk_vecs);
    let x_vecs = comptime!(16 * m_tiles * chunk_vecs);
    let w_per_lane = comptime!(w_vecs.div_ceil(32));
    let x_per_unit = comptime!(x_vecs.div_ceil(TILE_PLANES * 32));
    let x_len = comptime!(16 * m_tiles * pitch);
    let w_len = comptime!(TILE_PLANES * 16 * n_tiles * pitch);
    let mut x_staged = SharedMemory::<Vector<F, N>>::new_aligned(x_len, 32usize);
    let mut w_staged = SharedMemory::<Vector<F, N>>::new_aligned(w_len, 32usize);
    let mut out_tile = SharedMemory::<f32>::new_aligned(comptime!(TILE_PLANES * 256), 32usize);
    let mut w_next = Array::<Vector<F, N>>::new(w_per_lane);
    let mut x_next = Array::<Vector<F, N>>::new(x_per_unit);

    let mut accs = Sequence::<cmma::Matrix<f32>>::new();
    #[unroll]
    for _ in 0..m_tiles * n_tiles {
        accs.push(cmma::Matrix::<f32>::from_value(
            cmma::MatrixIdent::Accumulator,
            16usize,
            16usize,
            16usize,
            cmma::MatrixLayout::Undefined,
            0.0,
        ));
    }

    // Iteration `c` issues the loads of chunk `c`, runs the MMAs of chunk `c − 1` (in shared
    // memory) while they fly, then stores chunk `c` for the next iteration.
    for c in 0..comptime!(chunks + 1) {
        if c < chunks {
            let k0 = k_begin + c * chunk_vecs;
            #[unroll]
            for j in 0..w_per_lane {
                let e = j * 32 + lane;
                if e < w_vecs {
                    w_next[j] = w[(w_row0 + e / chunk_vecs) * k_vecs + k0 + e % chunk_vecs];
                }
            }
            #[unroll]
            for j in 0..x_per_unit {
                let e = j * comptime!(TILE_PLANES * 32) + unit;
                let row = e / chunk_vecs;
                let mut value = Vector::<F, N>::new(F::from_int(0));
                if row < rows {
                    value = x[row * k_vecs + k0 + e % chunk_vecs];
                }
                x_next[j] = value;
            }
        }
        if c > 0 {
            #[unroll]
            for u in 0..unroll {
                let mut bs = Sequence::<cmma::Matrix<F>>::new();
                #[unroll]
                for nt in 0..n_tiles {
                    // SAFETY: loaded on the next line. (`from_slice` takes scalar slices only.)
                    let b = unsafe {
                        cmma::Matrix::<F>::uninitialized(
                            cmma::MatrixIdent::B,
                            16usize,
                            16usize,
                            16usize,
                            cmma::MatrixLayout::ColMajor,
                        )
                    };
                    let at = (plane * w_rows + nt * 16) * pitch + u * comptime!(16 / vec);
                    cmma::load(&b, &w_staged.slice(at, w_len), comptime!(pitch * vec) as u32);
                    bs.push(b);
                }
                #[unroll]
                for mt in 0..m_tiles {
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
                    let at = mt * 16 * pitch + u * comptime!(16 / vec);
                    cmma::load(&a, &x_staged.slice(at, x_len), comptime!(pitch * vec) as u32);
                    #[unroll]
                    for nt in 0..n_tiles {
                        let acc = accs.index(comptime!(mt * n_tiles + nt));
                        cmma::execute::<F, F, f32, f32>(&a, bs.index(nt), acc, acc);
                    }
                }
            }
        }
        if c < chunks {
            // Every plane is done with the previous chunk before it is overwritten.
            sync_cube();
            #[unroll]
            for j in 0..w_per_lane {
                let e = j * 32 + lane;
                if e < w_vecs {
                    w_staged[(plane * w_rows + e / chunk_vecs) * pitch + e % chunk_vecs] = w_next[j];
                }
            }
            #[unroll]
            for j in 0..x_per_unit {
                let e = j * comptime!(TILE_PLANES * 32) + unit;
                if e < x_vecs {
                    x_staged[(e / chunk_vecs) * pitch + e % chunk_vecs] = x_next[j];
                }
            }
            sync_cube();
        }
    }

    // Each plane passes its tiles through its own slot of shared memory to write the real rows.
    if active {
        let slot = plane * 256;
        #[unroll]
        for t in 0..m_tiles * n_tiles {
            cmma::store(
                &mut out_tile.slice_mut(slot, slot + 256),
                accs.index(t),
                16u32,
                cmma::MatrixLayout::RowMajor,
            );
            sync_plane();
            let mut i = lane;
            while i < 256 {
                let row = comptime!(t / n_tiles) * 16 + i / 16;
                let col = n0 + comptime!(t % n_tiles) * 16 + i % 16;
                if row < rows {
                    let value = out_tile[slot + i];
                    if comptime!(k_splits == 1) {
                        y[row * n_out + col] = F::cast_from(value);
                    } else {
                        partial[(CUBE_POS_Y as usize * rows + row) * n_out + col] = value;
                    }
                }
                i += 32;
            }
            sync_plane();
        }
    }
}

/// `y = Σ_s partial[s]` over the `splits` k-slices of [`linear_tiles()`], one unit per element.
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

/// A launch shape for [`linear_tiles()`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileShape {
    /// 16-row tiles of `x` (rows padded up to `16 · m_tiles` in shared memory).
    pub m_tiles: usize,
    /// 16-feature tiles of W per plane.
    pub n_tiles: usize,
    /// Slices of `k` across cubes (partial sums added by [`linear_split_sum()`] when more than
    /// one).
    pub k_splits: usize,
    /// 16-wide k-steps per staged chunk of `x` and W.
    pub unroll: usize,
}

impl TileShape {
    /// The most k-slices: each adds `rows · n_out` f32 partial sums to write and read back.
    pub const MAX_K_SPLITS: usize = 16;

    /// The shape for `rows × k` by `[n_out, k]` on a device with `cores` streaming
    /// multiprocessors, or `None` when the sizes do not tile (`k` and `n_out` must be multiples
    /// of 16) or the rows are too many.
    ///
    /// One W tile per plane and chunks of 64 k (32 or 16 where `k` needs it), then the fewest
    /// k-slices (dividing the chunks) that give every core at least two cubes — the best or
    /// within 5 % of the best of every shape in the H200 sweep of 16, 65 and 129 rows on
    /// 4096 × 12288 and 12288 × 4096 (`ddtree-bench self-test --sweep-tiles`,
    /// docs/perf-notes.md).
    pub fn choose(rows: usize, n_out: usize, k: usize, cores: usize) -> Option<Self> {
        if rows == 0 || rows > MAX_TILED_ROWS || !n_out.is_multiple_of(16) || !k.is_multiple_of(16) {
            return None;
        }
        let unroll = [4, 2, 1].into_iter().find(|&u| k.is_multiple_of(16 * u))?;
        let shape = |k_splits| Self {
            m_tiles: rows.div_ceil(16),
            n_tiles: 1,
            k_splits,
            unroll,
        };
        let columns = shape(1).columns(n_out);
        let chunks = k / (16 * unroll);
        let wanted = (2 * cores).div_ceil(columns);
        let k_splits = (1..=Self::MAX_K_SPLITS.min(chunks))
            .filter(|s| chunks.is_multiple_of(*s))
            .find(|&s| s >= wanted)
            .unwrap_or_else(|| {
                (1..=Self::MAX_K_SPLITS.min(chunks))
                    .rev()
                    .find(|s| chunks.is_multiple_of(*s))
                    .unwrap_or(1)
            });
        Some(shape(k_splits))
    }

    /// Whether this shape computes `rows × k` by `[n_out, k]`: enough row tiles, whole W tiles
    /// across `n_out`, whole chunks in every k-slice.
    pub fn fits(&self, rows: usize, n_out: usize, k: usize) -> bool {
        let chunk = 16 * self.unroll;
        rows > 0
            && self.n_tiles > 0
            && self.k_splits > 0
            && self.unroll > 0
            && rows <= 16 * self.m_tiles
            && n_out.is_multiple_of(16 * self.n_tiles)
            && k.is_multiple_of(chunk * self.k_splits)
    }

    /// Cubes along the output features.
    pub fn columns(&self, n_out: usize) -> usize {
        n_out.div_ceil(TILE_PLANES * 16 * self.n_tiles)
    }

    /// Shared memory of a cube for 2-byte elements: the staged chunks of `x` and W (rows
    /// a chunk wide plus 16 bytes) and the planes' output slots.
    pub fn shared_bytes(&self) -> usize {
        let row = 32 * self.unroll + 16;
        (16 * self.m_tiles + TILE_PLANES * 16 * self.n_tiles) * row + TILE_PLANES * 256 * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shape the decode path meets tiles exactly: the k-slices divide the chunks, the W
    /// tiles divide `n_out`, and the grid has enough cubes for an H200's 132 cores.
    #[test]
    fn tile_shapes_divide_the_work() {
        for rows in [9, 16, 17, 33, 65, 129, 144] {
            for (n_out, k) in [
                (6144, 4096),
                (4096, 4096),
                (24576, 4096),
                (4096, 12288),
                (151936, 4096),
                (4096, 20480),
                (80, 48),
            ] {
                let s = TileShape::choose(rows, n_out, k, 132).expect("tiles");
                assert_eq!(s.m_tiles, rows.div_ceil(16));
                assert!(n_out.is_multiple_of(16 * s.n_tiles));
                assert!(
                    k.is_multiple_of(16 * s.unroll * s.k_splits),
                    "{rows} {n_out} {k}: {s:?}"
                );
                assert!(s.fits(rows, n_out, k), "{rows} {n_out} {k}: {s:?}");
                assert!(s.m_tiles * s.n_tiles <= 9, "accumulators per plane: {s:?}");
                assert!(s.shared_bytes() <= 48 * 1024, "{s:?}: {} bytes", s.shared_bytes());
                let cubes = s.columns(n_out) * s.k_splits;
                assert!(
                    cubes >= 2 * 132 || s.k_splits == TileShape::MAX_K_SPLITS || k == 48,
                    "{rows} {n_out} {k}: {s:?} gives {cubes} cubes"
                );
            }
        }
        assert_eq!(TileShape::choose(145, 4096, 4096, 132), None);
        assert_eq!(TileShape::choose(16, 4100, 4096, 132), None);
        assert_eq!(TileShape::choose(16, 4096, 40, 132), None);
    }
}

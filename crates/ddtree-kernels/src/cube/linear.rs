//! `y = x · Wᵀ` for a few rows of `x` (decode, drafter blocks) with the weight in the Hugging Face
//! `[out, in]` layout: a GEMV that streams each weight row once, reused across the `x` rows.
//! Reference: [`crate::reference::linear`].

use cubecl::prelude::*;

/// The most `x` rows one launch handles; more rows go to the tiled matmul.
pub const MAX_ROWS: usize = 8;

/// One plane (warp) per output feature `n`: its lanes stride over the `in` dimension with
/// `N`-wide vector loads, accumulate in f32 for each of the `rows` inputs, and reduce with
/// `plane_sum`. `x: [rows, k]`, `w: [n_out, k]`, `y: [rows, n_out]`, all contiguous; `k_vecs` is
/// `k / N`. Launch with `CubeDim = (plane size, planes per cube)` and enough cubes to cover
/// `n_out` planes.
#[cube(launch_unchecked)]
pub fn linear_rows<F: Float, N: Size>(
    x: &Array<Vector<F, N>>,
    w: &Array<Vector<F, N>>,
    y: &mut Array<F>,
    k_vecs: usize,
    n_out: usize,
    #[comptime] rows: usize,
) {
    let n = (CUBE_POS_X * CUBE_DIM_Y + UNIT_POS_Y) as usize;
    if n < n_out {
        let lane = UNIT_POS_X as usize;
        let step = CUBE_DIM_X as usize;
        let base = n * k_vecs;
        let mut acc = Array::<Vector<f32, N>>::new(rows);
        #[unroll]
        for r in 0..rows {
            acc[r] = Vector::<f32, N>::new(0.0);
        }
        let mut kv = lane;
        while kv < k_vecs {
            let wv = Vector::<f32, N>::cast_from(w[base + kv]);
            #[unroll]
            for r in 0..rows {
                let xv = Vector::<f32, N>::cast_from(x[r * k_vecs + kv]);
                acc[r] = fma(wv, xv, acc[r]);
            }
            kv += step;
        }
        #[unroll]
        for r in 0..rows {
            let total = plane_sum(f32::cast_from(acc[r].vector_sum()));
            if lane == 0 {
                y[r * n_out + n] = F::cast_from(total);
            }
        }
    }
}

/// The most `x` rows the tensor-core kernel handles (a verify of up to 128 tree nodes plus the
/// root needs 129); more go to burn's matmul.
pub const MAX_TILED_ROWS: usize = 144;

/// `y = x · Wᵀ` on tensor cores for 9–144 rows (tree verify, drafter blocks): 16×16×16 WMMA
/// tiles with bf16/f16 inputs and f32 accumulators.
///
/// One cube covers `16 · n_tiles` output features and all `rows ≤ 16 · m_tiles` rows of `x`. Its
/// `split` planes divide `k`; each keeps
/// `m_tiles · n_tiles` accumulators, loads `unroll` k-steps of W fragments before issuing the
/// MMAs (W streams once; the small `x` is served from L1/L2), and the split-K partial sums meet
/// in shared memory. W fragments are read as a column-major view of the row-major `[n_out, k]`
/// weight, so no transpose is made. The last row tile is staged in shared memory with zeros past
/// `rows`, so `x` needs no padding. `y: [rows, n_out]`.
/// Launch with `CubeDim = (32, split)` and `n_out / (16 · n_tiles)` cubes; `k` must be a
/// multiple of `16 · unroll · split`.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn linear_tiles<F: Float>(
    x: &Array<F>,
    w: &Array<F>,
    y: &mut Array<F>,
    rows: usize,
    n_out: usize,
    #[comptime] k: usize,
    #[comptime] m_tiles: usize,
    #[comptime] n_tiles: usize,
    #[comptime] split: usize,
    #[comptime] unroll: usize,
) {
    let n0 = CUBE_POS_X as usize * comptime!(16 * n_tiles);
    let plane = UNIT_POS_Y as usize;
    let k_per_plane = comptime!(k / split);
    let steps = comptime!(k_per_plane / (16 * unroll));
    let k_start = plane * k_per_plane;
    let (w_len, x_len) = (w.len(), x.len());
    let last = comptime!(m_tiles - 1);
    let mut staged = SharedMemory::<F>::new_aligned(comptime!(split * unroll * 256), 32usize);

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

    for s in 0..steps {
        let k0 = k_start + s * comptime!(16 * unroll);
        let mut ws = Sequence::<cmma::Matrix<F>>::new();
        #[unroll]
        for u in 0..unroll {
            #[unroll]
            for nt in 0..n_tiles {
                ws.push(cmma::Matrix::<F>::from_slice(
                    cmma::MatrixIdent::B,
                    16usize,
                    16usize,
                    16usize,
                    cmma::MatrixLayout::ColMajor,
                    &w.slice((n0 + nt * 16) * k + k0 + u * 16, w_len),
                    k as u32,
                ));
            }
        }
        // The last row tile of these k-steps, zero past `rows` (after the previous step's
        // fragment loads from it).
        sync_plane();
        #[unroll]
        for u in 0..unroll {
            let mut e = UNIT_POS_X as usize;
            while e < 256 {
                let row = last * 16 + e / 16;
                let mut value = F::from_int(0);
                if row < rows {
                    value = x[row * k + k0 + u * 16 + e % 16];
                }
                staged[(plane * unroll + u) * 256 + e] = value;
                e += 32;
            }
        }
        sync_plane();
        #[unroll]
        for u in 0..unroll {
            #[unroll]
            for mt in 0..m_tiles {
                let a = if comptime!(mt == last) {
                    let at = (plane * unroll + u) * 256;
                    cmma::Matrix::<F>::from_slice(
                        cmma::MatrixIdent::A,
                        16usize,
                        16usize,
                        16usize,
                        cmma::MatrixLayout::RowMajor,
                        &staged.slice(at, at + 256),
                        16u32,
                    )
                } else {
                    cmma::Matrix::<F>::from_slice(
                        cmma::MatrixIdent::A,
                        16usize,
                        16usize,
                        16usize,
                        cmma::MatrixLayout::RowMajor,
                        &x.slice(mt * 16 * k + k0 + u * 16, x_len),
                        k as u32,
                    )
                };
                #[unroll]
                for nt in 0..n_tiles {
                    let acc = accs.index(comptime!(mt * n_tiles + nt));
                    cmma::execute::<F, F, f32, f32>(&a, ws.index(comptime!(u * n_tiles + nt)), acc, acc);
                }
            }
        }
    }

    // Split-K: every plane stores its tiles, then the cube sums them and writes the real rows.
    let tiles = comptime!(m_tiles * n_tiles);
    let tile_values = comptime!(m_tiles * n_tiles * 256);
    let mut partial = SharedMemory::<f32>::new(comptime!(split * m_tiles * n_tiles * 256));
    #[unroll]
    for t in 0..tiles {
        let offset = (plane * tiles + t) * 256;
        cmma::store(
            &mut partial.slice_mut(offset, offset + 256),
            accs.index(t),
            16u32,
            cmma::MatrixLayout::RowMajor,
        );
    }
    sync_cube();

    let mut i = UNIT_POS as usize;
    while i < tile_values {
        let mut sum = 0.0f32;
        #[unroll]
        for p in 0..split {
            sum += partial[p * tile_values + i];
        }
        let tile = i / 256;
        let row = (tile / n_tiles) * 16 + (i % 256) / 16;
        if row < rows {
            y[row * n_out + n0 + (tile % n_tiles) * 16 + i % 16] = F::cast_from(sum);
        }
        i += CUBE_DIM as usize;
    }
}

/// A launch shape for [`linear_tiles()`]: the tiles per cube, the planes splitting `k` and the
/// k-steps loaded ahead. Chosen from the H200 measurements in `docs/perf-notes.md`: wide split-K
/// for few row tiles (the W stream needs many planes in flight), fewer planes and two k-steps of
/// look-ahead as the row tiles (accumulators per plane) grow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileShape {
    /// 16-row tiles of `x` (rows padded up to `16 · m_tiles`).
    pub m_tiles: usize,
    /// 16-feature tiles of W per cube.
    pub n_tiles: usize,
    /// Planes per cube, each taking `k / split` of the reduction.
    pub split: usize,
    /// k-steps of W fragments loaded before the MMAs.
    pub unroll: usize,
}

impl TileShape {
    /// The shape for `rows × k` by `[n_out, k]`, or `None` when the sizes do not tile (`k` and
    /// `n_out` must be multiples of 16) or need more shared memory than `max_shared_bytes`.
    pub fn choose(rows: usize, n_out: usize, k: usize, max_shared_bytes: usize) -> Option<Self> {
        if rows == 0 || rows > MAX_TILED_ROWS || !n_out.is_multiple_of(16) || !k.is_multiple_of(16) {
            return None;
        }
        let m_tiles = rows.div_ceil(16);
        let n_tiles = if n_out.is_multiple_of(32) { 2 } else { 1 };
        let unroll = if m_tiles >= 4 && k.is_multiple_of(32) {
            2
        } else {
            1
        };
        let mut split = match m_tiles {
            1 => 16,
            2..=4 => 8,
            _ => 4,
        };
        let shared = |split: usize| split * m_tiles * n_tiles * 256 * size_of::<f32>();
        while split > 1 && (!k.is_multiple_of(16 * unroll * split) || shared(split) > max_shared_bytes) {
            split /= 2;
        }
        (shared(split) <= max_shared_bytes).then_some(Self {
            m_tiles,
            n_tiles,
            split,
            unroll,
        })
    }
}

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

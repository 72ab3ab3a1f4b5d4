//! RMSNorm, alone or after the residual add, one cube per row, f32 statistics. References:
//! [`crate::reference::rms_norm`], [`crate::reference::add_rms_norm`].
//!
//! A cube rather than a plane per row: a plane's lanes walked a 4096-wide row in 16 dependent
//! steps per pass, so the launch took ≈ 20 µs on an H200 whatever the row count; a cube's units
//! issue all their loads at once (docs/perf-notes.md).

use cubecl::prelude::*;

use super::reduce::cube_sum;

/// `y = x / sqrt(mean(x²) + eps) · weight` for `x, y: [rows, hidden]`, `weight: [hidden]`;
/// `hidden_vecs = hidden / N`, `inv_hidden = 1 / hidden`. Launch with one cube per row and
/// `CubeDim = (plane size, planes)`.
#[cube(launch_unchecked)]
pub fn rms_norm_rows<F: Float, N: Size>(
    x: &Array<Vector<F, N>>,
    weight: &Array<Vector<F, N>>,
    y: &mut Array<Vector<F, N>>,
    hidden_vecs: usize,
    inv_hidden: f32,
    eps: f32,
    #[comptime] planes: usize,
) {
    let base = CUBE_POS_X as usize * hidden_vecs;
    let mut squares = Vector::<f32, N>::new(0.0);
    let mut i = UNIT_POS as usize;
    while i < hidden_vecs {
        let v = Vector::<f32, N>::cast_from(x[base + i]);
        squares = fma(v, v, squares);
        i += CUBE_DIM as usize;
    }
    let total = cube_sum(f32::cast_from(squares.vector_sum()), planes);
    let rms = f32::sqrt(total * inv_hidden + eps);
    scale_row::<F, N>(x, weight, y, base, hidden_vecs, rms);
}

/// `sum = x + delta`, then `y = rms_norm(sum) · weight`, for `x, delta, sum, y: [rows, hidden]`:
/// the residual add and the next pre-norm in one launch. The norm reads the sum as stored (in
/// `F`), exactly as the separate add and norm do; each unit re-reads only what it wrote.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn add_rms_norm_rows<F: Float, N: Size>(
    x: &Array<Vector<F, N>>,
    delta: &Array<Vector<F, N>>,
    weight: &Array<Vector<F, N>>,
    sum: &mut Array<Vector<F, N>>,
    y: &mut Array<Vector<F, N>>,
    hidden_vecs: usize,
    inv_hidden: f32,
    eps: f32,
    #[comptime] planes: usize,
) {
    let base = CUBE_POS_X as usize * hidden_vecs;
    let mut squares = Vector::<f32, N>::new(0.0);
    let mut i = UNIT_POS as usize;
    while i < hidden_vecs {
        let s = Vector::<F, N>::cast_from(
            Vector::<f32, N>::cast_from(x[base + i]) + Vector::<f32, N>::cast_from(delta[base + i]),
        );
        sum[base + i] = s;
        let v = Vector::<f32, N>::cast_from(s);
        squares = fma(v, v, squares);
        i += CUBE_DIM as usize;
    }
    let total = cube_sum(f32::cast_from(squares.vector_sum()), planes);
    let rms = f32::sqrt(total * inv_hidden + eps);
    scale_row::<F, N>(sum, weight, y, base, hidden_vecs, rms);
}

/// The second pass of both norms: `y[row] = source[row] / rms · weight`, the cube's units
/// striding over the row that starts at `base`.
#[cube]
fn scale_row<F: Float, N: Size>(
    source: &Array<Vector<F, N>>,
    weight: &Array<Vector<F, N>>,
    y: &mut Array<Vector<F, N>>,
    base: usize,
    hidden_vecs: usize,
    rms: f32,
) {
    let mut j = UNIT_POS as usize;
    while j < hidden_vecs {
        let v = Vector::<f32, N>::cast_from(source[base + j]);
        let g = Vector::<f32, N>::cast_from(weight[j]);
        y[base + j] = Vector::<F, N>::cast_from(v / Vector::<f32, N>::new(rms) * g);
        j += CUBE_DIM as usize;
    }
}

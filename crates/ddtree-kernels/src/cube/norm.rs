//! RMSNorm, alone or after the residual add, one cube per row, f32 statistics. References:
//! [`crate::reference::rms_norm`], [`crate::reference::add_rms_norm`] (with the k-sliced
//! tensor-core linear's partial sums as the added rows: [`crate::KernelOps::linear_add_rms_norm`]).
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
    normalise_row::<F, N>(x, weight, y, base, hidden_vecs, squares, inv_hidden, eps, planes);
}

/// `sum = x + delta`, then `y = rms_norm(sum) · weight`, for `x, sum, y: [rows, hidden]`: the
/// residual add and the next pre-norm in one launch. `delta` is `[splits, rows · hidden]` of type
/// `D` (`len = rows · hidden / N`): with one split, the rows to add (`D = F`); with several, the
/// f32 partial sums of a k-sliced [`super::linear::linear_mma()`], summed in slice order and
/// rounded to `F` as [`super::linear::linear_split_sum()`] stores them — so the result is bit for
/// bit that of the split sum followed by the add and norm, one launch and one round trip fewer.
/// The norm reads the sum as stored (in `F`), exactly as the separate add and norm do; each unit
/// re-reads only what it wrote.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn add_rms_norm_rows<F: Float, D: Float, N: Size>(
    x: &Array<Vector<F, N>>,
    delta: &Array<Vector<D, N>>,
    weight: &Array<Vector<F, N>>,
    sum: &mut Array<Vector<F, N>>,
    y: &mut Array<Vector<F, N>>,
    hidden_vecs: usize,
    len: usize,
    inv_hidden: f32,
    eps: f32,
    #[comptime] splits: usize,
    #[comptime] planes: usize,
) {
    let base = CUBE_POS_X as usize * hidden_vecs;
    let mut squares = Vector::<f32, N>::new(0.0);
    let mut i = UNIT_POS as usize;
    while i < hidden_vecs {
        let mut d = Vector::<f32, N>::cast_from(delta[base + i]);
        if comptime!(splits > 1) {
            d = Vector::<f32, N>::new(0.0);
            #[unroll]
            for s in 0..splits {
                d += Vector::<f32, N>::cast_from(delta[s * len + base + i]);
            }
            d = Vector::<f32, N>::cast_from(Vector::<F, N>::cast_from(d));
        }
        let s = Vector::<F, N>::cast_from(Vector::<f32, N>::cast_from(x[base + i]) + d);
        sum[base + i] = s;
        let v = Vector::<f32, N>::cast_from(s);
        squares = fma(v, v, squares);
        i += CUBE_DIM as usize;
    }
    normalise_row::<F, N>(
        sum,
        weight,
        y,
        base,
        hidden_vecs,
        squares,
        inv_hidden,
        eps,
        planes,
    );
}

/// The second pass of the norms: the row's mean square from each unit's `squares`, then
/// `y[row] = source[row] / rms · weight`, the cube's units striding over the row that starts at
/// `base`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn normalise_row<F: Float, N: Size>(
    source: &Array<Vector<F, N>>,
    weight: &Array<Vector<F, N>>,
    y: &mut Array<Vector<F, N>>,
    base: usize,
    hidden_vecs: usize,
    squares: Vector<f32, N>,
    inv_hidden: f32,
    eps: f32,
    #[comptime] planes: usize,
) {
    let total = cube_sum(f32::cast_from(squares.vector_sum()), planes);
    let rms = f32::sqrt(total * inv_hidden + eps);
    let mut j = UNIT_POS as usize;
    while j < hidden_vecs {
        let v = Vector::<f32, N>::cast_from(source[base + j]);
        let g = Vector::<f32, N>::cast_from(weight[j]);
        y[base + j] = Vector::<F, N>::cast_from(v / Vector::<f32, N>::new(rms) * g);
        j += CUBE_DIM as usize;
    }
}

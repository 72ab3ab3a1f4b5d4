//! The SwiGLU activation `silu(gate) ⊙ up`. Reference: [`crate::reference::silu_mul`].

use cubecl::prelude::*;

/// Element-wise `gate / (1 + e^-gate) · up` in f32 over `[rows, cols]` (`cols_vecs = cols / N`)
/// vectors. `gate` and `up` are row views (row strides `gate_stride`, `up_stride`, in vectors):
/// the two halves of a fused gate/up projection are read in place.
#[cube(launch_unchecked)]
pub fn silu_mul<F: Float, N: Size>(
    gate: &Array<Vector<F, N>>,
    up: &Array<Vector<F, N>>,
    y: &mut Array<Vector<F, N>>,
    len: usize,
    cols_vecs: usize,
    gate_stride: usize,
    up_stride: usize,
) {
    let i = ABSOLUTE_POS;
    if i < len {
        let row = i / cols_vecs;
        let col = i % cols_vecs;
        let g = Vector::<f32, N>::cast_from(gate[row * gate_stride + col]);
        let u = Vector::<f32, N>::cast_from(up[row * up_stride + col]);
        let one = Vector::<f32, N>::new(1.0);
        // `0 − g`: CUDA has no unary minus on cubecl's float vectors.
        let zero = Vector::<f32, N>::new(0.0);
        y[i] = Vector::<F, N>::cast_from(g / (one + Vector::exp(zero - g)) * u);
    }
}

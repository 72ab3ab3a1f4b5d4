//! The gated activations: SwiGLU `silu(gate) ⊙ up` and the gated attention's output gate
//! `x ⊙ sigmoid(gate)`. References: [`crate::reference::silu_mul`],
//! [`crate::reference::sigmoid_mul`].

use cubecl::prelude::*;

/// Element-wise in f32 over `[rows, cols]` (`cols_vecs = cols / N`) vectors: `gate / (1 +
/// e^-gate) · up` (SwiGLU), or with `sigmoid`, `up / (1 + e^-gate)` (`up` the attention's output).
/// `gate` and `up` are row views (row strides `gate_stride`, `up_stride`, in vectors): the two
/// halves of a fused gate/up projection, or the gate columns of a QKV projection, are read in
/// place.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn silu_mul<F: Float, N: Size>(
    gate: &Array<Vector<F, N>>,
    up: &Array<Vector<F, N>>,
    y: &mut Array<Vector<F, N>>,
    len: usize,
    cols_vecs: usize,
    gate_stride: usize,
    up_stride: usize,
    #[comptime] sigmoid: bool,
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
        let denominator = one + Vector::exp(zero - g);
        if comptime!(sigmoid) {
            y[i] = Vector::<F, N>::cast_from(u / denominator);
        } else {
            y[i] = Vector::<F, N>::cast_from(g / denominator * u);
        }
    }
}

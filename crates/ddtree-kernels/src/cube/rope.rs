//! NeoX ("rotate half") rotary embedding. Reference: [`crate::reference::rope`].

use cubecl::prelude::*;

/// `x, y: [rows, heads, head_dim]`, `cos, sin: [rows, half]`; the first `2·half` dims of every
/// head rotate, the rest pass through. One unit per output element.
#[cube(launch_unchecked)]
pub fn rope_rows<F: Float>(
    x: &Array<F>,
    cos: &Array<F>,
    sin: &Array<F>,
    y: &mut Array<F>,
    len: usize,
    heads: usize,
    head_dim: usize,
    half: usize,
) {
    let i = ABSOLUTE_POS;
    if i < len {
        let d = i % head_dim;
        let row = i / (heads * head_dim);
        let head_base = i - d;
        if d < 2 * half {
            let f = d % half;
            let c = f32::cast_from(cos[row * half + f]);
            let s = f32::cast_from(sin[row * half + f]);
            let x1 = f32::cast_from(x[head_base + f]);
            let x2 = f32::cast_from(x[head_base + f + half]);
            let mut out = x2 * c + x1 * s;
            if d < half {
                out = x1 * c - x2 * s;
            }
            y[i] = F::cast_from(out);
        } else {
            y[i] = x[i];
        }
    }
}

//! Row-wise argmax of logits (the greedy posterior of every verified node).
//! Reference: [`crate::reference::argmax`].

use cubecl::prelude::*;

/// `out[row] = argmax(logits[row, ..])`, the first index on ties. One plane per row; each lane
/// scans a strided set of columns in increasing order (so keeps its first maximum), then the
/// plane takes the largest value and, among lanes holding it, the smallest index.
#[cube(launch_unchecked)]
pub fn argmax_rows<F: Float, I: Int>(logits: &Array<F>, out: &mut Array<I>, cols: usize, rows: usize) {
    let row = (CUBE_POS_X * CUBE_DIM_Y + UNIT_POS_Y) as usize;
    if row < rows {
        let lane = UNIT_POS_X as usize;
        let step = CUBE_DIM_X as usize;
        let base = row * cols;
        let mut best = f32::min_value();
        let mut best_at = u32::MAX.runtime();
        let mut c = lane;
        while c < cols {
            let v = f32::cast_from(logits[base + c]);
            if v > best || best_at == u32::MAX {
                best = v;
                best_at = u32::cast_from(c);
            }
            c += step;
        }
        let top = plane_max(best);
        let candidate = select(best == top, best_at, u32::MAX);
        let first = plane_min(candidate);
        if lane == 0 {
            out[row] = I::cast_from(first);
        }
    }
}

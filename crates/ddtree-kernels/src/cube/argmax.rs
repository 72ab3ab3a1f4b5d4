//! Row-wise argmax of logits (the greedy posterior of every verified node).
//! Reference: [`crate::reference::argmax`].

use cubecl::prelude::*;

/// `out[row] = argmax(logits[row, ..])`, the first index on ties, for `col_vecs` vectors of `N`
/// per row. One cube per row (a plane per row walked a 151936-wide row in ≈ 4700 dependent steps:
/// 1.8 ms on an H200): each unit scans a strided set of vectors in increasing order, four loads
/// in flight, keeping its first maximum; then the cube takes the largest value and, among the
/// units holding it, the smallest index. Launch with one cube per row and `CubeDim = (plane
/// size, planes)`.
#[cube(launch_unchecked)]
pub fn argmax_rows<F: Float, I: Int, N: Size>(
    logits: &Array<Vector<F, N>>,
    out: &mut Array<I>,
    col_vecs: usize,
    #[comptime] planes: usize,
) {
    let vec = N::value();
    let base = CUBE_POS_X as usize * col_vecs;
    let step = CUBE_DIM as usize;
    let mut best = f32::min_value();
    let mut best_at = u32::MAX.runtime();
    let mut c = UNIT_POS as usize;
    while c + 3usize * step < col_vecs {
        let mut group = Array::<Vector<F, N>>::new(4usize);
        #[unroll]
        for g in 0..4 {
            group[g] = logits[base + c + g * step];
        }
        #[unroll]
        for g in 0..4 {
            #[unroll]
            for e in 0..vec {
                let v = f32::cast_from(group[g][e]);
                if v > best || best_at == u32::MAX {
                    best = v;
                    best_at = u32::cast_from((c + g * step) * vec + e);
                }
            }
        }
        c += 4usize * step;
    }
    while c < col_vecs {
        let group = logits[base + c];
        #[unroll]
        for e in 0..vec {
            let v = f32::cast_from(group[e]);
            if v > best || best_at == u32::MAX {
                best = v;
                best_at = u32::cast_from(c * vec + e);
            }
        }
        c += step;
    }

    // Each plane's winner, then the cube's: the largest value, the smallest index among equals.
    let mut values = SharedMemory::<f32>::new(planes);
    let mut indices = SharedMemory::<u32>::new(planes);
    let top = plane_max(best);
    let first = plane_min(select(best == top, best_at, u32::MAX));
    if UNIT_POS_X == 0 {
        values[UNIT_POS_Y as usize] = top;
        indices[UNIT_POS_Y as usize] = first;
    }
    sync_cube();
    if UNIT_POS == 0 {
        let mut value = values[0];
        let mut index = indices[0];
        #[unroll]
        for p in 1..planes {
            if values[p] > value || (values[p] == value && indices[p] < index) {
                value = values[p];
                index = indices[p];
            }
        }
        out[CUBE_POS_X as usize] = I::cast_from(index);
    }
}

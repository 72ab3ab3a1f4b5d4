//! Reductions across a cube, for kernels whose cube works on one row: each plane reduces with
//! the plane operations, then every unit combines the planes' results from shared memory.

use cubecl::prelude::*;

/// The sum of `value` over the cube's `planes` planes, returned to every unit.
#[cube]
pub fn cube_sum(value: f32, #[comptime] planes: usize) -> f32 {
    let mut partial = SharedMemory::<f32>::new(planes);
    let in_plane = plane_sum(value);
    if UNIT_POS_X == 0 {
        partial[UNIT_POS_Y as usize] = in_plane;
    }
    sync_cube();
    let mut total = 0.0f32;
    #[unroll]
    for p in 0..planes {
        total += partial[p];
    }
    total
}

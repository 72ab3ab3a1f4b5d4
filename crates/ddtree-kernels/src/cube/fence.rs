//! Ordering across the cubes of one launch, so that the last cube to finish can finish the work
//! of all (an AR step's attention merges its key splits in the cube that finishes last instead
//! of a launch of its own).
//!
//! The pattern is CUDA's "last block" reduction: every cube stores its results, fences, and
//! counts itself on a device counter; the cube that counts last fences again and reads what the
//! others stored. cubecl 0.10 has the atomics but no fence operation: its C++ back end knows
//! `__threadfence()` but no IR operation emits it. [`device_fence()`] writes it through a
//! comment, which the C++ back end prints verbatim (as a block comment when it spans lines), so
//! only CUDA may compile a kernel that fences; `fence = false` builds the same kernel without
//! it for the wgpu runtime's tests (lavapipe's threads run a cube's stores before its count
//! reaches other threads, but nothing on a real GPU promises that).

use cubecl::prelude::*;

/// `__threadfence()`: this unit's earlier stores reach the whole device before its later ones
/// (a `fence.sc.gpu`). CUDA only: the comment closes itself around the call.
#[cube]
pub fn device_fence() {
    comment!("device-scope fence\n*/ __threadfence(); /*");
}

/// Whether this cube is the last of the `cubes` that count on `counter[slot]` to arrive, for
/// every unit of the cube. With `fence`, every store the cubes made before arriving is visible
/// to the last cube after it returns (a fence before the count, one after). The last cube resets
/// the counter to zero for the next launch. Call it at the same point in every unit (it
/// synchronises the cube); `counter[slot]` must be zero when the launch starts.
#[cube]
#[allow(clippy::collapsible_if)] // a comptime test beside a run-time one: cubecl expands `&&` eagerly
pub fn last_cube(counter: &Array<Atomic<u32>>, slot: usize, cubes: usize, #[comptime] fence: bool) -> bool {
    let mut verdict = SharedMemory::<u32>::new(1usize);
    // Every unit fences its own stores (CUDA's "last block" pattern): the count follows them all.
    if comptime!(fence) {
        device_fence();
    }
    sync_cube();
    if UNIT_POS == 0 {
        let last = counter[slot].fetch_add(1u32) as usize + 1 == cubes;
        if last {
            counter[slot].store(0u32);
        }
        verdict[0] = select(last, 1u32, 0u32);
    }
    sync_cube();
    let last = verdict[0] == 1u32;
    if comptime!(fence) {
        if last {
            device_fence();
        }
    }
    last
}

#[cfg(all(test, feature = "wgpu"))]
mod tests {
    use super::*;
    use cubecl::wgpu::WgpuRuntime;

    /// Every cube stores `base` plus its number, and the last one to count sums what all stored
    /// into `sums[launch]`.
    #[cube(launch_unchecked)]
    #[allow(clippy::collapsible_if)] // `last_cube` must run in every unit
    fn sum_in_last_cube(
        stored: &mut Array<u32>,
        counter: &Array<Atomic<u32>>,
        sums: &mut Array<u32>,
        base: u32,
        launch: usize,
    ) {
        if UNIT_POS == 0 {
            stored[CUBE_POS] = base + CUBE_POS as u32;
        }
        if last_cube(counter, 1usize, CUBE_COUNT, false) {
            if UNIT_POS == 0 {
                let mut sum = 0u32;
                for i in 0..CUBE_COUNT {
                    sum += stored[i];
                }
                sums[launch] = sum;
            }
        }
    }

    /// Launches in a row on one counter slot: each one's last cube sees every cube's store, and
    /// leaves the counters at zero for the next (a counter left unreset makes no cube the last).
    #[test]
    fn the_last_cube_sees_every_cube_and_resets_its_counter() {
        let client = WgpuRuntime::client(&Default::default());
        let (cubes, launches) = (37u32, 3usize);
        let bytes = |words: &[u32]| client.create_from_slice(<u32 as CubeElement>::as_bytes(words));
        let stored = bytes(&vec![0; cubes as usize]);
        let counter = bytes(&[0; 4]);
        let sums = bytes(&vec![0; launches]);
        for launch in 0..launches {
            // SAFETY: `stored` holds a word per cube, `counter` 4 slots, `sums` one per launch.
            unsafe {
                sum_in_last_cube::launch_unchecked::<WgpuRuntime>(
                    &client,
                    CubeCount::Static(cubes, 1, 1),
                    CubeDim::new_1d(64),
                    ArrayArg::from_raw_parts(stored.clone(), cubes as usize),
                    ArrayArg::from_raw_parts(counter.clone(), 4),
                    ArrayArg::from_raw_parts(sums.clone(), launches),
                    1000 * launch as u32,
                    launch,
                );
            }
        }
        let words = |handle| u32::from_bytes(&client.read_one(handle).unwrap()).to_vec();
        let want: Vec<u32> = (0..launches as u32)
            .map(|launch| (0..cubes).map(|c| 1000 * launch + c).sum())
            .collect();
        assert_eq!(words(sums), want);
        assert_eq!(words(counter), [0; 4]);
    }
}

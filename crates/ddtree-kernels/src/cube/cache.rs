//! Writing new key/value rows into a preallocated KV cache, and compacting kept rows, in place.
//! References: [`crate::reference::write_cache_rows`], [`crate::reference::compact_kv_rows`].

use cubecl::prelude::*;

/// `cache[h, at + i, d] = rows[i, h, d]` for `rows: [n, kv_heads, head_dim]` (dense) and a cache
/// whose head and row strides are `head_stride`, `row_stride` elements (rows may be pitched).
/// One unit per element of `rows`.
#[cube(launch_unchecked)]
pub fn write_rows<F: Float>(
    rows: &Array<F>,
    cache: &mut Array<F>,
    len: usize,
    kv_heads: usize,
    head_dim: usize,
    head_stride: usize,
    row_stride: usize,
    at: usize,
) {
    let i = ABSOLUTE_POS;
    if i < len {
        let d = i % head_dim;
        let h = (i / head_dim) % kv_heads;
        let r = i / (head_dim * kv_heads);
        cache[h * head_stride + (at + r) * row_stride + d] = rows[i];
    }
}

/// Rows a unit of [`compact_rows()`] moves per load-then-store round.
pub const COMPACT_CHUNK: usize = 8;

/// `cache[h, at + i, d] = cache[h, at + keep[i], d]` for `i < n` in the key and value caches of
/// `layers` layers (one layout), in place, with `keep` increasing (so `keep[i] ≥ i`): one launch
/// per commit for all the layers (a launch per layer was paced by the host). Reference:
/// [`crate::reference::compact_kv_rows`].
///
/// Cube row `y` takes layer `y`; one unit per (head, column) walks the rows in order, a chunk of
/// [`COMPACT_CHUNK`] at a time in both caches: every load of a chunk before its stores. That
/// order is safe in place: a chunk's sources are at or after its first target, so no earlier
/// chunk wrote them, and no later chunk reads a row this one writes (its sources lie past this
/// chunk's targets).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn compact_rows<F: Float>(
    keys: &mut Sequence<Array<F>>,
    values: &mut Sequence<Array<F>>,
    keep: &Array<u32>,
    n: usize,
    kv_heads: usize,
    head_dim: usize,
    head_stride: usize,
    row_stride: usize,
    at: usize,
    #[comptime] layers: usize,
) {
    let unit = ABSOLUTE_POS_X as usize;
    let layer = CUBE_POS_Y as usize;
    if unit < kv_heads * head_dim {
        let column = (unit / head_dim) * head_stride + unit % head_dim;
        // A sequence's arrays are indexed at compile time: each layer's cubes take their branch.
        #[unroll]
        for l in 0..layers {
            if layer == l {
                compact_column::<F>(
                    keys.index_mut(l),
                    values.index_mut(l),
                    keep,
                    n,
                    column,
                    row_stride,
                    at,
                );
            }
        }
    }
}

/// One column of [`compact_rows()`] in one layer's caches.
#[cube]
fn compact_column<F: Float>(
    keys: &mut Array<F>,
    values: &mut Array<F>,
    keep: &Array<u32>,
    n: usize,
    column: usize,
    row_stride: usize,
    at: usize,
) {
    let mut moved_keys = Array::<F>::new(COMPACT_CHUNK);
    let mut moved_values = Array::<F>::new(COMPACT_CHUNK);
    let mut first = 0;
    while first < n {
        let mut count = n - first;
        if count > COMPACT_CHUNK {
            count = COMPACT_CHUNK;
        }
        for i in 0..count {
            let from = column + (at + keep[first + i] as usize) * row_stride;
            moved_keys[i] = keys[from];
            moved_values[i] = values[from];
        }
        for i in 0..count {
            let to = column + (at + first + i) * row_stride;
            keys[to] = moved_keys[i];
            values[to] = moved_values[i];
        }
        first += COMPACT_CHUNK;
    }
}

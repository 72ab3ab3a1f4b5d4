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

/// `cache[h, at + i, d] = cache[h, at + keep[i], d]` for `i < n` in a layer's `keys` and
/// `values` caches (one layout), in place, with `keep` increasing (so `keep[i] ≥ i`): one launch
/// per layer's commit. Reference: [`crate::reference::compact_kv_rows`].
///
/// One unit per (head, column) walks the rows in order, a chunk of [`COMPACT_CHUNK`] at a time
/// in both caches: every load of a chunk before its stores. That order is safe in place: a
/// chunk's sources are at or after its first target, so no earlier chunk wrote them, and no
/// later chunk reads a row this one writes (its sources lie past this chunk's targets).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn compact_rows<F: Float>(
    keys: &mut Array<F>,
    values: &mut Array<F>,
    keep: &Array<u32>,
    n: usize,
    kv_heads: usize,
    head_dim: usize,
    head_stride: usize,
    row_stride: usize,
    at: usize,
) {
    let unit = ABSOLUTE_POS;
    if unit < kv_heads * head_dim {
        let column = (unit / head_dim) * head_stride + unit % head_dim;
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
}

//! Writing new key/value rows into a preallocated KV cache, in place.
//! Reference: [`crate::reference::write_cache_rows`].

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

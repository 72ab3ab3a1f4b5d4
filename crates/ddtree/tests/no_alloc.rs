//! Building, walking and recording a round allocate nothing once the buffers have grown.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use ddtree::{AcceptanceStats, DraftTopK, DraftTree, TreeBuilder, Walk};

/// Counts the allocations of the current thread, so the test harness's threads do not interfere.
struct CountingAllocator;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|count| count.set(count.get() + 1));
        unsafe { System.alloc(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|count| count.set(count.get() + 1));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

/// A drafter-like table: 15 depths, `k` distinct tokens per depth, log-probs descending.
fn table(k: usize, seed: u32) -> (Vec<u32>, Vec<f32>) {
    let tokens = (0..15 * k as u32).collect();
    let log_probs = (0..15 * k)
        .map(|i| {
            let jitter = ((i as u32).wrapping_mul(2_654_435_761) ^ seed) % 97;
            -((i % k) as f32) * 0.37 - jitter as f32 * 1e-3
        })
        .collect();
    (tokens, log_probs)
}

#[test]
fn a_round_allocates_nothing_after_the_first() {
    let budget = 256;
    let mut builder = TreeBuilder::with_capacity(budget);
    let mut tree = DraftTree::with_capacity(budget);
    let mut walk = Walk::new();
    let mut stats = AcceptanceStats::new();
    let tables: Vec<_> = (0..4).map(|seed| table(budget, seed)).collect();
    let mut posterior = Vec::with_capacity(budget + 1);

    let mut round =
        |builder: &mut TreeBuilder, tree: &mut DraftTree, (tokens, log_probs): &(Vec<u32>, Vec<f32>)| {
            let draft = DraftTopK::new(15, budget, tokens, log_probs).unwrap();
            builder.build(3, &draft, budget, tree).unwrap();
            // The target agrees with the first child everywhere: the walk goes to a leaf.
            posterior.clear();
            posterior.extend((0..tree.num_nodes()).map(|node| {
                tree.children(node)
                    .first()
                    .map_or(0, |&child| tree.tokens()[child as usize])
            }));
            tree.walk_into(&posterior, &mut walk).unwrap();
            stats.record_walk(&walk);
            walk.acceptance_length()
        };

    let tau = round(&mut builder, &mut tree, &tables[0]);
    assert!(tau > 1);
    let before = allocations();
    for table in &tables[1..] {
        round(&mut builder, &mut tree, table);
    }
    assert_eq!(allocations() - before, 0);
    assert_eq!(tree.num_draft_nodes(), budget);
}

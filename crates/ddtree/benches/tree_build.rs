//! Tree building time per round: 15 depths, K = B, random sorted log-probs.
//!
//! `cargo bench -p ddtree --bench tree_build -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use ddtree::{DraftTopK, DraftTree, TreeBuilder};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const DEPTHS: usize = 15;
const VOCAB: u32 = 151_936;
const BUDGETS: [usize; 7] = [16, 32, 64, 128, 256, 512, 1024];

/// A drafter-like top-K table: per depth, K distinct tokens and log-probs sorted descending.
fn random_table(k: usize, rng: &mut StdRng) -> (Vec<u32>, Vec<f32>) {
    let mut tokens = Vec::with_capacity(DEPTHS * k);
    let mut log_probs = Vec::with_capacity(DEPTHS * k);
    for _ in 0..DEPTHS {
        let offset = rng.random_range(0..VOCAB);
        tokens.extend((0..k as u32).map(|rank| (offset + rank * 7) % VOCAB));
        let mut row: Vec<f32> = (0..k).map(|_| -rng.random_range(0.0f32..12.0)).collect();
        row.sort_by(|a, b| b.total_cmp(a));
        log_probs.extend(row);
    }
    (tokens, log_probs)
}

fn tree_build(c: &mut Criterion) {
    let mut group = c.benchmark_group("tree_build");
    let mut rng = StdRng::seed_from_u64(7);
    for budget in BUDGETS {
        let k = budget;
        let (tokens, log_probs) = random_table(k, &mut rng);
        let draft = DraftTopK::new(DEPTHS, k, &tokens, &log_probs).unwrap();
        let mut builder = TreeBuilder::with_capacity(budget);
        let mut tree = DraftTree::with_capacity(budget);
        group.bench_with_input(BenchmarkId::from_parameter(budget), &budget, |b, &budget| {
            b.iter(|| {
                builder
                    .build(black_box(1), black_box(&draft), budget, &mut tree)
                    .unwrap();
                black_box(tree.num_nodes())
            });
        });
    }
    group.finish();
}

criterion_group!(benches, tree_build);
criterion_main!(benches);

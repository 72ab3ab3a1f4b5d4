//! CPU benchmarks of the Qwen3 fixture target: loading the checkpoint, one decode step and one
//! tree verify of B = 16 nodes (17 rows) after a 64-token prefix.
//!
//! `cargo bench --bench qwen3_cpu`

use std::path::{Path, PathBuf};

use burn_ndarray::NdArray;
use criterion::{Criterion, criterion_group, criterion_main};
use ddtree_kernels::AncestorBits;
use ddtree_qwen::{LoadOptions, Qwen3, TreeBlock};
use ddtree_weights::Checkpoint;

type B = NdArray<f32>;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/qwen3-tiny-untied")
}

fn options() -> LoadOptions {
    LoadOptions {
        max_context: Some(256),
        capture_layers: vec![0, 1],
    }
}

fn bench(c: &mut Criterion) {
    let device = Default::default();
    c.bench_function("load qwen3-tiny-untied (sharded)", |b| {
        b.iter(|| Qwen3::<B>::load_dir(fixture(), options(), &device).unwrap())
    });
    c.bench_function("open checkpoint index", |b| {
        b.iter(|| Checkpoint::open(fixture()).unwrap())
    });

    let mut model = Qwen3::<B>::load_dir(fixture(), options(), &device).unwrap();
    let prefix: Vec<u32> = (0..64).map(|i| (i * 7 % 1000) as u32).collect();
    model.prefill(&prefix).unwrap();
    c.bench_function("decode step after 64 tokens", |b| {
        b.iter(|| {
            model.truncate(prefix.len());
            model.decode(42).unwrap()
        })
    });

    // A binary-ish tree of 17 rows: node i's parent is (i - 1) / 2.
    let n = 17;
    let parents: Vec<usize> = (0..n).map(|i| if i == 0 { 0 } else { (i - 1) / 2 }).collect();
    let mut depths = vec![0u32; n];
    let mut words = vec![0u64; n];
    for i in 0..n {
        if i > 0 {
            depths[i] = depths[parents[i]] + 1;
            words[i] = words[parents[i]];
        }
        words[i] |= 1 << i;
    }
    let tokens: Vec<u32> = (0..n as u32).map(|i| 100 + i).collect();
    let tree = TreeBlock {
        tokens: &tokens,
        depths: &depths,
        ancestors: AncestorBits::new(&words, 1).unwrap(),
    };
    c.bench_function("tree verify B=16 after 64 tokens", |b| {
        b.iter(|| {
            model.truncate(prefix.len());
            model.verify(&tree).unwrap()
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);

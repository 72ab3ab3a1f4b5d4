//! One full DDTree round on the CPU (fixture pair: draft → build → verify → walk → commit), and
//! the same generation in the three modes.
//!
//! `cargo bench --bench round_cpu`

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use burn_ndarray::NdArray;
use criterion::{Criterion, criterion_group, criterion_main};
use ddtree_dflash::{DFlash, TargetHead};
use ddtree_engine::{Engine, GenerateParams, Mode};
use ddtree_qwen::{LoadOptions, Qwen3};

type B = NdArray<f32>;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(name)
}

fn engine() -> Engine<Qwen3<B>, DFlash<B>> {
    let device = Default::default();
    let options = LoadOptions {
        max_context: Some(512),
        capture_layers: vec![0, 1],
    };
    let target = Qwen3::<B>::load_dir(fixture("qwen3-tiny-tied"), options, &device).unwrap();
    let head = TargetHead {
        embed_tokens: target.embed_tokens_weight(),
        lm_head: target.lm_head_weight(),
    };
    let drafter = DFlash::load_dir(fixture("dflash-tiny"), head, target.max_context(), &device).unwrap();
    Engine::new(target, drafter)
}

fn bench(c: &mut Criterion) {
    let mut engine = engine();
    let prompt: Vec<u32> = (0..64).map(|i| (i * 13 % 1000) as u32).collect();
    // max_new_tokens 2: the prefill's token, then exactly one round.
    for (name, mode) in [
        ("AR", Mode::Autoregressive),
        ("chain", Mode::Chain),
        ("tree B=16", Mode::Tree { budget: 16 }),
        ("tree B=64", Mode::Tree { budget: 64 }),
    ] {
        let params = GenerateParams {
            max_new_tokens: 2,
            mode,
            ..Default::default()
        };
        c.bench_function(&format!("prefill 64 + one round, {name}"), |b| {
            b.iter(|| {
                engine
                    .generate(&prompt, &params, |_| ControlFlow::Continue(()))
                    .unwrap()
            })
        });
    }
    let prefill_only = GenerateParams {
        max_new_tokens: 1,
        ..Default::default()
    };
    c.bench_function("prefill 64 only", |b| {
        b.iter(|| {
            engine
                .generate(&prompt, &prefill_only, |_| ControlFlow::Continue(()))
                .unwrap()
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);

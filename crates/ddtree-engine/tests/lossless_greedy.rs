//! Greedy DDTree output equals greedy autoregressive output, token for token, in f64 on the CPU:
//! 50 random prompts × every mode (AR, budget 0, DFlash chain, budgets 1, 4, 16, 64, 256) × a
//! random drafter (acceptance near 1) and an oracle drafter that copies the target's choices
//! (long acceptances, cache rows moved at every commit).

mod common;

use std::ops::ControlFlow;

use burn_ndarray::NdArray;
use common::{OracleDrafter, RandomDrafter, fixture};
use ddtree_engine::{Drafter, Engine, GenerateParams, Mode};
use ddtree_qwen::{LoadOptions, Qwen3};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

type B = NdArray<f64>;
const MAX_NEW: usize = 20;
const BLOCK: usize = 16;

fn target() -> Qwen3<B> {
    let options = LoadOptions {
        max_context: Some(384),
        capture_layers: vec![],
    };
    Qwen3::load_dir(fixture("qwen3-tiny-tied"), options, &Default::default()).unwrap()
}

fn run<D: Drafter<Option<burn_tensor::Tensor<B, 2>>>>(
    engine: &mut Engine<Qwen3<B>, D>,
    prompt: &[u32],
    mode: Mode,
) -> (Vec<u32>, f64) {
    let params = GenerateParams {
        max_new_tokens: MAX_NEW,
        mode,
        ..Default::default()
    };
    let g = engine
        .generate(prompt, &params, |_| ControlFlow::Continue(()))
        .unwrap();
    assert_eq!(g.tokens.len(), MAX_NEW, "no stop tokens: exactly max_new_tokens");
    (g.tokens, g.metrics.mean_acceptance_length)
}

#[test]
fn every_mode_and_drafter_reproduces_autoregressive_greedy_output() {
    let modes = [
        Mode::Tree { budget: 0 },
        Mode::Chain,
        Mode::Tree { budget: 1 },
        Mode::Tree { budget: 4 },
        Mode::Tree { budget: 16 },
        Mode::Tree { budget: 64 },
        Mode::Tree { budget: 256 },
    ];
    let mut rng = StdRng::seed_from_u64(2026);
    let vocab = 1024;
    let mut ar = Engine::new(target(), RandomDrafter::new(vocab, BLOCK, 0));
    let mut random = Engine::new(target(), RandomDrafter::new(vocab, BLOCK, 1));
    let mut longest_oracle_acceptance = 0f64;
    for case in 0..50 {
        let len = rng.random_range(1..24);
        let prompt: Vec<u32> = (0..len).map(|_| rng.random_range(0..vocab as u32)).collect();
        let (expected, tau) = run(&mut ar, &prompt, Mode::Autoregressive);
        assert_eq!(tau, 1.0, "autoregressive rounds commit one token each");

        let sequence: Vec<u32> = prompt.iter().chain(&expected).copied().collect();
        let hit_rate = [0.5, 0.8, 0.95][case % 3];
        let mut oracle = Engine::new(
            target(),
            OracleDrafter::new(sequence, hit_rate, vocab, BLOCK, case as u64),
        );
        for mode in modes {
            let (got, _) = run(&mut random, &prompt, mode);
            assert_eq!(got, expected, "case {case}, random drafter, {mode:?}");
            let (got, tau) = run(&mut oracle, &prompt, mode);
            assert_eq!(
                got, expected,
                "case {case}, oracle drafter (hit rate {hit_rate}), {mode:?}"
            );
            longest_oracle_acceptance = longest_oracle_acceptance.max(tau);
        }
    }
    // The oracle really exercised long acceptances (multi-row commits).
    assert!(
        longest_oracle_acceptance > 4.0,
        "oracle mean acceptance only {longest_oracle_acceptance}"
    );
}

//! Greedy DDTree output equals greedy autoregressive output on the hybrid, token for token, in f64
//! on the CPU, through the engine with the fixture drafter: random prompts and prompts the drafter
//! was trained on (long acceptances, so commits replay deep paths), budgets 0, 4, 16, 64 and the
//! DFlash chain.

mod common;

use std::ops::ControlFlow;

use burn_ndarray::NdArray;
use common::{Expected, fixture_dir};
use ddtree_dflash::{DFlash, TargetHead};
use ddtree_engine::{Engine, GenerateParams, Mode};
use ddtree_qwen::{LoadOptions, Qwen35};
use ddtree_weights::DFlashConfig;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

type B = NdArray<f64>;
const MAX_NEW: usize = 24;

fn engine() -> Engine<Qwen35<B>, DFlash<B>> {
    let device = Default::default();
    let drafter_dir = fixture_dir("dflash-qwen35-tiny");
    let layers = DFlashConfig::from_file(drafter_dir.join("config.json"))
        .unwrap()
        .target_layer_ids;
    let options = LoadOptions {
        max_context: Some(256),
        capture_layers: layers,
    };
    let target = Qwen35::load_dir(fixture_dir("qwen35-tiny"), options, &device).unwrap();
    let head = TargetHead {
        embed_tokens: target.embed_tokens_weight(),
        lm_head: target.lm_head_weight(),
    };
    let drafter = DFlash::load_dir(drafter_dir, head, target.max_context(), &device).unwrap();
    Engine::new(target, drafter)
}

#[test]
fn every_budget_reproduces_autoregressive_greedy_output() {
    let expected = Expected::load("qwen35-tiny");
    let mut rng = StdRng::seed_from_u64(3535);
    let mut prompts: Vec<Vec<u32>> = (0..3)
        .map(|i| expected.tokens(&format!("prompt{i}.input_ids")))
        .collect();
    prompts.push(expected.tokens("chat.prompt_ids"));
    for _ in 0..4 {
        let len = rng.random_range(1..40);
        prompts.push((0..len).map(|_| rng.random_range(0..1018)).collect());
    }
    let modes = [
        Mode::Tree { budget: 0 },
        Mode::Chain,
        Mode::Tree { budget: 4 },
        Mode::Tree { budget: 16 },
        Mode::Tree { budget: 64 },
    ];
    let mut engine = engine();
    let run = |engine: &mut Engine<Qwen35<B>, DFlash<B>>, prompt: &[u32], mode: Mode| {
        let params = GenerateParams {
            max_new_tokens: MAX_NEW,
            mode,
            ..Default::default()
        };
        engine
            .generate(prompt, &params, |_| ControlFlow::Continue(()))
            .unwrap()
    };
    let mut acceptance = vec![Vec::new(); modes.len()];
    for (p, prompt) in prompts.iter().enumerate() {
        let ar = run(&mut engine, prompt, Mode::Autoregressive).tokens;
        assert_eq!(ar.len(), MAX_NEW);
        for (m, &mode) in modes.iter().enumerate() {
            let g = run(&mut engine, prompt, mode);
            assert_eq!(g.tokens, ar, "prompt {p}, {mode:?}");
            acceptance[m].push(g.metrics.mean_acceptance_length);
        }
    }
    for (mode, taus) in modes.iter().zip(&acceptance) {
        let rounded: Vec<String> = taus.iter().map(|t| format!("{t:.2}")).collect();
        println!("{mode:?}: mean acceptance per prompt {}", rounded.join(" "));
    }
    // The drafter was trained on the fixture prompts' continuations: deep paths get accepted.
    assert!(acceptance[4][..4].iter().all(|&t| t > 1.5), "{:?}", acceptance[4]);
}

//! Sampled speculative decoding is lossless in distribution: at temperature 1 on a tiny
//! vocabulary, the joint distribution of the first two generated tokens under DDTree (and
//! DFlash chain) matches the target's own, by a chi-square test at significance 0.001 with fixed
//! seeds.
//!
//! The target is a real-format Qwen3 checkpoint with a vocabulary of 8, written by the test.

mod common;

use std::ops::ControlFlow;
use std::path::PathBuf;

use burn_ndarray::NdArray;
use common::RandomDrafter;
use ddtree_engine::{Engine, GenerateParams, Mode, SamplingParams};
use ddtree_kernels::host_f32;
use ddtree_qwen::{LoadOptions, Qwen3};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use safetensors::{Dtype, tensor::TensorView};

type B = NdArray<f32>;
const VOCAB: usize = 8;
const HIDDEN: usize = 16;

/// Writes a one-layer Qwen3 with random weights (config.json + model.safetensors).
fn write_tiny_model() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ddtree-sampling-model-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = serde_json::json!({
        "model_type": "qwen3", "vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": 32,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
        "rms_norm_eps": 1e-6, "max_position_embeddings": 64, "tie_word_embeddings": true,
        "hidden_act": "silu", "rope_theta": 10000.0
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let mut rng = StdRng::seed_from_u64(42);
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut add = |name: &str, shape: Vec<usize>, scale: f32, offset: f32| {
        let n: usize = shape.iter().product();
        let bytes = (0..n)
            .flat_map(|_| (offset + scale * rng.random_range(-1.0f32..1.0)).to_le_bytes())
            .collect();
        tensors.push((name.to_string(), shape, bytes));
    };
    add("model.embed_tokens.weight", vec![VOCAB, HIDDEN], 1.0, 0.0);
    add("model.norm.weight", vec![HIDDEN], 0.1, 1.0);
    let p = "model.layers.0";
    add(&format!("{p}.input_layernorm.weight"), vec![HIDDEN], 0.1, 1.0);
    add(
        &format!("{p}.post_attention_layernorm.weight"),
        vec![HIDDEN],
        0.1,
        1.0,
    );
    add(
        &format!("{p}.self_attn.q_proj.weight"),
        vec![16, HIDDEN],
        0.5,
        0.0,
    );
    add(&format!("{p}.self_attn.k_proj.weight"), vec![8, HIDDEN], 0.5, 0.0);
    add(&format!("{p}.self_attn.v_proj.weight"), vec![8, HIDDEN], 0.5, 0.0);
    add(
        &format!("{p}.self_attn.o_proj.weight"),
        vec![HIDDEN, 16],
        0.5,
        0.0,
    );
    add(&format!("{p}.self_attn.q_norm.weight"), vec![8], 0.1, 1.0);
    add(&format!("{p}.self_attn.k_norm.weight"), vec![8], 0.1, 1.0);
    add(&format!("{p}.mlp.gate_proj.weight"), vec![32, HIDDEN], 0.5, 0.0);
    add(&format!("{p}.mlp.up_proj.weight"), vec![32, HIDDEN], 0.5, 0.0);
    add(&format!("{p}.mlp.down_proj.weight"), vec![HIDDEN, 32], 0.5, 0.0);
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(name, shape, bytes)| {
            (
                name.clone(),
                TensorView::new(Dtype::F32, shape.clone(), bytes).unwrap(),
            )
        })
        .collect();
    std::fs::write(
        dir.join("model.safetensors"),
        safetensors::serialize(views, None).unwrap(),
    )
    .unwrap();
    dir
}

fn softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let e: Vec<f64> = logits.iter().map(|&l| (l as f64 - max).exp()).collect();
    let total: f64 = e.iter().sum();
    e.into_iter().map(|v| v / total).collect()
}

/// The upper 0.001 quantile of chi-square with `df` degrees of freedom (Wilson–Hilferty).
fn chi_square_critical_0_001(df: usize) -> f64 {
    let z = 3.090_232; // standard normal 0.999 quantile
    let k = df as f64;
    k * (1.0 - 2.0 / (9.0 * k) + z * (2.0 / (9.0 * k)).sqrt()).powi(3)
}

#[test]
fn first_two_tokens_follow_the_target_distribution() {
    let dir = write_tiny_model();
    let load = || {
        let options = LoadOptions {
            max_context: Some(64),
            capture_layers: vec![],
        };
        Qwen3::<B>::load_dir(&dir, options, &Default::default()).unwrap()
    };
    let prompt = [1u32, 5, 2];

    // The target's exact joint distribution p(t1) · p(t2 | t1).
    let mut model = load();
    let p1 = softmax(&host_f32(model.prefill(&prompt).unwrap().logits).split_off((prompt.len() - 1) * VOCAB));
    let mut joint = vec![0.0; VOCAB * VOCAB];
    for t1 in 0..VOCAB {
        model.truncate(prompt.len());
        let p2 = softmax(&host_f32(model.decode(t1 as u32).unwrap().logits));
        for t2 in 0..VOCAB {
            joint[t1 * VOCAB + t2] = p1[t1] * p2[t2];
        }
    }

    let samples = 3000;
    for mode in [Mode::Tree { budget: 6 }, Mode::Chain] {
        let mut engine = Engine::new(load(), RandomDrafter::new(VOCAB, 4, 9));
        let mut counts = vec![0usize; VOCAB * VOCAB];
        let mut accepted_drafts = 0;
        for seed in 0..samples {
            let params = GenerateParams {
                max_new_tokens: 2,
                mode,
                sampling: SamplingParams {
                    temperature: 1.0,
                    seed,
                    ..Default::default()
                },
                ..Default::default()
            };
            let g = engine
                .generate(&prompt, &params, |_| ControlFlow::Continue(()))
                .unwrap();
            counts[g.tokens[0] as usize * VOCAB + g.tokens[1] as usize] += 1;
            accepted_drafts += g.metrics.accepted_draft_tokens;
        }
        // The second token must often come from an accepted draft, or the test would only see
        // plain sampling.
        assert!(
            accepted_drafts > samples as usize / 10,
            "{mode:?}: only {accepted_drafts} drafts accepted"
        );

        // Cells with an expected count below 5 are pooled into one.
        let (mut stat, mut cells) = (0.0, 0);
        let (mut pooled_expected, mut pooled_observed) = (0.0, 0.0);
        for (p, &c) in joint.iter().zip(&counts) {
            let expected = p * samples as f64;
            if expected < 5.0 {
                pooled_expected += expected;
                pooled_observed += c as f64;
            } else {
                stat += (c as f64 - expected).powi(2) / expected;
                cells += 1;
            }
        }
        if pooled_expected > 0.0 {
            stat += (pooled_observed - pooled_expected).powi(2) / pooled_expected;
            cells += 1;
        }
        let critical = chi_square_critical_0_001(cells - 1);
        assert!(
            stat < critical,
            "{mode:?}: chi-square {stat:.1} ≥ {critical:.1} ({cells} cells)"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

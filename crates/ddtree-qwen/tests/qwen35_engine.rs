//! The hybrid through the speculative engine with its fixture drafter (`fixtures/dflash-qwen35-tiny`,
//! f32): the drafter reads the hybrid's features, and the smoke scenario — a chat request rendered
//! with the fixture tokenizer's chat template — gives the same text under DDTree as under
//! autoregressive decoding and as transformers' `generate`.

mod common;

use std::ops::ControlFlow;

use burn_ndarray::NdArray;
use common::{Expected, fixture_dir, relative_error, to_f32};
use ddtree_dflash::{DFlash, TargetHead};
use ddtree_engine::{Engine, FinishReason, GenerateParams, Mode};
use ddtree_qwen::{LoadOptions, Qwen35};
use ddtree_weights::{DFlashConfig, GenerationConfig, TokenizerFiles};

type B = NdArray<f32>;
const TARGET: &str = "qwen35-tiny";
const DRAFTER: &str = "dflash-qwen35-tiny";

fn pair() -> (Qwen35<B>, DFlash<B>) {
    let device = Default::default();
    let layers = DFlashConfig::from_file(fixture_dir(DRAFTER).join("config.json"))
        .unwrap()
        .target_layer_ids;
    let options = LoadOptions {
        max_context: Some(256),
        capture_layers: layers,
    };
    let target = Qwen35::load_dir(fixture_dir(TARGET), options, &device).unwrap();
    let head = TargetHead {
        embed_tokens: target.embed_tokens_weight(),
        lm_head: target.lm_head_weight(),
    };
    let drafter = DFlash::load_dir(fixture_dir(DRAFTER), head, target.max_context(), &device).unwrap();
    (target, drafter)
}

#[test]
fn the_drafter_reads_the_hybrids_features() {
    let expected = Expected::load(DRAFTER);
    let (mut target, mut drafter) = pair();
    let prompt = expected.tokens("draft0.prompt_ids");
    let out = target.prefill(&prompt).unwrap();
    let bonus = target.argmax_last(&out);
    assert_eq!(bonus, expected.tokens("draft0.bonus")[0]);
    let got = to_f32(drafter.draft_logits(out.features, bonus).unwrap());
    let (want, _) = expected.floats("draft0.logits");
    let err = relative_error(&got, &want);
    println!("first draft logits: max relative error {err:.2e}");
    assert!(err <= 1e-4, "draft logits: {err}");
}

#[test]
fn a_chat_request_gives_the_same_text_under_ddtree_as_autoregressive() {
    let expected = Expected::load(TARGET);
    let prompt = expected.tokens("chat.prompt_ids");
    let want = expected.tokens("chat.output_ids");
    let stop_tokens = GenerationConfig::from_file(fixture_dir(TARGET).join("generation_config.json"))
        .unwrap()
        .eos_token_id;
    let tokenizer = TokenizerFiles::load(fixture_dir(TARGET)).unwrap().tokenizer;
    let (target, drafter) = pair();
    let mut engine = Engine::new(target, drafter);
    let mut texts = Vec::new();
    for mode in [Mode::Autoregressive, Mode::Tree { budget: 16 }] {
        let params = GenerateParams {
            max_new_tokens: want.len(),
            stop_tokens: stop_tokens.clone(),
            mode,
            ..Default::default()
        };
        let mut streamed = Vec::new();
        let g = engine
            .generate(&prompt, &params, |chunk| {
                streamed.extend_from_slice(chunk);
                ControlFlow::Continue(())
            })
            .unwrap();
        assert_eq!(g.tokens, streamed);
        assert_eq!(g.tokens, want, "{mode:?}: transformers' greedy answer");
        assert_eq!(g.finish_reason, FinishReason::Length);
        let m = &g.metrics;
        println!(
            "{mode:?}: {} tokens in {} rounds, mean_acceptance_length {:.2}",
            m.output_tokens, m.decode_rounds, m.mean_acceptance_length
        );
        if let Mode::Tree { .. } = mode {
            assert!(
                m.mean_acceptance_length > 1.0,
                "the trained drafter is partly right"
            );
        } else {
            assert_eq!(m.mean_acceptance_length, 1.0);
        }
        texts.push(tokenizer.decode(&g.tokens, true).unwrap());
    }
    assert_eq!(texts[0], texts[1]);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture_dir(TARGET).join("expected.json")).unwrap())
            .unwrap();
    assert_eq!(texts[0], json["chat"]["output_text"].as_str().unwrap());
}

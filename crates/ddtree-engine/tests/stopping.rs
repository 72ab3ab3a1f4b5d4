//! Stop tokens inside accepted blocks, exact `max_new_tokens`, cancellation, and input errors.

mod common;

use std::ops::ControlFlow;

use burn_ndarray::NdArray;
use common::{OracleDrafter, RandomDrafter, fixture};
use ddtree_engine::{Engine, EngineError, FinishReason, GenerateParams, Mode};
use ddtree_qwen::{LoadOptions, Qwen3};

type B = NdArray<f32>;
const VOCAB: usize = 1024;

fn target(max_context: usize) -> Qwen3<B> {
    let options = LoadOptions {
        max_context: Some(max_context),
        capture_layers: vec![],
    };
    Qwen3::load_dir(fixture("qwen3-tiny-tied"), options, &Default::default()).unwrap()
}

fn params(max_new_tokens: usize, mode: Mode, stop_tokens: Vec<u32>) -> GenerateParams {
    GenerateParams {
        max_new_tokens,
        stop_tokens,
        mode,
        trace: true,
        ..Default::default()
    }
}

const PROMPT: [u32; 6] = [5, 99, 300, 7, 12, 800];

fn greedy_reference(n: usize) -> Vec<u32> {
    let mut ar = Engine::new(target(256), RandomDrafter::new(VOCAB, 16, 0));
    ar.generate(&PROMPT, &params(n, Mode::Autoregressive, vec![]), |_| {
        ControlFlow::Continue(())
    })
    .unwrap()
    .tokens
}

#[test]
fn a_stop_token_inside_an_accepted_block_ends_the_generation_there() {
    let reference = greedy_reference(40);
    let sequence: Vec<u32> = PROMPT.iter().chain(&reference).copied().collect();
    // An oracle that always guesses right: every round accepts a whole block, so the stop token
    // falls inside a multi-token commit.
    let drafter = OracleDrafter::new(sequence, 1.0, VOCAB, 16, 3);
    let mut engine = Engine::new(target(256), drafter);
    for stop_at in [5usize, 17, 30] {
        let stop = reference[stop_at];
        let first = reference.iter().position(|&t| t == stop).unwrap();
        for mode in [Mode::Chain, Mode::Tree { budget: 16 }] {
            let mut streamed = Vec::new();
            let g = engine
                .generate(&PROMPT, &params(40, mode, vec![stop]), |chunk| {
                    streamed.extend_from_slice(chunk);
                    ControlFlow::Continue(())
                })
                .unwrap();
            assert_eq!(g.finish_reason, FinishReason::Stop, "{mode:?}");
            assert_eq!(
                g.tokens,
                reference[..=first],
                "{mode:?}: up to and including the stop token"
            );
            assert_eq!(
                streamed, g.tokens,
                "{mode:?}: nothing streamed after the stop token"
            );
            assert_eq!(g.metrics.output_tokens, first + 1);
            if first >= 16 {
                assert!(
                    g.trace.iter().any(|r| r.accepted.len() > 2),
                    "{mode:?}: the stop landed inside a multi-token commit"
                );
            }
        }
    }
}

#[test]
fn max_new_tokens_is_exact_in_every_mode() {
    let reference = greedy_reference(33);
    let sequence: Vec<u32> = PROMPT.iter().chain(&reference).copied().collect();
    let mut engine = Engine::new(target(256), OracleDrafter::new(sequence, 0.9, VOCAB, 16, 4));
    for n in [1usize, 2, 7, 16, 33] {
        for mode in [
            Mode::Autoregressive,
            Mode::Chain,
            Mode::Tree { budget: 8 },
            Mode::Tree { budget: 64 },
        ] {
            let g = engine
                .generate(&PROMPT, &params(n, mode, vec![]), |_| ControlFlow::Continue(()))
                .unwrap();
            assert_eq!(g.tokens, reference[..n], "max_new_tokens {n}, {mode:?}");
            assert_eq!(g.finish_reason, FinishReason::Length);
        }
    }
    let g = engine
        .generate(&PROMPT, &params(0, Mode::Chain, vec![]), |_| {
            ControlFlow::Continue(())
        })
        .unwrap();
    assert!(g.tokens.is_empty());
}

#[test]
fn the_context_limit_ends_the_generation_without_an_error() {
    // 6 prompt tokens in a 20-token context: the tree shrinks to fit, then generation stops.
    let reference = greedy_reference(15);
    let mut engine = Engine::new(target(20), RandomDrafter::new(VOCAB, 16, 5));
    let g = engine
        .generate(&PROMPT, &params(100, Mode::Tree { budget: 64 }, vec![]), |_| {
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(g.finish_reason, FinishReason::Length);
    assert_eq!(g.tokens, reference[..g.tokens.len()]);
    assert_eq!(
        g.tokens.len(),
        20 - PROMPT.len() + 1,
        "every row used; the last bonus needs none"
    );
}

#[test]
fn the_callback_cancels_within_the_round() {
    let mut engine = Engine::new(target(256), RandomDrafter::new(VOCAB, 16, 6));
    let mut chunks = 0;
    let g = engine
        .generate(&PROMPT, &params(100, Mode::Tree { budget: 4 }, vec![]), |_| {
            chunks += 1;
            if chunks == 3 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap();
    assert_eq!(g.finish_reason, FinishReason::Cancelled);
    assert_eq!(chunks, 3);
    assert_eq!(g.metrics.decode_rounds, 2, "the prefill chunk, then two rounds");
}

#[test]
fn bad_inputs_are_errors() {
    let mut engine = Engine::new(target(16), RandomDrafter::new(VOCAB, 16, 7));
    let p = params(4, Mode::Chain, vec![]);
    let go = |e: &mut Engine<Qwen3<B>, RandomDrafter>, prompt: &[u32], p: &GenerateParams| {
        e.generate(prompt, p, |_| ControlFlow::Continue(()))
    };
    assert!(matches!(go(&mut engine, &[], &p), Err(EngineError::EmptyPrompt)));
    assert!(matches!(
        go(&mut engine, &[1; 16], &p),
        Err(EngineError::PromptTooLong {
            prompt: 16,
            max_context: 16
        })
    ));
    assert!(matches!(
        go(&mut engine, &[1, VOCAB as u32], &p),
        Err(EngineError::TokenOutOfVocab { token: 1024, .. })
    ));
    let huge = params(4, Mode::Tree { budget: 1 << 20 }, vec![]);
    assert!(matches!(
        go(&mut engine, &[1, 2], &huge),
        Err(EngineError::BudgetTooLarge { .. })
    ));
    // After errors the engine still works.
    assert_eq!(go(&mut engine, &[1, 2], &p).unwrap().tokens.len(), 4);
}

//! Targets built from `RandomWeights` (no checkpoint) with the fixture configs: the generic
//! loaders accept any `TensorSource`, and the models prefill, verify, commit and decode with the
//! right output shapes and finite values. (Loading the fixture checkpoints through the same
//! generic `load` — `load_dir` opens a `Checkpoint` and calls it — is checked against
//! transformers by the fixture tests.)

mod common;

use burn_ndarray::NdArray;
use common::{ancestor_words, depths, fixture_dir, to_f32};
use ddtree_kernels::AncestorBits;
use ddtree_qwen::{Error, ForwardOutput, LoadOptions, Qwen3, Qwen35, TreeBlock};
use ddtree_weights::{Qwen3Config, Qwen35Config, RandomWeights};

type B = NdArray<f32>;

const PROMPT: [u32; 7] = [5, 17, 1000, 3, 3, 512, 42];
/// A tree of 6 nodes: 0 → {1, 2}, 1 → 3, 2 → 4, 3 → 5.
const PARENTS: [i64; 6] = [-1, 0, 0, 1, 2, 3];

fn options(capture_layers: Vec<usize>) -> LoadOptions {
    LoadOptions {
        max_context: Some(64),
        capture_layers,
    }
}

/// `[rows, vocab]` logits, `[rows, hidden]` states, `[rows, captured · hidden]` features, all
/// finite and not constant (a model of zero weights would give constant outputs).
fn check(out: &ForwardOutput<B>, rows: usize, vocab: usize, hidden: usize, captured: usize) {
    assert_eq!(out.logits.dims(), [rows, vocab]);
    assert_eq!(out.hidden.dims(), [rows, hidden]);
    let features = out.features.as_ref().expect("features were requested");
    assert_eq!(features.dims(), [rows, captured * hidden]);
    for (what, t) in [
        ("logits", out.logits.clone()),
        ("hidden", out.hidden.clone()),
        ("features", features.clone()),
    ] {
        let v = to_f32(t);
        assert!(v.iter().all(|x| x.is_finite()), "{what}: non-finite values");
        assert!(v.iter().any(|&x| x != v[0]), "{what}: constant");
    }
}

fn tree_words() -> (Vec<u64>, usize, Vec<u32>) {
    let (words, per_row) = ancestor_words(&PARENTS);
    (words, per_row, depths(&PARENTS))
}

/// Prefill, tree verify, commit of the path 0 → 1 → 3, one decode.
macro_rules! exercise {
    ($model:expr, $vocab:expr, $hidden:expr, $captured:expr) => {{
        let model = &mut $model;
        let (vocab, hidden, captured) = ($vocab, $hidden, $captured);
        check(
            &model.prefill(&PROMPT).unwrap(),
            PROMPT.len(),
            vocab,
            hidden,
            captured,
        );
        let (words, per_row, depths) = tree_words();
        let tokens = [9, 100, 101, 7, 8, 1023];
        let tree = TreeBlock {
            tokens: &tokens,
            depths: &depths,
            ancestors: AncestorBits::new(&words, per_row).unwrap(),
        };
        check(
            &model.verify(&tree).unwrap(),
            tokens.len(),
            vocab,
            hidden,
            captured,
        );
        model.commit(&[0, 1, 3]).unwrap();
        assert_eq!(model.committed_len(), PROMPT.len() + 3);
        let out = model.decode(11).unwrap();
        check(&out, 1, vocab, hidden, captured);
        assert!((model.argmax_last(&out) as usize) < vocab);
    }};
}

#[test]
fn qwen3_from_random_weights_prefills_verifies_and_commits() {
    let config = Qwen3Config::from_file(fixture_dir("qwen3-tiny-untied").join("config.json")).unwrap();
    assert!(!config.tie_word_embeddings);
    let (vocab, hidden) = (config.vocab_size, config.hidden_size);
    let source = RandomWeights {
        std: 0.02,
        tied_embeddings: config.tie_word_embeddings,
    };
    let mut model = Qwen3::<B>::load(config, &source, options(vec![0, 1]), &Default::default()).unwrap();
    // Untied: the LM head is its own random matrix, not the embedding.
    assert_eq!(model.lm_head_weight().dims(), [vocab, hidden]);
    assert_ne!(
        to_f32(model.lm_head_weight()),
        to_f32(model.embed_tokens_weight())
    );
    exercise!(model, vocab, hidden, 2);
}

#[test]
fn random_weights_answer_like_a_checkpoint_of_the_architecture() {
    // A tied source has no `lm_head.weight`, so an untied config cannot load from it…
    let untied = Qwen3Config::from_file(fixture_dir("qwen3-tiny-untied").join("config.json")).unwrap();
    let tied_source = RandomWeights {
        std: 0.02,
        tied_embeddings: true,
    };
    match Qwen3::<B>::load(untied, &tied_source, options(vec![]), &Default::default()) {
        Err(Error::Weights(ddtree_weights::Error::MissingTensor { tensor, .. })) => {
            assert_eq!(tensor, "lm_head.weight")
        }
        other => panic!("expected a missing lm_head.weight, got {:?}", other.map(|_| ())),
    }
    // …and a tied config loads from it with the embedding as its head.
    let tied = Qwen3Config::from_file(fixture_dir("qwen3-tiny-tied").join("config.json")).unwrap();
    assert!(tied.tie_word_embeddings);
    let model = Qwen3::<B>::load(tied, &tied_source, options(vec![]), &Default::default()).unwrap();
    assert_eq!(
        to_f32(model.lm_head_weight()),
        to_f32(model.embed_tokens_weight())
    );
}

#[test]
fn hybrids_from_random_weights_prefill_verify_and_commit() {
    // Qwen3.5 (separate GDN projections, tied) and Qwen3-Next (fused grouped projections, untied).
    for name in ["qwen35-tiny", "qwen3next-tiny"] {
        let config = Qwen35Config::from_file(fixture_dir(name).join("config.json")).unwrap();
        let (vocab, hidden, layers) = (config.vocab_size, config.hidden_size, config.num_hidden_layers);
        let source = RandomWeights {
            std: 0.02,
            tied_embeddings: config.tie_word_embeddings,
        };
        // Capture one Gated DeltaNet layer and the attention layer.
        let capture = vec![0, layers - 1];
        let mut model = Qwen35::<B>::load(config, &source, options(capture), &Default::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        exercise!(model, vocab, hidden, 2);
    }
}

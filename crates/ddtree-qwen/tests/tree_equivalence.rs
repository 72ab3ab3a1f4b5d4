//! Tree verify and commit against plain sequential decoding, in f64 on random trees: a node's
//! logits equal those of its ancestor path run as a plain sequence, and after a commit the model
//! continues exactly as if the accepted tokens had been decoded one by one.

mod common;

use burn_ndarray::NdArray;
use common::{ancestor_words, depths, fixture_dir, path_to, relative_error, to_f32};
use ddtree_kernels::AncestorBits;
use ddtree_qwen::{LoadOptions, Qwen3, TreeBlock};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

type B = NdArray<f64>;
const TOLERANCE: f32 = 1e-6; // f64 compute; the comparison is in f32

fn load(model: &str) -> Qwen3<B> {
    let options = LoadOptions {
        max_context: Some(256),
        capture_layers: vec![0, 1],
    };
    Qwen3::load_dir(fixture_dir(model), options, &Default::default()).unwrap()
}

/// A random tree of `n` nodes (each parent precedes its child, depth ≤ 15) over random tokens.
fn random_tree(rng: &mut StdRng, n: usize, vocab: u32) -> (Vec<u32>, Vec<i64>) {
    let mut parents = vec![-1i64];
    let mut depth = vec![0usize];
    while parents.len() < n {
        let p = rng.random_range(0..parents.len());
        if depth[p] < 15 {
            parents.push(p as i64);
            depth.push(depth[p] + 1);
        }
    }
    let tokens = (0..n).map(|_| rng.random_range(0..vocab)).collect();
    (tokens, parents)
}

#[test]
fn every_node_matches_its_ancestor_path_run_as_a_sequence() {
    let mut rng = StdRng::seed_from_u64(7);
    for model_name in ["qwen3-tiny-tied", "qwen3-tiny-untied"] {
        let mut model = load(model_name);
        let mut reference = load(model_name);
        let vocab = model.config().vocab_size as u32;
        for case in 0..6 {
            let prefix: Vec<u32> = (0..rng.random_range(1..20))
                .map(|_| rng.random_range(0..vocab))
                .collect();
            let n = [2, 5, 17, 33, 65][case % 5];
            let (tokens, parents) = random_tree(&mut rng, n, vocab);
            let (words, per_row) = ancestor_words(&parents);
            let node_depths = depths(&parents);

            model.truncate(0);
            model.prefill(&prefix).unwrap();
            let tree = TreeBlock {
                tokens: &tokens,
                depths: &node_depths,
                ancestors: AncestorBits::new(&words, per_row).unwrap(),
            };
            let out = model.verify(&tree).unwrap();
            let logits = to_f32(out.logits);
            let features = to_f32(out.features.unwrap());
            let (vocab_n, feat_n) = (logits.len() / n, features.len() / n);

            for node in 0..n {
                let path: Vec<u32> = path_to(&parents, node).iter().map(|&i| tokens[i]).collect();
                reference.truncate(0);
                let seq: Vec<u32> = prefix.iter().chain(&path).copied().collect();
                let want = reference.prefill(&seq).unwrap();
                let want_logits = to_f32(want.logits);
                let want_features = to_f32(want.features.unwrap());
                let last = seq.len() - 1;
                let err = relative_error(
                    &logits[node * vocab_n..(node + 1) * vocab_n],
                    &want_logits[last * vocab_n..(last + 1) * vocab_n],
                );
                assert!(
                    err <= TOLERANCE,
                    "{model_name} case {case} node {node}: logits error {err}"
                );
                let err = relative_error(
                    &features[node * feat_n..(node + 1) * feat_n],
                    &want_features[last * feat_n..(last + 1) * feat_n],
                );
                assert!(
                    err <= TOLERANCE,
                    "{model_name} case {case} node {node}: features error {err}"
                );
            }
        }
    }
}

#[test]
fn commit_then_continue_equals_decoding_the_accepted_sequence_from_scratch() {
    let mut rng = StdRng::seed_from_u64(11);
    for model_name in ["qwen3-tiny-tied", "qwen3-tiny-untied"] {
        let mut model = load(model_name);
        let mut reference = load(model_name);
        let vocab = model.config().vocab_size as u32;
        for case in 0..8 {
            let prefix: Vec<u32> = (0..rng.random_range(1..12))
                .map(|_| rng.random_range(0..vocab))
                .collect();
            let (tokens, parents) = random_tree(&mut rng, 24, vocab);
            let (words, per_row) = ancestor_words(&parents);
            let node_depths = depths(&parents);
            // The deepest node's path: non-contiguous ids, so rows really move.
            let target = (0..tokens.len()).max_by_key(|&i| (node_depths[i], i)).unwrap();
            let accepted = path_to(&parents, target);

            model.truncate(0);
            model.prefill(&prefix).unwrap();
            let tree = TreeBlock {
                tokens: &tokens,
                depths: &node_depths,
                ancestors: AncestorBits::new(&words, per_row).unwrap(),
            };
            model.verify(&tree).unwrap();
            model.commit(&accepted).unwrap();
            assert_eq!(model.committed_len(), prefix.len() + accepted.len());
            let next: Vec<u32> = (0..3).map(|_| rng.random_range(0..vocab)).collect();
            let got = to_f32(model.prefill(&next).unwrap().logits);

            reference.truncate(0);
            let seq: Vec<u32> = prefix
                .iter()
                .copied()
                .chain(accepted.iter().map(|&i| tokens[i]))
                .chain(next.iter().copied())
                .collect();
            let want = to_f32(reference.prefill(&seq).unwrap().logits);
            let rows = next.len() * (want.len() / seq.len());
            let err = relative_error(&got, &want[want.len() - rows..]);
            assert!(
                err <= TOLERANCE,
                "{model_name} case {case} (path {accepted:?}): error {err}"
            );
        }
    }
}

#[test]
fn misuse_gives_errors_not_panics() {
    let mut model = load("qwen3-tiny-tied");
    let vocab = model.config().vocab_size as u32;
    assert!(matches!(model.prefill(&[]), Err(ddtree_qwen::Error::EmptyBlock)));
    assert!(matches!(
        model.prefill(&[vocab]),
        Err(ddtree_qwen::Error::TokenOutOfVocab { .. })
    ));
    assert!(matches!(
        model.commit(&[0]),
        Err(ddtree_qwen::Error::InvalidCommit(_))
    ));
    let too_long = vec![1u32; 257];
    match model.prefill(&too_long) {
        Err(ddtree_qwen::Error::ContextFull {
            committed: 0,
            requested: 257,
            capacity: 256,
        }) => {}
        other => panic!("expected ContextFull, got {other:?}"),
    }
    model.prefill(&[1, 2]).unwrap();
    let words = [1u64, 0b10];
    let bad = TreeBlock {
        tokens: &[3, 4],
        depths: &[0, 1],
        ancestors: AncestorBits::new(&words, 1).unwrap(),
    };
    assert!(
        model.verify(&bad).is_ok(),
        "siblings at depth 1 that each see themselves are valid"
    );
    let words = [1u64, 0];
    let blind = TreeBlock {
        tokens: &[3, 4],
        depths: &[0, 1],
        ancestors: AncestorBits::new(&words, 1).unwrap(),
    };
    assert!(matches!(
        model.verify(&blind),
        Err(ddtree_qwen::Error::InvalidTree(_))
    ));
}

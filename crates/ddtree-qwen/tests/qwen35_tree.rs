//! The hybrid's tree verify and commit against plain sequential runs, in f64: every node of 120
//! random trees gets the logits and features of its ancestor path run as a plain sequence from
//! the committed state, verify leaves the committed state untouched, and after commits the model
//! continues exactly as a from-scratch run over the accepted tokens. Also: f64 logits against
//! transformers' own f64 forward, and misuse.

mod common;

use burn_ndarray::NdArray;
use common::{Expected, ancestor_words, depths, fixture_dir, path_to, relative_error, to_f32};
use ddtree_kernels::AncestorBits;
use ddtree_qwen::{Error, LoadOptions, Qwen35, TreeBlock};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

type B = NdArray<f64>;
const MODELS: [&str; 3] = ["qwen35-tiny", "qwen35-small-untied", "qwen3next-tiny"];
const TOLERANCE: f32 = 1e-6; // f64 compute; the comparison is in f32

fn load(model: &str) -> Qwen35<B> {
    let options = LoadOptions {
        max_context: Some(256),
        capture_layers: vec![1, 2],
    };
    Qwen35::load_dir(fixture_dir(model), options, &Default::default()).unwrap()
}

fn random_tokens(rng: &mut StdRng, n: usize, vocab: u32) -> Vec<u32> {
    (0..n).map(|_| rng.random_range(0..vocab)).collect()
}

/// A random tree of `n` nodes, depth ≤ 15: half the nodes extend the newest node (deep paths),
/// the others hang under a random earlier one (siblings).
fn random_tree(rng: &mut StdRng, n: usize, vocab: u32) -> (Vec<u32>, Vec<i64>) {
    let mut parents = vec![-1i64];
    let mut depth = vec![0usize];
    while parents.len() < n {
        let p = if rng.random_bool(0.5) {
            parents.len() - 1
        } else {
            rng.random_range(0..parents.len())
        };
        if depth[p] < 15 {
            parents.push(p as i64);
            depth.push(depth[p] + 1);
        }
    }
    (random_tokens(rng, n, vocab), parents)
}

fn rows(values: &[f32], n: usize, row: usize) -> &[f32] {
    let width = values.len() / n;
    &values[row * width..(row + 1) * width]
}

#[test]
fn f64_logits_match_transformers_f64_forward() {
    for model_name in MODELS {
        let expected = Expected::load(model_name);
        let mut model = load(model_name);
        for i in 0..expected.count("prompt", "input_ids") {
            model.reset();
            let ids = expected.tokens(&format!("prompt{i}.input_ids"));
            let got = to_f32(model.prefill(&ids).unwrap().logits);
            let (want, _) = expected.floats(&format!("prompt{i}.logits_f64"));
            let err = relative_error(&got, &want);
            println!("{model_name} prompt{i} f64 vs transformers f64: max relative error {err:.2e}");
            assert!(err <= TOLERANCE, "{model_name} prompt{i}: {err}");
        }
    }
}

#[test]
fn every_node_matches_its_ancestor_path_run_as_a_sequence() {
    let mut rng = StdRng::seed_from_u64(35);
    let mut trees = 0;
    let mut worst = 0f32;
    for (model_name, cases) in [
        ("qwen35-tiny", 60),
        ("qwen35-small-untied", 30),
        ("qwen3next-tiny", 30),
    ] {
        let mut model = load(model_name);
        let vocab = model.config().vocab_size as u32;
        for case in 0..cases {
            let n = match case % 4 {
                0 => rng.random_range(1..=8),
                1 => rng.random_range(9..=24),
                _ => rng.random_range(25..=65), // budgets up to 64, plus the root
            };
            let prefix_len = rng.random_range(1..24);
            let prefix = random_tokens(&mut rng, prefix_len, vocab);
            let (tokens, parents) = random_tree(&mut rng, n, vocab);
            let (words, per_row) = ancestor_words(&parents);
            let node_depths = depths(&parents);

            model.reset();
            model.prefill(&prefix).unwrap();
            let committed = model.clone();
            let tree = TreeBlock {
                tokens: &tokens,
                depths: &node_depths,
                ancestors: AncestorBits::new(&words, per_row).unwrap(),
            };
            let out = model.verify(&tree).unwrap();
            let logits = to_f32(out.logits);
            let features = to_f32(out.features.unwrap());
            for (node, depth) in node_depths.iter().enumerate() {
                let path: Vec<u32> = path_to(&parents, node).iter().map(|&i| tokens[i]).collect();
                let mut reference = committed.clone();
                let want = reference.prefill(&path).unwrap();
                let last = path.len() - 1;
                let want_logits = to_f32(want.logits);
                let want_features = to_f32(want.features.unwrap());
                let err = relative_error(rows(&logits, n, node), rows(&want_logits, path.len(), last)).max(
                    relative_error(rows(&features, n, node), rows(&want_features, path.len(), last)),
                );
                worst = worst.max(err);
                assert!(
                    err <= TOLERANCE,
                    "{model_name} case {case} ({n} nodes) node {node} (depth {depth}): error {err}"
                );
            }
            // Verify left the committed state alone: a prefill now continues the prefix.
            let next = random_tokens(&mut rng, 2, vocab);
            let got = to_f32(model.prefill(&next).unwrap().logits);
            let want = to_f32(committed.clone().prefill(&next).unwrap().logits);
            assert_eq!(
                got, want,
                "{model_name} case {case}: verify changed the committed state"
            );
            trees += 1;
        }
    }
    println!("{trees} trees: worst relative error {worst:.2e}");
    assert!(trees >= 100);
}

#[test]
fn commit_then_continue_equals_running_the_accepted_sequence_from_scratch() {
    let mut rng = StdRng::seed_from_u64(36);
    let mut worst = 0f32;
    for model_name in MODELS {
        let mut model = load(model_name);
        let mut reference = load(model_name);
        let vocab = model.config().vocab_size as u32;
        for case in 0..6 {
            let prefix_len = rng.random_range(1..12);
            let mut sequence = random_tokens(&mut rng, prefix_len, vocab);
            model.reset();
            model.prefill(&sequence).unwrap();
            // Three rounds: a deepest path (rows move), the identity chain, the root alone.
            for round in 0..3 {
                let n = rng.random_range(2..40);
                let (tokens, parents) = random_tree(&mut rng, n, vocab);
                let (words, per_row) = ancestor_words(&parents);
                let node_depths = depths(&parents);
                let tree = TreeBlock {
                    tokens: &tokens,
                    depths: &node_depths,
                    ancestors: AncestorBits::new(&words, per_row).unwrap(),
                };
                model.verify(&tree).unwrap();
                let target = match (round + case) % 3 {
                    0 => (0..tokens.len()).max_by_key(|&i| (node_depths[i], i)).unwrap(),
                    1 => (0..tokens.len())
                        .take_while(|&i| i == 0 || parents[i] == i as i64 - 1)
                        .last()
                        .unwrap(),
                    _ => 0,
                };
                let accepted = path_to(&parents, target);
                model.commit(&accepted).unwrap();
                sequence.extend(accepted.iter().map(|&i| tokens[i]));
                assert_eq!(model.committed_len(), sequence.len());
            }
            let next = random_tokens(&mut rng, 3, vocab);
            let got = to_f32(model.prefill(&next).unwrap().logits);
            reference.reset();
            sequence.extend(&next);
            let want = to_f32(reference.prefill(&sequence).unwrap().logits);
            let err = relative_error(&got, &want[want.len() - got.len()..]);
            worst = worst.max(err);
            assert!(err <= TOLERANCE, "{model_name} case {case}: error {err}");
        }
    }
    println!("commit then continue: worst relative error {worst:.2e}");
}

#[test]
fn misuse_gives_errors_not_panics() {
    let mut model = load("qwen35-tiny");
    let vocab = model.config().vocab_size as u32;
    assert!(matches!(model.prefill(&[]), Err(Error::EmptyBlock)));
    assert!(matches!(
        model.prefill(&[vocab]),
        Err(Error::TokenOutOfVocab { .. })
    ));
    assert!(matches!(model.commit(&[0]), Err(Error::InvalidCommit(_))));
    model.prefill(&[1, 2]).unwrap();

    // 0 → 1 → 2 and 0 → 3.
    let parents = [-1, 0, 1, 0];
    let (words, per_row) = ancestor_words(&parents);
    let node_depths = depths(&parents);
    let tree = TreeBlock {
        tokens: &[3, 4, 5, 6],
        depths: &node_depths,
        ancestors: AncestorBits::new(&words, per_row).unwrap(),
    };
    for accepted in [&[0, 2][..], &[1], &[0, 1, 3]] {
        model.verify(&tree).unwrap();
        match model.commit(accepted) {
            Err(Error::InvalidCommit(message)) => assert!(message.contains("path"), "{message}"),
            other => panic!("{accepted:?}: expected InvalidCommit, got {other:?}"),
        }
    }
    model.verify(&tree).unwrap();
    model.commit(&[0, 3]).unwrap();
    assert_eq!(model.committed_len(), 4);

    // A depth-1 node that does not see its parent, and a node that sees a non-ancestor.
    for words in [[0b01u64, 0b10], [0b01, 0b11 | 0b100]] {
        let orphan = TreeBlock {
            tokens: &[3, 4],
            depths: &[0, 1],
            ancestors: AncestorBits::new(&words, 1).unwrap(),
        };
        assert!(matches!(model.verify(&orphan), Err(Error::InvalidTree(_))));
    }
    let too_long = vec![1u32; 256];
    assert!(matches!(model.prefill(&too_long), Err(Error::ContextFull { .. })));
    assert!(matches!(
        Qwen35::<B>::load_dir(
            fixture_dir("qwen35-tiny"),
            LoadOptions {
                max_context: Some(16),
                capture_layers: vec![4],
            },
            &Default::default()
        ),
        Err(Error::CaptureLayer { layer: 4, layers: 4 })
    ));
}

//! Trees and walks identical to the reference implementation's.
//!
//! `fixtures/trees/reference_trees.json` is made by `tools/make_tree_fixtures.py`, which runs the
//! reference's `build_ddtree_tree` and `follow_verified_tree` (github.com/liranringel/ddtree) on
//! random draft logits and records the exact f32 top-K table each tree was built from.

use std::path::PathBuf;

use ddtree::{DraftTopK, DraftTree, TreeBuilder};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    reference_rev: String,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    budget: usize,
    depths: usize,
    k: usize,
    root: u32,
    tokens: Vec<u32>,
    log_prob_bits: Vec<u32>,
    expected: Expected,
    walks: Vec<ReferenceWalk>,
}

/// The reference's outputs; `tokens` and `depths` exclude the root, `parents` include it (-1).
#[derive(Deserialize)]
struct Expected {
    tokens: Vec<u32>,
    depths: Vec<u32>,
    parents: Vec<i32>,
}

#[derive(Deserialize)]
struct ReferenceWalk {
    posterior: Vec<u32>,
    accepted: Vec<u32>,
    bonus: u32,
}

fn load() -> Fixture {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/trees/reference_trees.json");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("reading {}: {error}", path.display()));
    serde_json::from_str(&text).expect("parsing the reference tree fixture")
}

fn build(case: &Case, builder: &mut TreeBuilder, tree: &mut DraftTree) {
    let log_probs: Vec<f32> = case
        .log_prob_bits
        .iter()
        .map(|&bits| f32::from_bits(bits))
        .collect();
    let draft = DraftTopK::new(case.depths, case.k, &case.tokens, &log_probs).unwrap();
    builder.build(case.root, &draft, case.budget, tree).unwrap();
}

#[test]
fn fixture_covers_ties_small_k_and_nan() {
    let fixture = load();
    assert!(!fixture.reference_rev.is_empty());
    assert!(fixture.cases.len() >= 200);
    let with = |predicate: &dyn Fn(&Case) -> bool| fixture.cases.iter().filter(|c| predicate(c)).count();
    // Exact ties between two candidates of one depth.
    let tied = with(&|case| {
        case.log_prob_bits
            .chunks(case.k.max(1))
            .any(|row| row.windows(2).any(|w| w[0] == w[1]))
    });
    let nan = with(&|case| case.log_prob_bits.iter().any(|&b| f32::from_bits(b).is_nan()));
    let infinite = with(&|case| {
        case.log_prob_bits
            .iter()
            .any(|&b| f32::from_bits(b).is_infinite())
    });
    assert!(tied >= 50, "{tied} cases with ties");
    assert!(with(&|case| case.k < case.budget) >= 30);
    assert!(
        nan >= 3 && infinite >= 3,
        "{nan} NaN cases, {infinite} -inf cases"
    );
    assert!(with(&|case| case.budget == 256 && case.expected.tokens.len() == 256) >= 10);
}

#[test]
fn trees_match_the_reference_builder() {
    let fixture = load();
    // One builder and tree for all cases: reuse must not leak state between rounds.
    let mut builder = TreeBuilder::new();
    let mut tree = DraftTree::new();
    for case in &fixture.cases {
        build(case, &mut builder, &mut tree);
        let name = &case.name;
        assert_eq!(tree.root_token(), case.root, "{name}");
        assert_eq!(&tree.tokens()[1..], &case.expected.tokens[..], "{name}: tokens");
        assert_eq!(&tree.depths()[1..], &case.expected.depths[..], "{name}: depths");
        assert_eq!(tree.parents(), &case.expected.parents[..], "{name}: parents");
    }
}

#[test]
fn walks_match_the_reference_walk() {
    let fixture = load();
    let mut builder = TreeBuilder::new();
    let mut tree = DraftTree::new();
    let mut longest = 0;
    for case in &fixture.cases {
        build(case, &mut builder, &mut tree);
        for reference in &case.walks {
            let walk = tree.walk(&reference.posterior).unwrap();
            assert_eq!(walk.accepted(), &reference.accepted[..], "{}", case.name);
            assert_eq!(walk.bonus_token(), reference.bonus, "{}", case.name);
            longest = longest.max(walk.acceptance_length());
        }
    }
    assert!(longest >= 4, "the fixture's walks should go several nodes deep");
}

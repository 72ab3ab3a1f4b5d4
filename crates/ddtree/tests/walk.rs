//! The walk on small trees whose shape is derived by hand, with expected results taken from the
//! definition: start at the root; while the posterior at the current node is the token of one of
//! its children, move to that child; the bonus is the posterior at the last accepted node.

use ddtree::{AcceptanceStats, DraftTopK, DraftTree, TreeBuilder, TreeError};

/// Three depths, top-2 each, budget 4, root 5. Best-first by path score:
/// 10 (-0.1) → node 1; 10·20 (-0.6) → node 2; 10·20·30 (-0.8) → node 3; 10·21 (-1.6) → node 4;
/// 11 (-2.4) and 10·20·31 (-3.6) miss the budget.
///
/// ```text
/// 0:5 ─ 1:10 ─┬─ 2:20 ─ 3:30
///             └─ 4:21
/// ```
fn branching_tree() -> DraftTree {
    let tokens = [10, 11, 20, 21, 30, 31];
    let log_probs = [-0.1, -2.4, -0.5, -1.5, -0.2, -3.0];
    let draft = DraftTopK::new(3, 2, &tokens, &log_probs).unwrap();
    let mut tree = DraftTree::new();
    TreeBuilder::new().build(5, &draft, 4, &mut tree).unwrap();
    assert_eq!(tree.tokens(), &[5, 10, 20, 30, 21]);
    assert_eq!(tree.parents(), &[-1, 0, 1, 2, 1]);
    assert_eq!(tree.children(1), &[2, 4]);
    tree
}

fn walk(tree: &DraftTree, posterior: &[u32]) -> (Vec<u32>, u32) {
    let walk = tree.walk(posterior).unwrap();
    (walk.accepted().to_vec(), walk.bonus_token())
}

#[test]
fn branching_tree_walks() {
    let tree = branching_tree();
    // The target agrees all the way down the main branch; node 3 is a leaf, its posterior is
    // the bonus.
    assert_eq!(walk(&tree, &[10, 20, 30, 77, 0]), (vec![0, 1, 2, 3], 77));
    // The target takes the side branch after node 1.
    assert_eq!(walk(&tree, &[10, 21, 0, 0, 42]), (vec![0, 1, 4], 42));
    // Rejected at once: 11 is not in the tree; τ = 1, as in autoregressive decoding.
    assert_eq!(walk(&tree, &[11, 20, 30, 0, 0]), (vec![0], 11));
    // 31 is not a child of node 2 (only 30 is).
    assert_eq!(walk(&tree, &[10, 20, 31, 0, 0]), (vec![0, 1, 2], 31));
    // 20 is in the tree, but not below the root: the walk never jumps.
    assert_eq!(walk(&tree, &[20, 20, 30, 0, 0]), (vec![0], 20));
}

#[test]
fn contiguity_tells_when_kv_rows_need_no_move() {
    let tree = branching_tree();
    assert!(!tree.is_chain());
    assert!(tree.walk(&[10, 20, 30, 77, 0]).unwrap().is_contiguous());
    assert!(tree.walk(&[10, 20, 0, 0, 0]).unwrap().is_contiguous());
    assert!(!tree.walk(&[10, 21, 0, 0, 42]).unwrap().is_contiguous());
}

#[test]
fn chain_walks() {
    // build_chain keeps the rank-0 token of each depth: 5 → 10 → 20 → 30.
    let tokens = [10, 11, 20, 21, 30, 31];
    let log_probs = [-0.1, -2.4, -0.5, -1.5, -0.2, -3.0];
    let draft = DraftTopK::new(3, 2, &tokens, &log_probs).unwrap();
    let mut tree = DraftTree::new();
    TreeBuilder::new().build_chain(5, &draft, 3, &mut tree).unwrap();
    assert_eq!(tree.tokens(), &[5, 10, 20, 30]);
    assert!(tree.is_chain());
    assert_eq!(walk(&tree, &[10, 20, 30, 8]), (vec![0, 1, 2, 3], 8));
    assert_eq!(walk(&tree, &[10, 21, 30, 8]), (vec![0, 1], 21));
}

#[test]
fn root_only_tree_is_one_autoregressive_step() {
    let draft = DraftTopK::new(3, 0, &[], &[]).unwrap();
    let mut tree = DraftTree::new();
    TreeBuilder::new().build(5, &draft, 4, &mut tree).unwrap();
    assert_eq!(tree.tokens(), &[5]);
    assert_eq!(walk(&tree, &[9]), (vec![0], 9));
}

#[test]
fn equal_sibling_tokens_take_the_later_node() {
    // One depth whose two candidates carry the same token 7: both become children of the root
    // (node 1 = rank 0, node 2 = rank 1). The reference maps token → child in a dict filled in
    // node order, so the later node wins.
    let draft = DraftTopK::new(1, 2, &[7, 7], &[-0.5, -0.6]).unwrap();
    let mut tree = DraftTree::new();
    TreeBuilder::new().build(5, &draft, 2, &mut tree).unwrap();
    assert_eq!(tree.tokens(), &[5, 7, 7]);
    assert_eq!(walk(&tree, &[7, 1, 2]), (vec![0, 2], 2));
}

#[test]
fn posterior_of_the_wrong_length_is_an_error() {
    let tree = branching_tree();
    let error = tree.walk(&[10, 20, 30, 77]).unwrap_err();
    assert_eq!(error, TreeError::PosteriorLength { got: 4, expected: 5 });
    assert!(error.to_string().contains("4 tokens"));
}

#[test]
fn statistics_of_the_walks() {
    let tree = branching_tree();
    let mut stats = AcceptanceStats::new();
    for posterior in [[10, 20, 30, 77, 0], [10, 21, 0, 0, 42], [11, 0, 0, 0, 0]] {
        stats.record_walk(&tree.walk(&posterior).unwrap());
    }
    // τ = 4, 3, 1.
    assert_eq!(stats.rounds(), 3);
    assert_eq!(stats.accepted_tokens(), 8);
    assert_eq!(stats.mean_acceptance_length(), 8.0 / 3.0);
    assert_eq!(stats.tau_histogram(), &[0, 1, 0, 1, 1]);
    assert_eq!(stats.depth_acceptance_counts(), &[3, 2, 2, 1]);

    let mut total = AcceptanceStats::new();
    assert_eq!(total.mean_acceptance_length(), 0.0);
    total.merge(&stats);
    total.merge(&stats);
    assert_eq!(total.rounds(), 6);
    assert_eq!(total.tau_histogram(), &[0, 2, 0, 2, 2]);
    assert_eq!(total.mean_acceptance_length(), 8.0 / 3.0);
}

//! Property tests of the builder, the compiled tree and the walk on random top-K tables.

use ddtree::{DraftTopK, DraftTree, TreeBuilder};
use proptest::prelude::*;

/// A random top-K table and budget.
#[derive(Debug, Clone)]
struct Case {
    depths: usize,
    k: usize,
    budget: usize,
    root: u32,
    tokens: Vec<u32>,
    log_probs: Vec<f32>,
}

impl Case {
    fn draft(&self) -> DraftTopK<'_> {
        DraftTopK::new(self.depths, self.k, &self.tokens, &self.log_probs).unwrap()
    }

    fn build(&self) -> DraftTree {
        let mut tree = DraftTree::new();
        TreeBuilder::new()
            .build(self.root, &self.draft(), self.budget, &mut tree)
            .unwrap();
        tree
    }

    /// Distinct root paths the table offers: Σ_d min(k, budget)^d.
    fn available_paths(&self) -> usize {
        let k = self.k.min(self.budget);
        (1..=self.depths as u32)
            .map(|depth| k.saturating_pow(depth))
            .fold(0usize, usize::saturating_add)
    }
}

/// Log-probs: finite, drawn from a short list (many exact ties) or continuous; rows sorted
/// descending like a drafter's top-K.
fn case_with(max_depths: usize, max_k: usize, max_budget: usize) -> impl Strategy<Value = Case> {
    (
        0..=max_depths,
        0..=max_k,
        0..=max_budget,
        any::<u32>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_flat_map(|(depths, k, budget, root, tied, few_tokens)| {
            let entries = depths * k;
            let log_probs = if tied {
                prop::collection::vec(prop::sample::select(vec![-0.0f32, -0.5, -1.0, -2.5]), entries).boxed()
            } else {
                prop::collection::vec(-12.0f32..0.0, entries).boxed()
            };
            let vocab: u32 = if few_tokens { 3 } else { 200_000 };
            let tokens = prop::collection::vec(0..vocab, entries);
            (Just((depths, k, budget, root)), tokens, log_probs)
        })
        .prop_map(|((depths, k, budget, root), tokens, mut log_probs)| {
            for row in log_probs.chunks_mut(k.max(1)) {
                row.sort_by(|a, b| b.total_cmp(a));
            }
            Case {
                depths,
                k,
                budget,
                root,
                tokens,
                log_probs,
            }
        })
}

fn case() -> impl Strategy<Value = Case> {
    case_with(15, 8, 80)
}

/// The reference's frontier semantics without a heap: scan for the best candidate, ordered by
/// score (descending) then by the rank tuple of its path (lexicographic, prefix first) — the
/// order of Python's tuples `(-score, ranks, …)`. Scores are summed as the reference does.
/// Valid for NaN-free scores, which these finite tables guarantee.
fn oracle_tree(case: &Case) -> (Vec<u32>, Vec<u32>, Vec<i32>) {
    struct Candidate {
        score: f64,
        ranks: Vec<usize>,
        parent: usize,
    }
    let k = case.k.min(case.budget);
    let at = |depth: usize, rank: usize| (depth - 1) * case.k + rank;
    let (mut tokens, mut depths, mut parents) = (vec![case.root], vec![0u32], vec![-1i32]);
    let mut frontier = Vec::new();
    if case.budget > 0 && case.depths > 0 && k > 0 {
        let score = f64::from(case.log_probs[0]);
        frontier.push(Candidate {
            score,
            ranks: vec![0],
            parent: 0,
        });
    }
    while tokens.len() - 1 < case.budget && !frontier.is_empty() {
        let best = (0..frontier.len())
            .min_by(|&a, &b| {
                let (a, b) = (&frontier[a], &frontier[b]);
                b.score
                    .partial_cmp(&a.score)
                    .unwrap()
                    .then_with(|| a.ranks.cmp(&b.ranks))
            })
            .unwrap();
        let Candidate { score, ranks, parent } = frontier.swap_remove(best);
        let (depth, rank) = (ranks.len(), *ranks.last().unwrap());
        let node = tokens.len();
        tokens.push(case.tokens[at(depth, rank)]);
        depths.push(depth as u32);
        parents.push(parent as i32);
        if rank + 1 < k {
            let mut sibling_ranks = ranks.clone();
            *sibling_ranks.last_mut().unwrap() += 1;
            let score = score - f64::from(case.log_probs[at(depth, rank)])
                + f64::from(case.log_probs[at(depth, rank + 1)]);
            frontier.push(Candidate {
                score,
                ranks: sibling_ranks,
                parent,
            });
        }
        if depth < case.depths {
            let mut child_ranks = ranks;
            child_ranks.push(0);
            let score = score + f64::from(case.log_probs[at(depth + 1, 0)]);
            frontier.push(Candidate {
                score,
                ranks: child_ranks,
                parent: node,
            });
        }
    }
    (tokens, depths, parents)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn size_is_budget_or_every_available_path(case in case()) {
        let tree = case.build();
        prop_assert_eq!(tree.num_draft_nodes(), case.budget.min(case.available_paths()));
        prop_assert_eq!(tree.num_nodes(), tree.tokens().len());
        if case.k >= case.budget && case.depths >= 1 {
            prop_assert_eq!(tree.num_draft_nodes(), case.budget);
        }
    }

    #[test]
    fn parents_precede_children_one_depth_up(case in case()) {
        let tree = case.build();
        prop_assert_eq!(tree.root_token(), case.root);
        prop_assert_eq!((tree.depths()[0], tree.parents()[0]), (0, -1));
        for node in 1..tree.num_nodes() {
            let parent = tree.parent(node).unwrap();
            prop_assert!(parent < node);
            prop_assert_eq!(tree.depths()[node], tree.depths()[parent] + 1);
            prop_assert!(tree.children(parent).contains(&(node as u32)));
            let (depth, rank) = (tree.depths()[node] as usize, tree.ranks()[node] as usize);
            prop_assert_eq!(case.draft().token(depth, rank), Some(tree.tokens()[node]));
        }
        let listed: usize = (0..tree.num_nodes()).map(|node| tree.children(node).len()).sum();
        prop_assert_eq!(listed, tree.num_nodes() - 1);
    }

    #[test]
    fn ancestor_sets_are_parent_set_plus_self(case in case_with(15, 8, 300)) {
        let tree = case.build();
        let nodes = tree.num_nodes();
        prop_assert_eq!(tree.words_per_row(), nodes.div_ceil(64));
        prop_assert_eq!(tree.ancestor_row(0)[0], 1);
        for node in 1..nodes {
            let parent = tree.parent(node).unwrap();
            for other in 0..nodes {
                let expected = other == node || tree.is_ancestor_or_self(other, parent);
                prop_assert_eq!(tree.is_ancestor_or_self(other, node), expected);
            }
        }
    }

    #[test]
    fn positions_follow_depths(case in case(), start in 0usize..1 << 40) {
        let tree = case.build();
        let positions: Vec<usize> = tree.positions(start).collect();
        let expected: Vec<usize> = tree.depths().iter().map(|&d| start + d as usize).collect();
        prop_assert_eq!(positions, expected);
    }

    #[test]
    fn heap_order_matches_a_plain_scan(case in case()) {
        let tree = case.build();
        let (tokens, depths, parents) = oracle_tree(&case);
        prop_assert_eq!(tree.tokens(), &tokens[..]);
        prop_assert_eq!(tree.depths(), &depths[..]);
        prop_assert_eq!(tree.parents(), &parents[..]);
    }

    #[test]
    fn chain_equals_builder_with_one_candidate(case in case()) {
        let draft = case.draft();
        let mut chain = DraftTree::new();
        TreeBuilder::new().build_chain(case.root, &draft, case.budget, &mut chain).unwrap();
        let rank0 = Case {
            k: case.k.min(1),
            tokens: case.tokens.iter().step_by(case.k.max(1)).copied().collect(),
            log_probs: case.log_probs.iter().step_by(case.k.max(1)).copied().collect(),
            ..case.clone()
        };
        prop_assert_eq!(&chain, &rank0.build());
        prop_assert!(chain.is_chain());
        prop_assert_eq!(chain.num_draft_nodes(), case.budget.min(case.depths) * usize::from(case.k > 0));
    }

    #[test]
    fn reused_buffers_give_the_same_tree(first in case(), second in case()) {
        let mut builder = TreeBuilder::new();
        let mut tree = DraftTree::new();
        builder.build(first.root, &first.draft(), first.budget, &mut tree).unwrap();
        builder.build(second.root, &second.draft(), second.budget, &mut tree).unwrap();
        prop_assert_eq!(tree, second.build());
    }

    #[test]
    fn walk_is_a_root_path_that_follows_the_posterior(
        case in case(),
        choices in prop::collection::vec(any::<u32>(), 81),
    ) {
        let tree = case.build();
        // Mostly name one of the node's children, otherwise any token.
        let posterior: Vec<u32> = (0..tree.num_nodes())
            .map(|node| {
                let children = tree.children(node);
                let choice = choices[node];
                if choice % 5 != 0 && !children.is_empty() {
                    tree.tokens()[children[choice as usize % children.len()] as usize]
                } else {
                    choice % 8
                }
            })
            .collect();
        let walk = tree.walk(&posterior).unwrap();
        let accepted = walk.accepted();
        prop_assert_eq!(accepted[0], 0);
        for pair in accepted.windows(2) {
            let (from, to) = (pair[0] as usize, pair[1] as usize);
            prop_assert!(to < tree.num_nodes());
            prop_assert_eq!(tree.parent(to), Some(from));
            prop_assert_eq!(tree.tokens()[to], posterior[from]);
        }
        let last = *accepted.last().unwrap() as usize;
        prop_assert_eq!(walk.bonus_token(), posterior[last]);
        for &child in tree.children(last) {
            prop_assert_ne!(tree.tokens()[child as usize], walk.bonus_token());
        }
        prop_assert_eq!(walk.is_contiguous(), accepted.iter().enumerate().all(|(i, &n)| n as usize == i));
        if tree.is_chain() {
            prop_assert!(walk.is_contiguous());
        }
    }
}

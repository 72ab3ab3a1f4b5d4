//! The fuzz harness, shared by `fuzz/fuzz_targets/tree_builder.rs` and the corpus replay test.
//! Not part of the API.

use crate::{AcceptanceStats, DraftTopK, DraftTree, MAX_BUDGET, TreeBuilder, TreeError};

/// Reads fuzz bytes as numbers; zeros once the input runs out.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        let (&first, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        first
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
}

/// Log-probs with many exact ties, and the special values a masked vocabulary produces.
const PALETTE: [f32; 8] = [-0.0, -0.5, -0.5, -1.0, -2.25, -7.0, f32::NEG_INFINITY, f32::NAN];

/// Builds a tree from arbitrary bytes and panics if any invariant breaks.
pub fn tree_builder(data: &[u8]) {
    let mut bytes = Bytes(data);
    let depths = usize::from(bytes.u8() % 20);
    let k = usize::from(bytes.u8() % 24);
    let mut budget = usize::from(bytes.u16() % 600);
    let flags = bytes.u8();
    let root = bytes.u32();
    let vocab = 1 + u32::from(bytes.u8() % 64);
    if flags & 0x10 != 0 {
        budget = MAX_BUDGET + 1 + usize::from(bytes.u8());
    }

    let entries = depths * k;
    let tokens: Vec<u32> = (0..entries)
        .map(|i| {
            if flags & 1 != 0 {
                u32::from(bytes.u8()) % vocab
            } else {
                i as u32 % k as u32 + vocab
            }
        })
        .collect();
    let mut log_probs: Vec<f32> = (0..entries)
        .map(|_| {
            if flags & 2 != 0 {
                f32::from_bits(bytes.u32())
            } else {
                PALETTE[usize::from(bytes.u8() % 8)]
            }
        })
        .collect();
    if flags & 4 != 0 {
        for row in log_probs.chunks_mut(k.max(1)) {
            row.sort_by(|a, b| b.total_cmp(a));
        }
    }

    let token_slice = if flags & 8 != 0 && !tokens.is_empty() {
        &tokens[1..]
    } else {
        &tokens[..]
    };
    let draft = match DraftTopK::new(depths, k, token_slice, &log_probs) {
        Ok(draft) => draft,
        Err(error) => {
            assert!(matches!(error, TreeError::TableShape { .. }));
            assert_ne!(token_slice.len(), log_probs.len());
            return;
        }
    };

    let mut builder = TreeBuilder::new();
    let mut tree = DraftTree::new();
    match builder.build(root, &draft, budget, &mut tree) {
        Ok(()) => assert!(budget <= MAX_BUDGET),
        Err(error) => {
            assert!(matches!(error, TreeError::BudgetTooLarge { .. }));
            assert!(budget > MAX_BUDGET);
            return;
        }
    }
    check_tree(&tree, &draft, root, budget);

    // A rebuild into the used tree and builder gives the same tree.
    let first = tree.clone();
    builder.build(root, &draft, budget, &mut tree).unwrap();
    assert_eq!(tree, first);

    // The chain equals the builder restricted to rank 0.
    let rank0_tokens: Vec<u32> = tokens.iter().step_by(k.max(1)).copied().collect();
    let rank0_log_probs: Vec<f32> = log_probs.iter().step_by(k.max(1)).copied().collect();
    let rank0 = if k == 0 {
        DraftTopK::new(depths, 0, &[], &[]).unwrap()
    } else {
        DraftTopK::new(depths, 1, &rank0_tokens, &rank0_log_probs).unwrap()
    };
    let mut chain = DraftTree::new();
    builder.build_chain(root, &draft, budget, &mut chain).unwrap();
    builder.build(root, &rank0, budget, &mut tree).unwrap();
    assert_eq!(chain, tree);
    assert!(chain.is_chain());

    // Walk with a posterior that often follows a child.
    let posterior: Vec<u32> = (0..first.num_nodes())
        .map(|node| {
            let children = first.children(node);
            let pick = usize::from(bytes.u8());
            if pick % 4 != 0 && !children.is_empty() {
                first.tokens()[children[pick % children.len()] as usize]
            } else {
                u32::from(bytes.u8()) % (vocab + 24)
            }
        })
        .collect();
    let walk = first.walk(&posterior).unwrap();
    check_walk(&first, &posterior, walk.accepted(), walk.bonus_token());
    assert!(first.walk(&posterior[1..]).is_err());

    let mut stats = AcceptanceStats::new();
    stats.record_walk(&walk);
    assert_eq!(stats.rounds(), 1);
    assert_eq!(stats.accepted_tokens(), walk.acceptance_length() as u64);
}

/// The structural invariants of any built tree.
fn check_tree(tree: &DraftTree, draft: &DraftTopK<'_>, root: u32, budget: usize) {
    let k = draft.k().min(budget);
    let mut paths = 0usize;
    let mut level = 1usize;
    for _ in 0..draft.depths() {
        level = level.saturating_mul(k);
        paths = paths.saturating_add(level);
    }
    let nodes = tree.num_nodes();
    assert_eq!(tree.num_draft_nodes(), budget.min(paths));
    assert_eq!(tree.root_token(), root);
    assert_eq!((tree.depths()[0], tree.parents()[0]), (0, -1));
    assert_eq!(tree.words_per_row(), nodes.div_ceil(64));
    assert_eq!(tree.ancestor_words().len(), nodes * tree.words_per_row());
    let mut child_total = 0;
    for node in 1..nodes {
        let parent = tree.parent(node).unwrap();
        assert!(parent < node);
        let depth = tree.depths()[node];
        assert_eq!(depth, tree.depths()[parent] + 1);
        assert!(depth as usize <= draft.depths());
        let rank = tree.ranks()[node] as usize;
        assert!(rank < k);
        assert_eq!(draft.token(depth as usize, rank), Some(tree.tokens()[node]));
        assert!(tree.children(parent).contains(&(node as u32)));
        for word in 0..tree.words_per_row() {
            let own = if word == node / 64 { 1 << (node % 64) } else { 0 };
            assert_eq!(
                tree.ancestor_row(node)[word],
                tree.ancestor_row(parent)[word] | own
            );
        }
    }
    for node in 0..nodes {
        let children = tree.children(node);
        child_total += children.len();
        assert!(children.windows(2).all(|pair| pair[0] < pair[1]));
    }
    assert_eq!(child_total, nodes - 1);
    assert_eq!(tree.ancestor_row(0)[0], 1);
}

/// The walk is a root path that follows the posterior and stops where no child matches.
fn check_walk(tree: &DraftTree, posterior: &[u32], accepted: &[u32], bonus: u32) {
    assert_eq!(accepted.first(), Some(&0));
    for pair in accepted.windows(2) {
        let (from, to) = (pair[0] as usize, pair[1] as usize);
        assert_eq!(tree.parent(to), Some(from));
        assert_eq!(tree.tokens()[to], posterior[from]);
    }
    let last = *accepted.last().unwrap() as usize;
    assert_eq!(bonus, posterior[last]);
    assert!(
        tree.children(last)
            .iter()
            .all(|&child| tree.tokens()[child as usize] != bonus)
    );
}

//! The best-first heap that turns per-depth top-K log-probs into a draft tree.

use crate::{DraftTopK, DraftTree, TreeError};

/// Largest node budget a tree may have. Ancestor bit sets grow with the square of the node count
/// (16 384 nodes already take 34 MB), far beyond what one verify pass can use.
pub const MAX_BUDGET: usize = 16_384;

/// A frontier candidate: the `rank`-th token at `depth` below node `parent`, whose path score is
/// `score` (sum of log-probs along the path, in f64 as the reference's Python floats).
#[derive(Debug, Clone, Copy)]
struct Candidate {
    score: f64,
    parent: u32,
    depth: u32,
    rank: u32,
}

/// Builds draft trees by best-first search over path scores under a node budget.
///
/// The builder owns its heap, sized once and reused: building the next round's tree allocates
/// nothing once the heap and the [`DraftTree`] have reached the budget.
///
/// # Order and ties
///
/// Nodes come out exactly as in the reference's `build_ddtree_tree`, which keeps its frontier in
/// Python's `heapq` as tuples `(-score, ranks, …)`:
/// - the highest score pops first, scores being f64 sums of the f32 log-probs computed in the
///   same order as the reference (a sibling's score is `score - lp[rank] + lp[rank + 1]`, left
///   to right; a child's is `score + lp[0]`);
/// - equal scores pop in lexicographic order of the rank tuple (the ranks along the path from
///   depth 1), a prefix before its extensions;
/// - the heap is the same binary heap with the same sift steps, so even NaN scores (which
///   compare neither less nor greater, as in Python) leave the same order.
#[derive(Debug, Clone, Default)]
pub struct TreeBuilder {
    heap: Vec<Candidate>,
}

impl TreeBuilder {
    /// A builder with an empty heap; it grows on first use.
    pub fn new() -> Self {
        Self::default()
    }

    /// A builder whose heap already has room for a tree of `budget` nodes (clamped to
    /// [`MAX_BUDGET`]).
    pub fn with_capacity(budget: usize) -> Self {
        Self {
            heap: Vec::with_capacity(budget.min(MAX_BUDGET) + 2),
        }
    }

    /// Fills `tree` with the best `budget` nodes (root excluded) below `root_token`.
    ///
    /// Starting from the first candidate at depth 1, it repeatedly pops the best-scoring
    /// candidate, appends it as the next node, then offers that node's next sibling (if
    /// `rank + 1 < min(k, budget)`) and its first child (if it is not at the last depth). The
    /// tree ends up with `min(budget, Σ_d min(k, budget)^d)` drafted nodes; `budget = 0`,
    /// `k = 0` or zero depths give a root-only tree.
    ///
    /// # Errors
    /// [`TreeError::BudgetTooLarge`] if `budget > MAX_BUDGET`; `tree` is then left untouched.
    ///
    /// ```
    /// use ddtree::{DraftTopK, DraftTree, TreeBuilder};
    ///
    /// // Two depths, three candidates each.
    /// let tokens = [10, 11, 12, 20, 21, 22];
    /// let log_probs = [-0.2, -1.9, -3.0, -0.4, -1.2, -2.0];
    /// let draft = DraftTopK::new(2, 3, &tokens, &log_probs)?;
    ///
    /// let mut builder = TreeBuilder::with_capacity(3);
    /// let mut tree = DraftTree::with_capacity(3);
    /// builder.build(7, &draft, 3, &mut tree)?;
    /// // Scores: 10 → -0.2, 10·20 → -0.6, 10·21 → -1.4, 11 → -1.9: the best three are kept.
    /// assert_eq!(tree.tokens(), &[7, 10, 20, 21]);
    /// assert_eq!(tree.depths(), &[0, 1, 2, 2]);
    /// assert_eq!(tree.parents(), &[-1, 0, 1, 1]);
    /// # Ok::<(), ddtree::TreeError>(())
    /// ```
    pub fn build(
        &mut self,
        root_token: u32,
        draft: &DraftTopK<'_>,
        budget: usize,
        tree: &mut DraftTree,
    ) -> Result<(), TreeError> {
        check_budget(budget)?;
        tree.reset(root_token);
        tree.reserve(budget);
        // The reference draws min(budget, vocab) candidates per depth; no rank >= budget can be
        // reached, and skipping them keeps the heap identical to the reference's.
        let k = draft.k().min(budget) as u32;
        let depth_limit = draft.depths();
        if k == 0 || depth_limit == 0 {
            tree.finish();
            return Ok(());
        }

        self.heap.clear();
        self.heap.reserve(budget + 2);
        let (_, first_log_prob) = draft.at(1, 0);
        self.heap.push(Candidate {
            score: f64::from(first_log_prob),
            parent: 0,
            depth: 1,
            rank: 0,
        });

        while tree.num_draft_nodes() < budget {
            let Some(best) = heap_pop(&mut self.heap, tree) else {
                break;
            };
            let (token, log_prob) = draft.at(best.depth, best.rank);
            let node = tree.push_node(token, best.depth, best.parent, best.rank);

            if best.rank + 1 < k {
                let (_, next_log_prob) = draft.at(best.depth, best.rank + 1);
                let sibling = Candidate {
                    score: best.score - f64::from(log_prob) + f64::from(next_log_prob),
                    rank: best.rank + 1,
                    ..best
                };
                heap_push(&mut self.heap, sibling, tree);
            }
            if (best.depth as usize) < depth_limit {
                let (_, child_log_prob) = draft.at(best.depth + 1, 0);
                let child = Candidate {
                    score: best.score + f64::from(child_log_prob),
                    parent: node,
                    depth: best.depth + 1,
                    rank: 0,
                };
                heap_push(&mut self.heap, child, tree);
            }
        }
        tree.finish();
        Ok(())
    }

    /// Fills `tree` with a chain: the rank-0 token of each depth, `min(length, depths)` nodes
    /// below `root_token` (none if `k = 0`). This is plain DFlash (`length = block_size - 1`),
    /// and the same tree [`build`](Self::build) makes with `k = 1` and budget `length`.
    ///
    /// # Errors
    /// [`TreeError::BudgetTooLarge`] if `length > MAX_BUDGET`; `tree` is then left untouched.
    ///
    /// ```
    /// use ddtree::{DraftTopK, DraftTree, TreeBuilder};
    ///
    /// let tokens = [10, 11, 20, 21, 30, 31];
    /// let log_probs = [-0.2, -1.9, -0.4, -1.2, -0.1, -2.2];
    /// let draft = DraftTopK::new(3, 2, &tokens, &log_probs)?;
    ///
    /// let mut tree = DraftTree::new();
    /// TreeBuilder::new().build_chain(7, &draft, 3, &mut tree)?;
    /// assert_eq!(tree.tokens(), &[7, 10, 20, 30]);
    /// assert!(tree.is_chain());
    /// # Ok::<(), ddtree::TreeError>(())
    /// ```
    pub fn build_chain(
        &mut self,
        root_token: u32,
        draft: &DraftTopK<'_>,
        length: usize,
        tree: &mut DraftTree,
    ) -> Result<(), TreeError> {
        check_budget(length)?;
        tree.reset(root_token);
        let nodes = if draft.k() == 0 {
            0
        } else {
            length.min(draft.depths())
        };
        tree.reserve(nodes);
        for depth in 1..=nodes as u32 {
            let (token, _) = draft.at(depth, 0);
            tree.push_node(token, depth, depth - 1, 0);
        }
        tree.finish();
        Ok(())
    }
}

fn check_budget(budget: usize) -> Result<(), TreeError> {
    if budget > MAX_BUDGET {
        return Err(TreeError::BudgetTooLarge {
            budget,
            max: MAX_BUDGET,
        });
    }
    Ok(())
}

/// Python's `a < b` on the reference's heap tuples `(-score, ranks, …)`.
///
/// Tuples compare element by element, stopping at the first pair that is not `==`: NaN scores
/// are never `==`, and then `<` on them is false. Distinct candidates never have equal rank
/// tuples, so the comparison never reaches the later tuple elements.
#[inline(always)]
fn python_less(a: &Candidate, b: &Candidate, tree: &DraftTree) -> bool {
    if a.score != b.score {
        return -a.score < -b.score;
    }
    ranks_less(a, b, tree)
}

/// Lexicographic `<` of the rank tuples of two candidates, read off the tree by walking up
/// parents; a tuple that is a prefix of the other is smaller.
#[cold]
#[inline(never)]
fn ranks_less(a: &Candidate, b: &Candidate, tree: &DraftTree) -> bool {
    let (parents, ranks) = (tree.parents(), tree.ranks());
    // Each side is a "virtual node" (parent, rank) at some depth; moving up one depth turns it
    // into its parent node.
    let (mut parent_a, mut rank_a, mut depth_a) = (a.parent as usize, a.rank, a.depth);
    let (mut parent_b, mut rank_b, mut depth_b) = (b.parent as usize, b.rank, b.depth);
    while depth_a > depth_b {
        rank_a = ranks[parent_a];
        parent_a = parents[parent_a] as usize;
        depth_a -= 1;
    }
    while depth_b > depth_a {
        rank_b = ranks[parent_b];
        parent_b = parents[parent_b] as usize;
        depth_b -= 1;
    }
    if parent_a == parent_b && rank_a == rank_b {
        // One path extends the other. Never the case on the frontier (a path's extensions are
        // offered only once it is a node), but this is what Python answers.
        return a.depth < b.depth;
    }
    while parent_a != parent_b {
        rank_a = ranks[parent_a];
        parent_a = parents[parent_a] as usize;
        rank_b = ranks[parent_b];
        parent_b = parents[parent_b] as usize;
    }
    rank_a < rank_b
}

/// `heapq.heappush`: append, then sift the new item up towards the root.
fn heap_push(heap: &mut Vec<Candidate>, item: Candidate, tree: &DraftTree) {
    heap.push(item);
    let last = heap.len() - 1;
    sift_toward_root(heap, 0, last, tree);
}

/// `heapq.heappop`: move the last item to the root and sift it down.
fn heap_pop(heap: &mut Vec<Candidate>, tree: &DraftTree) -> Option<Candidate> {
    let last = heap.pop()?;
    if heap.is_empty() {
        return Some(last);
    }
    let best = std::mem::replace(&mut heap[0], last);
    sift_toward_leaves(heap, 0, tree);
    Some(best)
}

/// `heapq._siftdown`: move the item at `pos` up while it is less than its parent.
fn sift_toward_root(heap: &mut [Candidate], start: usize, mut pos: usize, tree: &DraftTree) {
    let item = heap[pos];
    while pos > start {
        let parent_pos = (pos - 1) >> 1;
        let parent = heap[parent_pos];
        if !python_less(&item, &parent, tree) {
            break;
        }
        heap[pos] = parent;
        pos = parent_pos;
    }
    heap[pos] = item;
}

/// `heapq._siftup`: bubble the smaller child up until a leaf is reached, put the item there, then
/// sift it back up (Floyd's variant; its exact steps matter when NaN breaks the order).
fn sift_toward_leaves(heap: &mut [Candidate], mut pos: usize, tree: &DraftTree) {
    let end = heap.len();
    let start = pos;
    let item = heap[pos];
    let mut child = 2 * pos + 1;
    while child < end {
        let right = child + 1;
        if right < end {
            // Arithmetic rather than a branch: which child is smaller is a coin flip.
            child += usize::from(!python_less(&heap[child], &heap[right], tree));
        }
        heap[pos] = heap[child];
        pos = child;
        child = 2 * pos + 1;
    }
    heap[pos] = item;
    sift_toward_root(heap, start, pos, tree);
}

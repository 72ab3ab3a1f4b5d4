//! The compiled draft tree: what verify consumes and what the walk follows.

/// A draft tree in node order, compiled for verification.
///
/// Node 0 is the root (the previous bonus token, depth 0); nodes `1..` are the drafted tokens in
/// the order the builder chose them, so a parent always precedes its children. Alongside tokens,
/// depths and parents the tree holds each node's children (for the walk) and its ancestor bit
/// set (for the attention mask). Every array is reused across rounds: filling a tree again
/// allocates nothing once its capacity is reached.
///
/// Trees are filled by [`TreeBuilder`](crate::TreeBuilder); a new tree is just the root, with
/// token 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DraftTree {
    tokens: Vec<u32>,
    depths: Vec<u32>,
    parents: Vec<i32>,
    ranks: Vec<u32>,
    child_offsets: Vec<u32>,
    child_ids: Vec<u32>,
    child_cursor: Vec<u32>,
    words_per_row: usize,
    ancestors: Vec<u64>,
}

impl Default for DraftTree {
    fn default() -> Self {
        Self::new()
    }
}

impl DraftTree {
    /// A root-only tree with room for nothing more yet.
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// A root-only tree with room for `budget` drafted nodes, so that filling it never allocates.
    /// Capacities above [`MAX_BUDGET`](crate::MAX_BUDGET) are clamped to it.
    pub fn with_capacity(budget: usize) -> Self {
        let nodes = budget.min(crate::MAX_BUDGET) + 1;
        let words = nodes.div_ceil(64);
        let mut tree = Self {
            tokens: Vec::with_capacity(nodes),
            depths: Vec::with_capacity(nodes),
            parents: Vec::with_capacity(nodes),
            ranks: Vec::with_capacity(nodes),
            child_offsets: Vec::with_capacity(nodes + 1),
            child_ids: Vec::with_capacity(nodes),
            child_cursor: Vec::with_capacity(nodes),
            words_per_row: 0,
            ancestors: Vec::with_capacity(nodes * words),
        };
        tree.reset(0);
        tree.finish();
        tree
    }

    /// Empties the tree down to a root holding `root_token`.
    pub(crate) fn reset(&mut self, root_token: u32) {
        self.tokens.clear();
        self.depths.clear();
        self.parents.clear();
        self.ranks.clear();
        self.tokens.push(root_token);
        self.depths.push(0);
        self.parents.push(-1);
        self.ranks.push(0);
    }

    /// Makes room for `budget` drafted nodes before a build.
    pub(crate) fn reserve(&mut self, budget: usize) {
        let nodes = budget + 1;
        let additional = nodes.saturating_sub(self.tokens.len());
        self.tokens.reserve(additional);
        self.depths.reserve(additional);
        self.parents.reserve(additional);
        self.ranks.reserve(additional);
    }

    /// Appends a drafted node and returns its id. `parent` must already be in the tree.
    pub(crate) fn push_node(&mut self, token: u32, depth: u32, parent: u32, rank: u32) -> u32 {
        let id = self.tokens.len() as u32;
        self.tokens.push(token);
        self.depths.push(depth);
        self.parents.push(parent as i32);
        self.ranks.push(rank);
        id
    }

    /// Derives the children lists and ancestor bit sets from the parents.
    pub(crate) fn finish(&mut self) {
        let nodes = self.tokens.len();

        // Children as one flat list (CSR), each node's children in node order.
        self.child_offsets.clear();
        self.child_offsets.resize(nodes + 1, 0);
        for &parent in &self.parents[1..] {
            self.child_offsets[parent as usize + 1] += 1;
        }
        for node in 0..nodes {
            self.child_offsets[node + 1] += self.child_offsets[node];
        }
        self.child_cursor.clear();
        self.child_cursor.extend_from_slice(&self.child_offsets[..nodes]);
        self.child_ids.clear();
        self.child_ids.resize(nodes - 1, 0);
        for node in 1..nodes {
            let parent = self.parents[node] as usize;
            let slot = &mut self.child_cursor[parent];
            self.child_ids[*slot as usize] = node as u32;
            *slot += 1;
        }

        // A node sees what its parent sees, plus itself. The parent's row has no bit above the
        // parent's own word, so only that many words are copied onto the zeroed row.
        let words = nodes.div_ceil(64);
        self.words_per_row = words;
        self.ancestors.clear();
        self.ancestors.resize(nodes * words, 0);
        self.ancestors[0] = 1;
        for node in 1..nodes {
            let parent = self.parents[node] as usize;
            let used = parent / 64 + 1;
            self.ancestors
                .copy_within(parent * words..parent * words + used, node * words);
            self.ancestors[node * words + node / 64] |= 1 << (node % 64);
        }
    }

    /// Nodes in the tree, root included: the number of query tokens verify runs (`B + 1` for a
    /// full tree).
    pub fn num_nodes(&self) -> usize {
        self.tokens.len()
    }

    /// Drafted nodes, root excluded (at most the budget).
    pub fn num_draft_nodes(&self) -> usize {
        self.tokens.len() - 1
    }

    /// The root's token (the previous round's bonus token).
    pub fn root_token(&self) -> u32 {
        self.tokens[0]
    }

    /// Token of every node, root first: the verify input ids.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Depth of every node; the root has depth 0 and a child is one deeper than its parent.
    pub fn depths(&self) -> &[u32] {
        &self.depths
    }

    /// Parent of every node, `-1` for the root (the reference's layout).
    pub fn parents(&self) -> &[i32] {
        &self.parents
    }

    /// Parent of `node`; `None` for the root or a node not in the tree.
    pub fn parent(&self, node: usize) -> Option<usize> {
        self.parents
            .get(node)
            .and_then(|&parent| usize::try_from(parent).ok())
    }

    /// Rank of every node among the top-K candidates of its depth (0 for the root).
    pub fn ranks(&self) -> &[u32] {
        &self.ranks
    }

    /// Children of `node`, in node order (empty for a leaf or a node not in the tree).
    pub fn children(&self, node: usize) -> &[u32] {
        match (self.child_offsets.get(node), self.child_offsets.get(node + 1)) {
            (Some(&start), Some(&end)) => &self.child_ids[start as usize..end as usize],
            _ => &[],
        }
    }

    /// Deepest node's depth (0 for a root-only tree).
    pub fn max_depth(&self) -> u32 {
        self.depths.iter().copied().max().unwrap_or(0)
    }

    /// `u64` words per row of [`ancestor_words`](Self::ancestor_words):
    /// `num_nodes().div_ceil(64)`.
    pub fn words_per_row(&self) -> usize {
        self.words_per_row
    }

    /// Ancestor bit sets, `num_nodes() × words_per_row()` words, row-major: bit `j` of row `i`
    /// (word `j / 64`, bit `j % 64`) is set iff node `j` is an ancestor of node `i` or `i` itself.
    /// This is the attention visibility inside the tree, in the layout GPU kernels consume.
    pub fn ancestor_words(&self) -> &[u64] {
        &self.ancestors
    }

    /// The ancestor bit set of `node` (empty for a node not in the tree).
    pub fn ancestor_row(&self, node: usize) -> &[u64] {
        let start = node.saturating_mul(self.words_per_row);
        self.ancestors
            .get(start..start + self.words_per_row)
            .unwrap_or(&[])
    }

    /// Whether `ancestor` is an ancestor of `node` or `node` itself, i.e. whether `node` may
    /// attend to `ancestor`.
    pub fn is_ancestor_or_self(&self, ancestor: usize, node: usize) -> bool {
        self.ancestor_row(node)
            .get(ancestor / 64)
            .is_some_and(|word| word >> (ancestor % 64) & 1 == 1)
    }

    /// Position id of every node, root first: `start + depth`, where `start` is the number of
    /// committed tokens (the root's position). Saturates instead of overflowing.
    pub fn positions(&self, start: usize) -> impl ExactSizeIterator<Item = usize> + '_ {
        self.depths
            .iter()
            .map(move |&depth| start.saturating_add(depth as usize))
    }

    /// Whether every node's parent is the node just before it (a plain DFlash chain, or a
    /// root-only tree). Then any accepted path is `0, 1, 2, …` and needs no KV move.
    pub fn is_chain(&self) -> bool {
        self.parents
            .iter()
            .enumerate()
            .skip(1)
            .all(|(node, &parent)| parent as usize + 1 == node)
    }
}

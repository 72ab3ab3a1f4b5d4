//! The walk: which drafted tokens the target accepts.

use crate::{DraftTree, TreeError};

/// The outcome of one round's walk: the accepted path and the next bonus token.
///
/// Reuse one `Walk` across rounds with [`DraftTree::walk_into`] to avoid allocating.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Walk {
    accepted: Vec<u32>,
    bonus_token: u32,
}

impl Walk {
    /// An empty walk, to be filled by [`DraftTree::walk_into`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Accepted node ids in path order, starting with the root (0). Their tokens are committed
    /// and their KV rows kept.
    pub fn accepted(&self) -> &[u32] {
        &self.accepted
    }

    /// The target's token after the last accepted node: the next round's root.
    pub fn bonus_token(&self) -> u32 {
        self.bonus_token
    }

    /// τ: tokens committed by the round, root included (at least 1 after a walk).
    pub fn acceptance_length(&self) -> usize {
        self.accepted.len()
    }

    /// Whether the accepted ids are `0, 1, 2, …`: their KV rows are already where they belong
    /// and the commit needs no move.
    pub fn is_contiguous(&self) -> bool {
        self.accepted
            .iter()
            .enumerate()
            .all(|(index, &node)| node as usize == index)
    }
}

impl DraftTree {
    /// Walks the tree along the target's choices.
    ///
    /// `posterior[i]` is the target's token after node `i` (its argmax for greedy decoding, or a
    /// sample from its distribution at temperature > 0 — the walk is the same). Starting at the
    /// root, while the posterior at the current node equals the token of one of its children,
    /// move to that child. The accepted path is every node visited; the bonus token is the
    /// posterior at the last one. If two children carry the same token (never the case for a
    /// top-K table, whose tokens per depth are distinct), the later one is taken, as the
    /// reference's token → child map does.
    ///
    /// # Errors
    /// [`TreeError::PosteriorLength`] unless `posterior` has one token per node.
    ///
    /// ```
    /// use ddtree::{DraftTopK, DraftTree, TreeBuilder};
    ///
    /// let tokens = [10, 11, 20, 21];
    /// let log_probs = [-0.1, -2.0, -0.5, -1.0];
    /// let draft = DraftTopK::new(2, 2, &tokens, &log_probs)?;
    /// let mut tree = DraftTree::new();
    /// TreeBuilder::new().build(7, &draft, 3, &mut tree)?;
    /// assert_eq!(tree.tokens(), &[7, 10, 20, 21]); // 20 and 21 are both children of 10
    ///
    /// // The target continues 7 → 10 → 21 → 99.
    /// let walk = tree.walk(&[10, 21, 5, 99])?;
    /// assert_eq!(walk.accepted(), &[0, 1, 3]);
    /// assert_eq!(walk.bonus_token(), 99);
    /// assert!(!walk.is_contiguous());
    /// # Ok::<(), ddtree::TreeError>(())
    /// ```
    pub fn walk(&self, posterior: &[u32]) -> Result<Walk, TreeError> {
        let mut walk = Walk::new();
        self.walk_into(posterior, &mut walk)?;
        Ok(walk)
    }

    /// [`walk`](Self::walk) into a reused [`Walk`]. On error `walk` is left untouched.
    pub fn walk_into(&self, posterior: &[u32], walk: &mut Walk) -> Result<(), TreeError> {
        if posterior.len() != self.num_nodes() {
            return Err(TreeError::PosteriorLength {
                got: posterior.len(),
                expected: self.num_nodes(),
            });
        }
        let tokens = self.tokens();
        walk.accepted.clear();
        let mut current = 0usize;
        walk.accepted.push(0);
        // Depth grows by one per step, so this ends within max_depth steps.
        while let Some(&child) = self
            .children(current)
            .iter()
            .rev()
            .find(|&&child| tokens[child as usize] == posterior[current])
        {
            current = child as usize;
            walk.accepted.push(child);
        }
        walk.bonus_token = posterior[current];
        Ok(())
    }
}

//! The DDTree algorithm, with no tensors: build a draft tree, compile it, walk it.
//!
//! One speculative round, as in the reference `ddtree.py`:
//!
//! 1. **Draft** (elsewhere): the DFlash drafter proposes `block_size - 1` positions at once; the
//!    caller keeps each position's top-K tokens and log-probs as a [`DraftTopK`] table.
//! 2. **Build**: [`TreeBuilder::build`] grows a tree best-first — a candidate's score is the sum
//!    of log-probs along its path; the best candidate becomes the next node and offers its next
//!    sibling and its first child — until the node budget `B` is spent. Nodes are numbered in
//!    that order, root (the previous bonus token) first, exactly as the reference numbers them.
//!    [`TreeBuilder::build_chain`] makes the plain DFlash chain instead.
//! 3. **Compile**: the [`DraftTree`] holds what verify needs — the tokens, the positions
//!    (`start + depth`) and each node's ancestor bit set (a node sees the committed prefix, its
//!    ancestors and itself; never a dense float mask).
//! 4. **Verify** (elsewhere): one target forward over the `B + 1` tree tokens gives a posterior
//!    token at every node (argmax, or a sample at temperature > 0).
//! 5. **Walk**: [`DraftTree::walk`] follows the posterior from the root while it names a child;
//!    the visited nodes are accepted and the posterior at the last one is the next bonus token.
//!    The output is exactly the target's own.
//! 6. **Commit** (elsewhere): keep the accepted nodes' KV rows — no move when
//!    [`Walk::is_contiguous`] — and record the round in [`AcceptanceStats`].
//!
//! ```
//! use ddtree::{AcceptanceStats, DraftTopK, DraftTree, TreeBuilder, Walk};
//!
//! // Drafter output for block_size 4: three depths, top-2 candidates each.
//! let tokens = [10, 11, /**/ 20, 21, /**/ 30, 31];
//! let log_probs = [-0.1, -2.4, /**/ -0.5, -1.5, /**/ -0.2, -3.0];
//! let draft = DraftTopK::new(3, 2, &tokens, &log_probs)?;
//!
//! // Build: the 4 best paths below the root token 5 (buffers reused every round).
//! let mut builder = TreeBuilder::with_capacity(4);
//! let mut tree = DraftTree::with_capacity(4);
//! builder.build(5, &draft, 4, &mut tree)?;
//! // Path scores: 10 → -0.1, 10·20 → -0.6, 10·20·30 → -0.8, 10·21 → -1.6 (11 → -2.4 misses out).
//! assert_eq!(tree.tokens(), &[5, 10, 20, 30, 21]);
//! assert_eq!(tree.parents(), &[-1, 0, 1, 2, 1]);
//!
//! // Compile: positions after 100 committed tokens, and who sees whom.
//! assert_eq!(tree.positions(100).collect::<Vec<_>>(), [100, 101, 102, 103, 102]);
//! assert_eq!(tree.ancestor_row(4), &[0b10011]); // node 4 sees the root, node 1 and itself
//!
//! // Walk: the target continues 5 → 10 → 21 → 99.
//! let posterior = [10, 21, 7, 8, 99];
//! let mut walk = Walk::new();
//! tree.walk_into(&posterior, &mut walk)?;
//! assert_eq!(walk.accepted(), &[0, 1, 4]);
//! assert_eq!(walk.bonus_token(), 99);
//!
//! let mut stats = AcceptanceStats::new();
//! stats.record_walk(&walk);
//! assert_eq!(stats.mean_acceptance_length(), 3.0);
//! # Ok::<(), ddtree::TreeError>(())
//! ```

#![warn(missing_docs)]

mod builder;
mod error;
mod stats;
mod topk;
mod tree;
mod walk;

#[doc(hidden)]
pub mod fuzzing;

pub use builder::{MAX_BUDGET, TreeBuilder};
pub use error::TreeError;
pub use stats::AcceptanceStats;
pub use topk::DraftTopK;
pub use tree::DraftTree;
pub use walk::Walk;

//! The DFlash block-diffusion drafter for DDTree, in the z-lab checkpoint format
//! (`fc`, `hidden_norm`, `layers.N.*`, `norm`; no embeddings, no LM head — it borrows the
//! target's, see [`TargetHead`]).
//!
//! [`DFlash::draft_logits`] appends the target's features of newly committed tokens to the
//! context and drafts one block; the [`ddtree_engine::Drafter`] implementation turns the logits
//! into the per-depth top-K log-probs the tree builder reads.

mod dflash;
mod drafter;
mod error;

pub use dflash::{DFlash, TargetHead};
pub use error::{Error, Result};

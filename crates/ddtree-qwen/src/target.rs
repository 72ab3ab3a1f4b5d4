//! The speculative loop's view of a target: [`ddtree_engine::Target`] for every model here.

use burn_tensor::Tensor;
use ddtree::DraftTree;
use ddtree_engine::{ModelError, Picker, Target};
use ddtree_kernels::{AncestorBits, KernelOps, host_f32, host_ids};

use crate::{ForwardOutput, Qwen3, Qwen35, TreeBlock};

/// Posterior tokens of every row of `out`: the argmax on the device when greedy, else the
/// picker's draw from each row of logits read back to the host.
fn pick_rows<B: KernelOps>(out: &ForwardOutput<B>, picker: &mut Picker<'_>, posterior: &mut Vec<u32>) {
    posterior.clear();
    if picker.is_greedy() {
        posterior.extend(host_ids(B::argmax(out.logits.clone())));
        return;
    }
    let vocab = out.logits.dims()[1];
    let logits = host_f32(out.logits.clone());
    posterior.extend(logits.chunks_exact(vocab).map(|row| picker.pick(row)));
}

/// The first new token, picked from the last row of a prefill.
fn pick_last<B: KernelOps>(out: &ForwardOutput<B>, picker: &mut Picker<'_>) -> u32 {
    let [n, vocab] = out.logits.dims();
    let last = ForwardOutput {
        logits: out.logits.clone().slice([n - 1..n, 0..vocab]),
        hidden: out.hidden.clone(),
        features: None,
    };
    let mut first = Vec::with_capacity(1);
    pick_rows(&last, picker, &mut first);
    first[0]
}

/// The engine's tree as the models' [`TreeBlock`].
fn tree_block(tree: &DraftTree) -> Result<TreeBlock<'_>, ModelError> {
    let ancestors = AncestorBits::new(tree.ancestor_words(), tree.words_per_row())
        .ok_or("the draft tree's ancestor rows are malformed")?;
    Ok(TreeBlock {
        tokens: tree.tokens(),
        depths: tree.depths(),
        ancestors,
    })
}

/// The same adapter for every model: they share the method names it calls.
macro_rules! impl_target {
    ($($model:ident),+) => {$(
        impl<B: KernelOps> Target for $model<B> {
            type Features = Option<Tensor<B, 2>>;

            fn vocab_size(&self) -> usize {
                self.config().vocab_size
            }

            fn max_context(&self) -> usize {
                $model::max_context(self)
            }

            fn reset(&mut self) {
                $model::reset(self);
            }

            fn prefill(
                &mut self,
                prompt: &[u32],
                picker: &mut Picker<'_>,
            ) -> Result<(u32, Self::Features), ModelError> {
                let out = $model::prefill(self, prompt)?;
                Ok((pick_last(&out, picker), out.features))
            }

            fn verify(
                &mut self,
                tree: &DraftTree,
                picker: &mut Picker<'_>,
                posterior: &mut Vec<u32>,
            ) -> Result<Self::Features, ModelError> {
                let out = $model::verify(self, &tree_block(tree)?)?;
                pick_rows(&out, picker, posterior);
                Ok(out.features)
            }

            fn commit(&mut self, accepted: &[usize]) -> Result<(), ModelError> {
                Ok($model::commit(self, accepted)?)
            }
        }
    )+};
}

impl_target!(Qwen3, Qwen35);

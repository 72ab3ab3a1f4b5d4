//! The speculative loop's view of a target: [`ddtree_engine::Target`] for every model here.

use burn_tensor::Tensor;
use ddtree::DraftTree;
use ddtree_engine::{ModelError, Picker, Target};
use ddtree_kernels::{AncestorBits, KernelOps, host_f32, host_ids};

use crate::{ForwardOutput, Qwen3, TreeBlock};

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

impl<B: KernelOps> Target for Qwen3<B> {
    type Features = Option<Tensor<B, 2>>;

    fn vocab_size(&self) -> usize {
        self.config().vocab_size
    }

    fn max_context(&self) -> usize {
        Qwen3::max_context(self)
    }

    fn reset(&mut self) {
        self.truncate(0);
    }

    fn prefill(
        &mut self,
        prompt: &[u32],
        picker: &mut Picker<'_>,
    ) -> Result<(u32, Self::Features), ModelError> {
        let out = Qwen3::prefill(self, prompt)?;
        let [n, vocab] = out.logits.dims();
        let last = ForwardOutput {
            logits: out.logits.clone().slice([n - 1..n, 0..vocab]),
            hidden: out.hidden.clone(),
            features: None,
        };
        let mut first = Vec::with_capacity(1);
        pick_rows(&last, picker, &mut first);
        Ok((first[0], out.features))
    }

    fn verify(
        &mut self,
        tree: &DraftTree,
        picker: &mut Picker<'_>,
        posterior: &mut Vec<u32>,
    ) -> Result<Self::Features, ModelError> {
        let ancestors = AncestorBits::new(tree.ancestor_words(), tree.words_per_row())
            .ok_or("the draft tree's ancestor rows are malformed")?;
        let block = TreeBlock {
            tokens: tree.tokens(),
            depths: tree.depths(),
            ancestors,
        };
        let out = Qwen3::verify(self, &block)?;
        pick_rows(&out, picker, posterior);
        Ok(out.features)
    }

    fn commit(&mut self, accepted: &[usize]) -> Result<(), ModelError> {
        Ok(Qwen3::commit(self, accepted)?)
    }
}

//! The speculative loop's view of the drafter: [`ddtree_engine::Drafter`] over the target's
//! features.

use burn_tensor::Tensor;
use ddtree_engine::{DraftOutput, Drafter, ModelError};
use ddtree_kernels::{KernelOps, index_tensor};

use crate::DFlash;
use crate::error::Error;

/// `rows` of `features`, without a copy when they are all of them in order.
fn select_rows<B: KernelOps>(features: &Tensor<B, 2>, rows: &[usize]) -> Tensor<B, 2> {
    let [n, width] = features.dims();
    if rows.len() == n && rows.iter().enumerate().all(|(i, &r)| i == r) {
        return features.clone();
    }
    if let Some(&first) = rows.first()
        && rows.iter().enumerate().all(|(i, &r)| r == first + i)
    {
        return features.clone().slice([first..first + rows.len(), 0..width]);
    }
    features
        .clone()
        .select(0, index_tensor(rows.iter().copied(), &features.device()))
}

impl<B: KernelOps> Drafter<Option<Tensor<B, 2>>> for DFlash<B> {
    fn block_size(&self) -> usize {
        DFlash::block_size(self)
    }

    fn reset(&mut self) {
        DFlash::reset(self);
    }

    fn draft(
        &mut self,
        features: &Option<Tensor<B, 2>>,
        rows: &[usize],
        bonus: u32,
        k: usize,
        out: &mut DraftOutput,
    ) -> Result<(), ModelError> {
        let features = features.as_ref().ok_or(Error::MissingFeatures)?;
        let new_rows = (!rows.is_empty()).then(|| select_rows(features, rows));
        let logits = self.draft_logits(new_rows, bonus)?;
        let [depths, vocab] = logits.dims();
        let k = k.min(vocab);
        let (log_probs, ids) = B::top_k_log_softmax(logits, k);
        out.depths = depths;
        out.k = k;
        (out.log_probs, out.tokens) = B::host_values_and_ids(log_probs, ids);
        Ok(())
    }
}

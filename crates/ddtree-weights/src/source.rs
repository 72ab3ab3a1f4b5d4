//! Where model loaders take their tensors from: a [`Checkpoint`], or [`RandomWeights`] made on
//! the device.

use std::path::PathBuf;

use burn_tensor::backend::Backend;
use burn_tensor::{Distribution, Tensor};

use crate::checkpoint::{Checkpoint, normalise_name};
use crate::error::{Error, Result};

/// A source of named tensors for the model loaders (`Qwen3::load`, `Qwen35::load`,
/// `DFlash::load`).
///
/// Names are normalised as [`Checkpoint`] normalises them (`layers.0.mlp.up_proj.weight`, not
/// `model.layers.0.mlp.up_proj.weight`).
pub trait TensorSource {
    /// The tensor `name` with exactly `shape`, on `device`, in the device's default float dtype
    /// (the backend's float type unless the application changed it).
    ///
    /// Errors when the source does not hold `name` ([`Error::MissingTensor`]), holds it with
    /// another shape ([`Error::ShapeMismatch`]), or when `D` is 0 ([`Error::ZeroRank`]).
    fn tensor<B: Backend, const D: usize>(
        &self,
        name: &str,
        shape: [usize; D],
        device: &B::Device,
    ) -> Result<Tensor<B, D>>;

    /// Whether the source holds `name` (for optional tensors such as an untied
    /// `lm_head.weight`).
    fn contains(&self, name: &str) -> bool;
}

impl TensorSource for Checkpoint {
    fn tensor<B: Backend, const D: usize>(
        &self,
        name: &str,
        shape: [usize; D],
        device: &B::Device,
    ) -> Result<Tensor<B, D>> {
        Checkpoint::tensor(self, name, shape, device)
    }

    fn contains(&self, name: &str) -> bool {
        Checkpoint::contains(self, name)
    }
}

/// Random weights of any shape, made directly on the device: **for benchmarks and tests of
/// shapes, not for outputs**. A model loaded from them runs every kernel at the real sizes
/// (e.g. a 16 GB Qwen3-8B in bf16 on a GPU, built in seconds with no checkpoint on disk and
/// nothing passing through the host), but its tokens mean nothing.
///
/// What [`TensorSource::tensor`] returns, by rank and name:
///
/// * **rank ≥ 2** (projections, embeddings, LM head, the `[C, 1, K]` conv weights): samples of
///   `Normal(0, std)`, drawn on the device by `Tensor::random`. Seed them with the backend's
///   `B::seed` for reproducible values.
/// * **rank 1**, a deterministic rule:
///   * names ending in `norm.weight` (RMSNorm weights, q/k norms, the Gated DeltaNet's gated
///     norm, the DFlash `hidden_norm`): ones. A Qwen3.5/3.6 loader adds one to its zero-centred
///     norms, so there they scale by 2 — harmless for shapes and speed.
///   * `…A_log`: zeros, i.e. a decay rate `A = exp(A_log) = 1`, inside transformers' initial
///     range `A ~ U(0, 16)`, so the gate `g = −A · softplus(a + dt_bias)` is a moderate decay.
///   * `…dt_bias`: ones (transformers' initial value).
///   * anything else: zeros.
///
/// [`TensorSource::contains`] answers as a checkpoint of the architecture would: every
/// normalised name is held, except `lm_head.weight` when `tied_embeddings` (asking for it is then
/// an [`Error::MissingTensor`], as with a real tied checkpoint). Names that are not normalised
/// (`model.…`, `model.visual.…`, `mtp.…`) are never held.
///
/// ```
/// use burn_ndarray::NdArray;
/// use ddtree_weights::{RandomWeights, TensorSource};
///
/// type B = NdArray<f32>;
/// let device = Default::default();
/// let source = RandomWeights { std: 0.02, tied_embeddings: true };
/// let w = source.tensor::<B, 2>("layers.0.mlp.up_proj.weight", [128, 64], &device)?;
/// assert_eq!(w.dims(), [128, 64]);
/// let norm = source.tensor::<B, 1>("norm.weight", [64], &device)?;
/// assert_eq!(norm.into_data().to_vec::<f32>().unwrap(), vec![1.0; 64]);
/// assert!(!source.contains("lm_head.weight"));
/// # Ok::<(), ddtree_weights::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RandomWeights {
    /// Standard deviation of the matrices' entries (transformers initialises with the config's
    /// `initializer_range`, 0.02 for Qwen).
    pub std: f64,
    /// Whether the LM head is the embedding (the config's `tie_word_embeddings`): then there is
    /// no `lm_head.weight`.
    pub tied_embeddings: bool,
}

impl Default for RandomWeights {
    /// `std` 0.02, untied.
    fn default() -> Self {
        Self {
            std: 0.02,
            tied_embeddings: false,
        }
    }
}

impl RandomWeights {
    /// Where error messages say the tensors come from.
    fn origin() -> PathBuf {
        PathBuf::from("<random weights>")
    }
}

impl TensorSource for RandomWeights {
    fn tensor<B: Backend, const D: usize>(
        &self,
        name: &str,
        shape: [usize; D],
        device: &B::Device,
    ) -> Result<Tensor<B, D>> {
        if !self.contains(name) {
            let hint = if normalise_name(name) != Some(name) {
                " (names are normalised, as in a checkpoint)".to_string()
            } else {
                " (tied embeddings: the LM head is the embedding)".to_string()
            };
            return Err(Error::MissingTensor {
                path: Self::origin(),
                tensor: name.to_string(),
                hint,
            });
        }
        if D == 0 {
            return Err(Error::ZeroRank {
                path: Self::origin(),
                tensor: name.to_string(),
            });
        }
        let vector = D == 1;
        Ok(
            if vector && (name.ends_with("norm.weight") || name.ends_with("dt_bias")) {
                Tensor::ones(shape, device)
            } else if vector {
                // `A_log` (A = 1) and every other vector.
                Tensor::zeros(shape, device)
            } else {
                Tensor::random(shape, Distribution::Normal(0.0, self.std), device)
            },
        )
    }

    fn contains(&self, name: &str) -> bool {
        normalise_name(name) == Some(name) && !(self.tied_embeddings && name == "lm_head.weight")
    }
}

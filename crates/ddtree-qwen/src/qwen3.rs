//! The Qwen3 dense target (`model_type: qwen3`).
//!
//! Same cast as every model file: the config (from `ddtree-weights`), the mixer of each decoder
//! layer (here always attention), the model with `load` and the forward variants the speculative
//! loop needs. The decoder layer and the stack around it are shared (`decoder.rs`).

use burn_tensor::Tensor;
use ddtree_kernels::KernelOps;
use ddtree_kernels::nn::{Attention, HeadShape};
use ddtree_weights::{Checkpoint, Qwen3Config, TensorSource};

use crate::decoder::{Stack, StackSpec, Weights};
use crate::error::{Error, Result};
use crate::{ForwardOutput, LoadOptions, TreeBlock};

/// A Qwen3 dense model with its preallocated KV cache.
///
/// ```no_run
/// use burn_ndarray::NdArray;
/// use ddtree_qwen::{LoadOptions, Qwen3};
///
/// let device = Default::default();
/// let mut model = Qwen3::<NdArray<f32>>::load_dir("fixtures/qwen3-tiny-tied", LoadOptions::default(), &device)?;
/// let out = model.prefill(&[1, 2, 3])?;
/// let next = model.argmax_last(&out);
/// let out = model.decode(next)?;
/// # let _ = out;
/// # Ok::<(), ddtree_qwen::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Qwen3<B: KernelOps> {
    config: Qwen3Config,
    stack: Stack<B, Attention<B>>,
}

impl<B: KernelOps> Qwen3<B> {
    /// Loads `config.json` and the safetensors of a checkpoint directory.
    pub fn load_dir(
        dir: impl AsRef<std::path::Path>,
        options: LoadOptions,
        device: &B::Device,
    ) -> Result<Self> {
        let dir = dir.as_ref();
        let config = Qwen3Config::from_file(dir.join("config.json"))?;
        let ckpt = Checkpoint::open(dir)?;
        Self::load(config, &ckpt, options, device)
    }

    /// Builds the model from a parsed config and a tensor source: an opened
    /// [`Checkpoint`], or [`ddtree_weights::RandomWeights`] (benchmarks of real shapes; their
    /// `tied_embeddings` should be the config's `tie_word_embeddings`).
    pub fn load<S: TensorSource>(
        config: Qwen3Config,
        source: &S,
        options: LoadOptions,
        device: &B::Device,
    ) -> Result<Self> {
        if config.attention_bias {
            return Err(Error::Unsupported(
                "attention_bias = true (Qwen3 checkpoints have no attention biases)".into(),
            ));
        }
        if config.hidden_act != "silu" {
            return Err(Error::Unsupported(format!(
                "hidden_act {:?} (Qwen3 uses \"silu\")",
                config.hidden_act
            )));
        }
        let w = Weights {
            source,
            device,
            eps: config.rms_norm_eps,
            zero_centred: false,
        };
        let shape = HeadShape {
            heads: config.num_attention_heads,
            kv_heads: config.num_key_value_heads,
            head_dim: config.head_dim,
        };
        let spec = StackSpec {
            vocab: config.vocab_size,
            hidden: config.hidden_size,
            intermediate: config.intermediate_size,
            layers: config.num_hidden_layers,
            tie_word_embeddings: config.tie_word_embeddings,
            max_position_embeddings: config.max_position_embeddings,
            rope: config.rope.inv_freq(config.head_dim)?,
            recurrent: false,
        };
        let hidden = config.hidden_size;
        let stack = Stack::load(&w, spec, options, |layer, capacity| {
            w.attention(
                &format!("layers.{layer}.self_attn"),
                hidden,
                shape,
                capacity,
                false,
            )
        })?;
        Ok(Self { config, stack })
    }

    /// The parsed config.
    pub fn config(&self) -> &Qwen3Config {
        &self.config
    }

    /// Tokens committed to the cache.
    pub fn committed_len(&self) -> usize {
        self.stack.committed_len()
    }

    /// The maximum context (cache rows preallocated).
    pub fn max_context(&self) -> usize {
        self.stack.max_context()
    }

    /// Forgets every committed token after the first `len`.
    pub fn truncate(&mut self, len: usize) {
        self.stack.truncate(len);
    }

    /// Forgets every committed token (a new sequence).
    pub fn reset(&mut self) {
        self.stack.reset();
    }

    /// Runs `tokens` causally after the committed prefix and commits them. Returns logits and
    /// captured features for every token.
    pub fn prefill(&mut self, tokens: &[u32]) -> Result<ForwardOutput<B>> {
        self.stack.prefill(tokens)
    }

    /// One-token decode: [`Self::prefill`] of a single token.
    pub fn decode(&mut self, token: u32) -> Result<ForwardOutput<B>> {
        self.prefill(&[token])
    }

    /// Tree verify: one forward over the tree's nodes (root first) at positions
    /// `committed + depth`, each node seeing the committed prefix, its ancestors and itself.
    /// The nodes' keys and values are written after the prefix but not committed: call
    /// [`Self::commit`] with the accepted path.
    pub fn verify(&mut self, tree: &TreeBlock<'_>) -> Result<ForwardOutput<B>> {
        self.stack.verify(tree)
    }

    /// Commits the accepted nodes (strictly increasing ids into the last verified block, root
    /// first): their cache rows move to contiguous positions after the prefix.
    pub fn commit(&mut self, accepted: &[usize]) -> Result<()> {
        self.stack.commit(accepted)
    }

    /// Token embeddings `[n, hidden]` (the drafter embeds its block with these).
    pub fn embed(&self, tokens: &[u32]) -> Result<Tensor<B, 2>> {
        self.stack.embed(tokens)
    }

    /// Logits `[n, vocab]` of final hidden states `[n, hidden]`.
    pub fn lm_head(&self, hidden: Tensor<B, 2>) -> Tensor<B, 2> {
        self.stack.lm_head(hidden)
    }

    /// The `[vocab, hidden]` token embedding (a handle; the DFlash drafter embeds with it).
    pub fn embed_tokens_weight(&self) -> Tensor<B, 2> {
        self.stack.embed_tokens_weight()
    }

    /// The `[vocab, hidden]` LM head weight, the embedding when tied (a handle; the DFlash drafter
    /// scores with it).
    pub fn lm_head_weight(&self) -> Tensor<B, 2> {
        self.stack.lm_head_weight()
    }

    /// Greedy next token after the last row of `out`.
    pub fn argmax_last(&self, out: &ForwardOutput<B>) -> u32 {
        self.stack.argmax_last(out)
    }
}

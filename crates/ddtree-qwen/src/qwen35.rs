//! The Qwen3.5 / Qwen3.6 hybrid target (`model_type: qwen3_5` with its `text_config`, or
//! `qwen3_5_text`), and dense Qwen3-Next checkpoints (`qwen3_next` without experts).
//!
//! Same cast as every model file: the config (from `ddtree-weights`), the mixer of each decoder
//! layer, the model with `load` and the forward variants the speculative loop needs. The layers
//! are `linear_attention` (Gated DeltaNet, `gated_delta_net.rs`) or `full_attention` (the shared
//! attention with its sigmoid output gate and partial NeoX RoPE), around the shared decoder layer
//! and stack. Every norm outside the GDN layers is zero-centred (`1 + w`); the one is added at
//! load time. Text-only positions make the interleaved M-RoPE the plain 1-D rotary embedding.

use burn_tensor::Tensor;
use ddtree_kernels::KernelOps;
use ddtree_kernels::nn::{Attention, HeadShape, KvCache, Linear};
use ddtree_weights::{Checkpoint, LayerType, Qwen35Config, TensorSource};

use crate::decoder::{Block, Mixer, Stack, StackSpec, Weights};
use crate::error::{Error, Result};
use crate::gated_delta_net::GatedDeltaNet;
use crate::{ForwardOutput, LoadOptions, TreeBlock};

/// The token mixer of one hybrid layer.
#[derive(Clone, Debug)]
enum HybridMixer<B: KernelOps> {
    Attention(Attention<B>),
    DeltaNet(GatedDeltaNet<B>),
}

impl<B: KernelOps> Mixer<B> for HybridMixer<B> {
    fn mix(&mut self, x: Tensor<B, 2>, block: &Block<'_, B>) -> Tensor<B, 2> {
        match self {
            Self::Attention(m) => Mixer::mix(m, x, block),
            Self::DeltaNet(m) => m.mix(x, block),
        }
    }

    fn out_proj(&self) -> &Linear<B> {
        match self {
            Self::Attention(m) => Mixer::out_proj(m),
            Self::DeltaNet(m) => m.out_proj(),
        }
    }

    fn kv_cache(&mut self) -> Option<&mut KvCache<B>> {
        match self {
            Self::Attention(m) => Mixer::kv_cache(m),
            Self::DeltaNet(m) => m.kv_cache(),
        }
    }

    fn commit(&mut self, at: usize, accepted: &[usize]) {
        match self {
            Self::Attention(m) => Mixer::commit(m, at, accepted),
            Self::DeltaNet(m) => m.commit(at, accepted),
        }
    }

    fn reset(&mut self) {
        match self {
            Self::Attention(m) => Mixer::reset(m),
            Self::DeltaNet(m) => m.reset(),
        }
    }
}

/// A Qwen3.5/3.6 hybrid model with its caches: a KV cache per attention layer, a recurrent
/// state and conv rows per Gated DeltaNet layer.
///
/// Tree verify gives every node the recurrent state and conv window of its own path and leaves
/// the committed state untouched; [`Self::commit`] replays the accepted path. The recurrent
/// state cannot be rewound, so there is no `truncate`: [`Self::reset`] starts over, and a clone
/// is a snapshot.
///
/// ```no_run
/// use burn_ndarray::NdArray;
/// use ddtree_qwen::{LoadOptions, Qwen35};
///
/// let device = Default::default();
/// let options = LoadOptions { max_context: Some(4096), capture_layers: vec![1, 16, 31, 46, 61] };
/// let mut model = Qwen35::<NdArray<f32>>::load_dir("/models/Qwen3.6-27B", options, &device)?;
/// let out = model.prefill(&[1, 2, 3])?;
/// let next = model.argmax_last(&out);
/// let out = model.decode(next)?;
/// # let _ = out;
/// # Ok::<(), ddtree_qwen::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Qwen35<B: KernelOps> {
    config: Qwen35Config,
    stack: Stack<B, HybridMixer<B>>,
}

impl<B: KernelOps> Qwen35<B> {
    /// Loads `config.json` and the safetensors of a checkpoint directory.
    pub fn load_dir(
        dir: impl AsRef<std::path::Path>,
        options: LoadOptions,
        device: &B::Device,
    ) -> Result<Self> {
        let dir = dir.as_ref();
        let config = Qwen35Config::from_file(dir.join("config.json"))?;
        let ckpt = Checkpoint::open(dir)?;
        Self::load(config, &ckpt, options, device)
    }

    /// Builds the model from a parsed config and a tensor source: an opened [`Checkpoint`]
    /// (names normalised: `model.language_model.` or `model.` stripped, vision tower and MTP head
    /// dropped), or [`ddtree_weights::RandomWeights`] (benchmarks of real shapes; their
    /// `tied_embeddings` should be the config's `tie_word_embeddings`).
    pub fn load<S: TensorSource>(
        config: Qwen35Config,
        source: &S,
        options: LoadOptions,
        device: &B::Device,
    ) -> Result<Self> {
        check(&config)?;
        let w = Weights {
            source,
            device,
            eps: config.rms_norm_eps,
            zero_centred: true,
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
            recurrent: true,
        };
        let stack = Stack::load(&w, spec, options, |layer, capacity| {
            Ok(match config.layer_types[layer] {
                LayerType::LinearAttention => HybridMixer::DeltaNet(GatedDeltaNet::load(
                    &w,
                    &format!("layers.{layer}.linear_attn"),
                    &config,
                )?),
                LayerType::FullAttention => HybridMixer::Attention(w.attention(
                    &format!("layers.{layer}.self_attn"),
                    config.hidden_size,
                    shape,
                    capacity,
                    config.attn_output_gate,
                )?),
            })
        })?;
        Ok(Self { config, stack })
    }

    /// The parsed config.
    pub fn config(&self) -> &Qwen35Config {
        &self.config
    }

    /// Tokens committed to the caches.
    pub fn committed_len(&self) -> usize {
        self.stack.committed_len()
    }

    /// The maximum context (KV-cache rows preallocated).
    pub fn max_context(&self) -> usize {
        self.stack.max_context()
    }

    /// Forgets every committed token: zero recurrent states and conv rows (a new sequence).
    pub fn reset(&mut self) {
        self.stack.reset();
    }

    /// Runs `tokens` as a sequence after the committed prefix and commits them. Returns logits
    /// and captured features for every token.
    pub fn prefill(&mut self, tokens: &[u32]) -> Result<ForwardOutput<B>> {
        self.stack.prefill(tokens)
    }

    /// One-token decode: [`Self::prefill`] of a single token.
    pub fn decode(&mut self, token: u32) -> Result<ForwardOutput<B>> {
        self.prefill(&[token])
    }

    /// Tree verify: one forward over the tree's nodes (root first) at positions
    /// `committed + depth`; in attention layers each node sees the committed prefix, its
    /// ancestors and itself, in Gated DeltaNet layers it continues its parent's state and conv
    /// window. Nothing is committed: call [`Self::commit`] with the accepted path. Every node's
    /// ancestor set must be its parent's plus itself ([`crate::Error::InvalidTree`] otherwise).
    pub fn verify(&mut self, tree: &TreeBlock<'_>) -> Result<ForwardOutput<B>> {
        self.stack.verify(tree)
    }

    /// Commits the accepted nodes of the last verified block, a root-first path (the root, a
    /// child of it, …): attention rows move to contiguous positions, recurrent states and conv
    /// rows advance along the path.
    pub fn commit(&mut self, accepted: &[usize]) -> Result<()> {
        self.stack.commit(accepted)
    }

    /// Token embeddings `[n, hidden]`.
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

/// What this implementation supports of a parsed config.
fn check(config: &Qwen35Config) -> Result<()> {
    if config.moe.is_some() {
        return Err(Error::Unsupported(
            "mixture-of-experts MLPs (num_experts > 0); only dense hybrids are supported".into(),
        ));
    }
    if config.attention_bias {
        return Err(Error::Unsupported(
            "attention_bias = true (Qwen3.5/3.6 checkpoints have no attention biases)".into(),
        ));
    }
    if config.hidden_act != "silu" {
        return Err(Error::Unsupported(format!(
            "hidden_act {:?} (the hybrids use \"silu\")",
            config.hidden_act
        )));
    }
    if config.linear_conv_kernel_dim < 2 {
        return Err(Error::Unsupported(format!(
            "linear_conv_kernel_dim {} (the conv state holds kernel − 1 ≥ 1 rows)",
            config.linear_conv_kernel_dim
        )));
    }
    Ok(())
}

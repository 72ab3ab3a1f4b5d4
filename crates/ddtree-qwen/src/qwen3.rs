//! The Qwen3 dense target (`model_type: qwen3`).
//!
//! Same cast as every model file: the config (from `ddtree-weights`), the decoder layer, the
//! model with `load` and the forward variants the speculative loop needs.

use burn_tensor::{Int, Tensor, TensorData};
use ddtree_kernels::nn::{Attention, HeadShape, KvCache, Linear, Mlp, RmsNorm, RopeTable};
use ddtree_kernels::{AttentionContext, KernelOps, Visibility};
use ddtree_weights::{Checkpoint, Qwen3Config};

use crate::cursor::{Cursor, is_identity};
use crate::error::{Error, Result};
use crate::{ForwardOutput, LoadOptions, TreeBlock, check_vocab};

/// One pre-norm decoder layer: `x + attn(norm(x))`, then `x + mlp(norm(x))`.
#[derive(Debug)]
struct DecoderLayer<B: KernelOps> {
    input_norm: RmsNorm<B>,
    attention: Attention<B>,
    post_attention_norm: RmsNorm<B>,
    mlp: Mlp<B>,
}

impl<B: KernelOps> DecoderLayer<B> {
    fn load(
        cfg: &Qwen3Config,
        ckpt: &Checkpoint,
        layer: usize,
        capacity: usize,
        device: &B::Device,
    ) -> Result<Self> {
        let p = format!("layers.{layer}");
        let (hidden, inter) = (cfg.hidden_size, cfg.intermediate_size);
        let shape = HeadShape {
            heads: cfg.num_attention_heads,
            kv_heads: cfg.num_key_value_heads,
            head_dim: cfg.head_dim,
        };
        let q_width = shape.heads * shape.head_dim;
        let kv_width = shape.kv_heads * shape.head_dim;
        let linear = |name: &str, out: usize, inp: usize| -> Result<Tensor<B, 2>> {
            Ok(ckpt.tensor::<B, 2>(&format!("{p}.{name}.weight"), [out, inp], device)?)
        };
        let norm = |name: &str, dim: usize| -> Result<RmsNorm<B>> {
            let w = ckpt.tensor::<B, 1>(&format!("{p}.{name}.weight"), [dim], device)?;
            Ok(RmsNorm::new(w, cfg.rms_norm_eps))
        };
        let attention = Attention::new(
            [
                linear("self_attn.q_proj", q_width, hidden)?,
                linear("self_attn.k_proj", kv_width, hidden)?,
                linear("self_attn.v_proj", kv_width, hidden)?,
                linear("self_attn.o_proj", hidden, q_width)?,
            ],
            norm("self_attn.q_norm", shape.head_dim)?,
            norm("self_attn.k_norm", shape.head_dim)?,
            shape,
            KvCache::new(shape.kv_heads, capacity, shape.head_dim, device),
        );
        let mlp = Mlp::new(
            linear("mlp.gate_proj", inter, hidden)?,
            linear("mlp.up_proj", inter, hidden)?,
            linear("mlp.down_proj", hidden, inter)?,
        );
        Ok(Self {
            input_norm: norm("input_layernorm", hidden)?,
            attention,
            post_attention_norm: norm("post_attention_layernorm", hidden)?,
            mlp,
        })
    }

    fn forward(
        &mut self,
        x: Tensor<B, 2>,
        cos: Tensor<B, 2>,
        sin: Tensor<B, 2>,
        ctx: &AttentionContext<'_>,
    ) -> Tensor<B, 2> {
        let x = x.clone()
            + self
                .attention
                .forward(self.input_norm.forward(x), cos, sin, ctx, 0);
        x.clone() + self.mlp.forward(self.post_attention_norm.forward(x))
    }
}

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
#[derive(Debug)]
pub struct Qwen3<B: KernelOps> {
    config: Qwen3Config,
    embed_tokens: Tensor<B, 2>,
    layers: Vec<DecoderLayer<B>>,
    norm: RmsNorm<B>,
    lm_head: Linear<B>,
    rope: RopeTable<B>,
    capture_layers: Vec<usize>,
    cursor: Cursor,
    device: B::Device,
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

    /// Builds the model from a parsed config and an opened checkpoint.
    pub fn load(
        config: Qwen3Config,
        ckpt: &Checkpoint,
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
        let layers_count = config.num_hidden_layers;
        if let Some(&layer) = options.capture_layers.iter().find(|&&l| l >= layers_count) {
            return Err(Error::CaptureLayer {
                layer,
                layers: layers_count,
            });
        }
        let capacity = options.max_context.unwrap_or(config.max_position_embeddings);
        let (vocab, hidden) = (config.vocab_size, config.hidden_size);
        let embed_tokens = ckpt.tensor::<B, 2>("embed_tokens.weight", [vocab, hidden], device)?;
        let lm_head = if config.tie_word_embeddings {
            Linear::new(embed_tokens.clone())
        } else {
            Linear::new(ckpt.tensor::<B, 2>("lm_head.weight", [vocab, hidden], device)?)
        };
        let layers = (0..layers_count)
            .map(|l| DecoderLayer::load(&config, ckpt, l, capacity, device))
            .collect::<Result<Vec<_>>>()?;
        let norm = RmsNorm::new(
            ckpt.tensor::<B, 1>("norm.weight", [hidden], device)?,
            config.rms_norm_eps,
        );
        let (inv_freq, scaling) = config.rope.inv_freq(config.head_dim)?;
        let rope = RopeTable::new(&inv_freq, scaling, capacity, device);
        Ok(Self {
            config,
            embed_tokens,
            layers,
            norm,
            lm_head,
            rope,
            capture_layers: options.capture_layers,
            cursor: Cursor::new(capacity),
            device: device.clone(),
        })
    }

    /// The parsed config.
    pub fn config(&self) -> &Qwen3Config {
        &self.config
    }

    /// Tokens committed to the cache.
    pub fn committed_len(&self) -> usize {
        self.cursor.committed()
    }

    /// The maximum context (cache rows preallocated).
    pub fn max_context(&self) -> usize {
        self.cursor.capacity()
    }

    /// Forgets every committed token after the first `len`.
    pub fn truncate(&mut self, len: usize) {
        self.cursor.truncate(len);
    }

    /// Runs `tokens` causally after the committed prefix and commits them. Returns logits and
    /// captured features for every token.
    pub fn prefill(&mut self, tokens: &[u32]) -> Result<ForwardOutput<B>> {
        check_vocab(tokens, self.config.vocab_size)?;
        let start = self.cursor.begin(tokens.len())?;
        let positions: Vec<usize> = (start..start + tokens.len()).collect();
        let out = self.forward(tokens, &positions, AttentionContext::causal(start))?;
        self.cursor.advance(tokens.len());
        Ok(out)
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
        tree.check(self.config.vocab_size)?;
        let start = self.cursor.begin(tree.tokens.len())?;
        let positions: Vec<usize> = tree.depths.iter().map(|&d| start + d as usize).collect();
        if let Some(&max) = positions.iter().max()
            && max >= self.rope.positions()
        {
            return Err(Error::ContextFull {
                committed: start,
                requested: max - start + 1,
                capacity: self.rope.positions(),
            });
        }
        let ctx = AttentionContext {
            prefix_len: start,
            visibility: Visibility::Tree(tree.ancestors),
            window: None,
        };
        self.forward(tree.tokens, &positions, ctx)
    }

    /// Commits the accepted nodes (strictly increasing ids into the last verified block, root
    /// first): their cache rows move to contiguous positions after the prefix.
    pub fn commit(&mut self, accepted: &[usize]) -> Result<()> {
        self.cursor.check_commit(accepted)?;
        if !is_identity(accepted) {
            let at = self.cursor.committed();
            for layer in &mut self.layers {
                layer.attention.compact(at, accepted);
            }
        }
        self.cursor.advance(accepted.len());
        Ok(())
    }

    /// Token embeddings `[n, hidden]` (the drafter embeds its block with these).
    pub fn embed(&self, tokens: &[u32]) -> Result<Tensor<B, 2>> {
        check_vocab(tokens, self.config.vocab_size)?;
        let ids: Vec<i64> = tokens.iter().map(|&t| t as i64).collect();
        let ids = Tensor::<B, 1, Int>::from_data(
            TensorData::new(ids, [tokens.len()]).convert::<B::IntElem>(),
            &self.device,
        );
        Ok(self.embed_tokens.clone().select(0, ids))
    }

    /// Logits `[n, vocab]` of final hidden states `[n, hidden]`.
    pub fn lm_head(&self, hidden: Tensor<B, 2>) -> Tensor<B, 2> {
        self.lm_head.forward(hidden)
    }

    /// The `[vocab, hidden]` token embedding (a handle; the DFlash drafter embeds with it).
    pub fn embed_tokens_weight(&self) -> Tensor<B, 2> {
        self.embed_tokens.clone()
    }

    /// The `[vocab, hidden]` LM head weight, the embedding when tied (a handle; the DFlash drafter
    /// scores with it).
    pub fn lm_head_weight(&self) -> Tensor<B, 2> {
        self.lm_head.weight().clone()
    }

    /// Greedy next token after the last row of `out`.
    pub fn argmax_last(&self, out: &ForwardOutput<B>) -> u32 {
        let [n, vocab] = out.logits.dims();
        let last = out.logits.clone().slice([n - 1..n, 0..vocab]);
        ddtree_kernels::host_ids(B::argmax(last))[0]
    }

    fn forward(
        &mut self,
        tokens: &[u32],
        positions: &[usize],
        ctx: AttentionContext<'_>,
    ) -> Result<ForwardOutput<B>> {
        let mut x = self.embed(tokens)?;
        let (cos, sin) = self.rope.gather(positions);
        let mut captured: Vec<(usize, Tensor<B, 2>)> = Vec::with_capacity(self.capture_layers.len());
        for (l, layer) in self.layers.iter_mut().enumerate() {
            x = layer.forward(x, cos.clone(), sin.clone(), &ctx);
            if self.capture_layers.contains(&l) {
                captured.push((l, x.clone()));
            }
        }
        // Features are concatenated in the order the caller listed the layers.
        let features = (!self.capture_layers.is_empty()).then(|| {
            let ordered = self
                .capture_layers
                .iter()
                .filter_map(|l| captured.iter().find(|(c, _)| c == l).map(|(_, t)| t.clone()))
                .collect();
            Tensor::cat(ordered, 1)
        });
        let hidden = self.norm.forward(x);
        Ok(ForwardOutput {
            logits: self.lm_head.forward(hidden.clone()),
            hidden,
            features,
        })
    }
}

//! The DFlash drafter (z-lab checkpoint format).
//!
//! One pass drafts a whole block: the block `[bonus, mask, …, mask]` is embedded with the
//! target's embeddings; each layer's queries come from the block, its keys and values from
//! `[projected context ; block]`; the drafter's final norm and the target's LM head score the
//! block rows 1..b-1, one row per draft depth. Context keys/values are cached across rounds and
//! cropped back to the committed context after every pass.

use burn_tensor::{Int, Tensor, TensorData};
use ddtree_kernels::nn::{Attention, HeadShape, KvCache, Linear, Mlp, RmsNorm, RopeTable};
use ddtree_kernels::{AttentionContext, KernelOps, Visibility};
use ddtree_weights::{Checkpoint, DFlashConfig, DraftLayerType, TensorSource};

use crate::error::{Error, Result};

/// The target's token embedding and LM head weights the drafter borrows (`[vocab, hidden]` each;
/// the same tensor for a tied target). Handles, not copies.
#[derive(Clone, Debug)]
pub struct TargetHead<B: KernelOps> {
    /// `embed_tokens.weight`.
    pub embed_tokens: Tensor<B, 2>,
    /// `lm_head.weight` (or the embedding when tied).
    pub lm_head: Tensor<B, 2>,
}

/// One drafter layer: a Qwen3 block whose keys/values also cover the projected context.
#[derive(Debug)]
struct DraftLayer<B: KernelOps> {
    input_norm: RmsNorm<B>,
    attention: Attention<B>,
    post_attention_norm: RmsNorm<B>,
    mlp: Mlp<B>,
    causal: bool,
    window: Option<usize>,
}

impl<B: KernelOps> DraftLayer<B> {
    fn load<S: TensorSource>(
        cfg: &DFlashConfig,
        source: &S,
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
        let (q_width, kv_width) = (shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim);
        let linear = |name: &str, out: usize, inp: usize| -> Result<Tensor<B, 2>> {
            Ok(source.tensor::<B, 2>(&format!("{p}.{name}.weight"), [out, inp], device)?)
        };
        let norm = |name: &str, dim: usize| -> Result<RmsNorm<B>> {
            let w = source.tensor::<B, 1>(&format!("{p}.{name}.weight"), [dim], device)?;
            Ok(RmsNorm::new(w, cfg.rms_norm_eps))
        };
        // The newest reference: `is_causal` from the config, else causal iff sliding.
        let sliding = cfg
            .layer_types
            .as_ref()
            .is_some_and(|types| types.get(layer) == Some(&DraftLayerType::SlidingAttention));
        let causal = cfg.is_causal.unwrap_or(sliding);
        let window = if sliding && cfg.use_sliding_window != Some(false) {
            cfg.sliding_window
        } else {
            None
        };
        if let Some(w) = window
            && !causal
            && w < cfg.block_size
        {
            // A non-causal window is symmetric; keys ahead of a query are only limited by it when
            // the block is longer than the window.
            return Err(Error::Unsupported(format!(
                "layer {layer}: a non-causal sliding window of {w} shorter than the block ({})",
                cfg.block_size
            )));
        }
        Ok(Self {
            input_norm: norm("input_layernorm", hidden)?,
            attention: Attention::new(
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
            ),
            post_attention_norm: norm("post_attention_layernorm", hidden)?,
            mlp: Mlp::new(
                linear("mlp.gate_proj", inter, hidden)?,
                linear("mlp.up_proj", inter, hidden)?,
                linear("mlp.down_proj", hidden, inter)?,
            ),
            causal,
            window,
        })
    }

    /// `h: [b, hidden]` block rows at cache rows `start..`; `context: [m, hidden]` projected
    /// context rows just before them (key/value-only).
    fn forward(
        &mut self,
        h: Tensor<B, 2>,
        context: Option<Tensor<B, 2>>,
        cos: Tensor<B, 2>,
        sin: Tensor<B, 2>,
        start: usize,
    ) -> Tensor<B, 2> {
        let x = self.input_norm.forward(h.clone());
        let (kv_input, context_rows) = match context {
            Some(c) => {
                let m = c.dims()[0];
                (Tensor::cat(vec![c, x], 0), m)
            }
            None => (x, 0),
        };
        let ctx = AttentionContext {
            prefix_len: start,
            visibility: if self.causal {
                Visibility::Causal
            } else {
                Visibility::Full
            },
            window: self.window,
        };
        let attended = self.attention.attend(kv_input, cos, sin, &ctx, context_rows);
        let (h, normed) = self
            .post_attention_norm
            .add_linear_forward(h, attended, self.attention.o_proj());
        h + self.mlp.forward(normed)
    }
}

/// A DFlash drafter with its context KV cache.
#[derive(Debug)]
pub struct DFlash<B: KernelOps> {
    config: DFlashConfig,
    fc: Linear<B>,
    hidden_norm: RmsNorm<B>,
    layers: Vec<DraftLayer<B>>,
    norm: RmsNorm<B>,
    embed_tokens: Tensor<B, 2>,
    lm_head: Linear<B>,
    rope: RopeTable<B>,
    feature_width: usize,
    context_len: usize,
    capacity: usize,
    device: B::Device,
}

impl<B: KernelOps> DFlash<B> {
    /// Loads `config.json` and the safetensors of a drafter directory. `max_context` is the
    /// target's maximum context: the cache holds it plus one block.
    pub fn load_dir(
        dir: impl AsRef<std::path::Path>,
        target: TargetHead<B>,
        max_context: usize,
        device: &B::Device,
    ) -> Result<Self> {
        let dir = dir.as_ref();
        let config = DFlashConfig::from_file(dir.join("config.json"))?;
        let ckpt = Checkpoint::open(dir)?;
        Self::load(config, &ckpt, target, max_context, device)
    }

    /// Builds the drafter from a parsed config and a tensor source: an opened [`Checkpoint`], or
    /// [`ddtree_weights::RandomWeights`] (benchmarks of real shapes).
    pub fn load<S: TensorSource>(
        config: DFlashConfig,
        source: &S,
        target: TargetHead<B>,
        max_context: usize,
        device: &B::Device,
    ) -> Result<Self> {
        if config.hidden_act != "silu" {
            return Err(Error::Unsupported(format!(
                "hidden_act {:?} (DFlash drafters use \"silu\")",
                config.hidden_act
            )));
        }
        if config.block_size < 2 {
            return Err(Error::Unsupported(format!(
                "block_size {} (a block needs the bonus and at least one draft position)",
                config.block_size
            )));
        }
        let [vocab, target_hidden] = target.embed_tokens.dims();
        if target.lm_head.dims() != [vocab, config.hidden_size] {
            return Err(Error::TargetMismatch(format!(
                "the target's LM head is {:?}, the drafter needs [{vocab}, {}] (its hidden size)",
                target.lm_head.dims(),
                config.hidden_size
            )));
        }
        if config.mask_token_id as usize >= vocab {
            return Err(Error::TargetMismatch(format!(
                "mask_token_id {} is outside the target's vocabulary of {vocab}",
                config.mask_token_id
            )));
        }
        if target_hidden != config.hidden_size {
            return Err(Error::TargetMismatch(format!(
                "the target embeds into {target_hidden} dims, the drafter works in {}",
                config.hidden_size
            )));
        }
        let hidden = config.hidden_size;
        let feature_width = config.target_layer_ids.len() * target_hidden;
        let capacity = max_context + config.block_size;
        let fc = Linear::new(source.tensor::<B, 2>("fc.weight", [hidden, feature_width], device)?);
        let hidden_norm = RmsNorm::new(
            source.tensor::<B, 1>("hidden_norm.weight", [hidden], device)?,
            config.rms_norm_eps,
        );
        let layers = (0..config.num_hidden_layers)
            .map(|l| DraftLayer::load(&config, source, l, capacity, device))
            .collect::<Result<Vec<_>>>()?;
        let norm = RmsNorm::new(
            source.tensor::<B, 1>("norm.weight", [hidden], device)?,
            config.rms_norm_eps,
        );
        let (inv_freq, scaling) = config.rope.inv_freq(config.head_dim)?;
        let rope = RopeTable::new(&inv_freq, scaling, capacity, device);
        Ok(Self {
            config,
            fc,
            hidden_norm,
            layers,
            norm,
            embed_tokens: target.embed_tokens,
            lm_head: Linear::new(target.lm_head),
            rope,
            feature_width,
            context_len: 0,
            capacity,
            device: device.clone(),
        })
    }

    /// The parsed config.
    pub fn config(&self) -> &DFlashConfig {
        &self.config
    }

    /// Tokens per block (bonus included).
    pub fn block_size(&self) -> usize {
        self.config.block_size
    }

    /// Context rows cached (= the target's committed length once the features are in).
    pub fn context_len(&self) -> usize {
        self.context_len
    }

    /// Forgets the context.
    pub fn reset(&mut self) {
        self.context_len = 0;
    }

    /// Appends `features: [m, len(target_layer_ids) · hidden]` (the target's hidden states of the
    /// next `m` committed tokens) to the context, drafts the block `[bonus, mask, …]` that follows
    /// it, and returns the draft logits `[block_size - 1, vocab]` (row `d - 1` is depth `d`).
    pub fn draft_logits(&mut self, features: Option<Tensor<B, 2>>, bonus: u32) -> Result<Tensor<B, 2>> {
        let vocab = self.embed_tokens.dims()[0];
        if bonus as usize >= vocab {
            return Err(Error::TokenOutOfVocab { token: bonus, vocab });
        }
        let m = match &features {
            Some(f) => {
                let [m, width] = f.dims();
                if width != self.feature_width {
                    return Err(Error::FeatureWidth {
                        got: width,
                        expected: self.feature_width,
                        layers: self.config.target_layer_ids.len(),
                    });
                }
                m
            }
            None => 0,
        };
        let b = self.config.block_size;
        if self.context_len + m + b > self.capacity {
            return Err(Error::ContextFull {
                context: self.context_len,
                requested: m + b,
                capacity: self.capacity,
            });
        }
        let context = features.map(|f| self.hidden_norm.forward(self.fc.forward(f)));
        let mut block = vec![self.config.mask_token_id as i64; b];
        block[0] = bonus as i64;
        let ids =
            Tensor::<B, 1, Int>::from_data(TensorData::new(block, [b]).convert::<B::IntElem>(), &self.device);
        let mut h = self.embed_tokens.clone().select(0, ids);

        let positions: Vec<usize> = (self.context_len..self.context_len + m + b).collect();
        let (cos, sin) = self.rope.gather(&positions);
        let start = self.context_len + m;
        for layer in &mut self.layers {
            h = layer.forward(h, context.clone(), cos.clone(), sin.clone(), start);
        }
        // Crop: the block's keys/values are dropped, the new context stays.
        self.context_len = start;
        let hidden = self.config.hidden_size;
        let drafted = self.norm.forward(h.slice([1..b, 0..hidden]));
        Ok(self.lm_head.forward(drafted))
    }
}

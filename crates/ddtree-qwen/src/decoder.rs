//! What the Qwen targets share: weight reading helpers (over any [`TensorSource`]: a checkpoint,
//! random weights), the pre-norm decoder layer around a token mixer, and the stack (embeddings,
//! layers, final norm, LM head, rotary table, feature capture, cursor) that runs prefill, tree
//! verify and commit. A model file only says which mixer each layer has and how its weights are
//! named.

use std::cell::OnceCell;

use burn_tensor::Tensor;
use ddtree_kernels::nn::{Attention, HeadShape, KvCache, Linear, Mlp, RmsNorm, RopeTable};
use ddtree_kernels::{AttentionContext, KernelOps, Visibility, index_tensor};
use ddtree_weights::TensorSource;

use crate::cursor::{Cursor, is_identity};
use crate::error::{Error, Result};
use crate::{ForwardOutput, LoadOptions, TreeBlock, check_vocab};

/// Reads one model's tensors from a source (a checkpoint, random weights) with its norm
/// convention.
pub(crate) struct Weights<'a, B: KernelOps, S> {
    pub(crate) source: &'a S,
    pub(crate) device: &'a B::Device,
    pub(crate) eps: f64,
    /// Qwen3.5/3.6 norms scale by `1 + w`: one is added at load time so [`RmsNorm`] applies.
    pub(crate) zero_centred: bool,
}

impl<B: KernelOps, S: TensorSource> Weights<'_, B, S> {
    pub(crate) fn tensor<const D: usize>(&self, name: &str, shape: [usize; D]) -> Result<Tensor<B, D>> {
        Ok(self.source.tensor::<B, D>(name, shape, self.device)?)
    }

    pub(crate) fn matrix(&self, name: &str, out: usize, inp: usize) -> Result<Tensor<B, 2>> {
        self.tensor(name, [out, inp])
    }

    pub(crate) fn linear(&self, prefix: &str, out: usize, inp: usize) -> Result<Tensor<B, 2>> {
        self.matrix(&format!("{prefix}.weight"), out, inp)
    }

    pub(crate) fn vector(&self, name: &str, dim: usize) -> Result<Tensor<B, 1>> {
        self.tensor(name, [dim])
    }

    /// A block, final or q/k norm (`{prefix}.weight`), in this model's convention.
    pub(crate) fn norm(&self, prefix: &str, dim: usize) -> Result<RmsNorm<B>> {
        let weight = self.vector(&format!("{prefix}.weight"), dim)?;
        let weight = if self.zero_centred {
            weight.add_scalar(1.0)
        } else {
            weight
        };
        Ok(RmsNorm::new(weight, self.eps))
    }

    /// The attention of `{prefix}` (`q_proj`, `k_proj`, `v_proj`, `o_proj`, `q_norm`, `k_norm`);
    /// `gated`: `q_proj` also holds the per-head output gate (Qwen3.5/3.6).
    pub(crate) fn attention(
        &self,
        prefix: &str,
        hidden: usize,
        shape: HeadShape,
        capacity: usize,
        gated: bool,
    ) -> Result<Attention<B>> {
        let q_rows = shape.heads * shape.head_dim * if gated { 2 } else { 1 };
        let kv_width = shape.kv_heads * shape.head_dim;
        let weights = [
            self.linear(&format!("{prefix}.q_proj"), q_rows, hidden)?,
            self.linear(&format!("{prefix}.k_proj"), kv_width, hidden)?,
            self.linear(&format!("{prefix}.v_proj"), kv_width, hidden)?,
            self.linear(&format!("{prefix}.o_proj"), hidden, shape.heads * shape.head_dim)?,
        ];
        let q_norm = self.norm(&format!("{prefix}.q_norm"), shape.head_dim)?;
        let k_norm = self.norm(&format!("{prefix}.k_norm"), shape.head_dim)?;
        let cache = KvCache::new(shape.kv_heads, capacity, shape.head_dim, self.device);
        Ok(if gated {
            Attention::new_gated(weights, q_norm, k_norm, shape, cache)
        } else {
            Attention::new(weights, q_norm, k_norm, shape, cache)
        })
    }
}

/// One forward's rows: where they sit and what they see.
pub(crate) struct Block<'a, B: KernelOps> {
    /// Rotary rows of every row's position.
    pub(crate) cos: Tensor<B, 2>,
    pub(crate) sin: Tensor<B, 2>,
    /// Attention visibility (causal for prefill, ancestor bits for verify).
    pub(crate) ctx: AttentionContext<'a>,
    /// Each row's parent row, `-1` for a row that follows the committed prefix directly. Only
    /// recurrent models fill it.
    pub(crate) parents: &'a [i32],
    /// Prefill commits its rows at once; verify leaves them pending until `commit`.
    pub(crate) commits: bool,
    /// Conv windows derived from `parents`, computed by the first layer that needs them.
    pub(crate) conv_windows: OnceCell<Vec<usize>>,
}

/// A decoder layer's token mixer (attention or Gated DeltaNet).
pub(crate) trait Mixer<B: KernelOps> {
    /// Mixes `x: [rows, hidden]` with the cached context, up to the output projection (which
    /// the layer fuses with its residual add and next norm).
    fn mix(&mut self, x: Tensor<B, 2>, block: &Block<'_, B>) -> Tensor<B, 2>;
    /// The output projection, `[rows, ·] → [rows, hidden]`.
    fn out_proj(&self) -> &Linear<B>;
    /// The layer's KV cache, if it has one: the stack compacts every layer's at a commit, in one
    /// call.
    fn kv_cache(&mut self) -> Option<&mut KvCache<B>>;
    /// Keeps the accepted rows (a root-first path of the pending block) after `at` committed rows
    /// of the state other than a KV cache.
    fn commit(&mut self, at: usize, accepted: &[usize]);
    /// Forgets the sequence.
    fn reset(&mut self);
}

impl<B: KernelOps> Mixer<B> for Attention<B> {
    fn mix(&mut self, x: Tensor<B, 2>, block: &Block<'_, B>) -> Tensor<B, 2> {
        self.attend(x, block.cos.clone(), block.sin.clone(), &block.ctx, 0)
    }

    fn out_proj(&self) -> &Linear<B> {
        self.o_proj()
    }

    fn kv_cache(&mut self) -> Option<&mut KvCache<B>> {
        Some(self.cache_mut())
    }

    // The KV cache is all its state.
    fn commit(&mut self, _at: usize, _accepted: &[usize]) {}

    // Rows past the cursor are simply overwritten.
    fn reset(&mut self) {}
}

/// One pre-norm decoder layer: `x + mixer(norm(x))`, then `x + mlp(norm(x))`.
#[derive(Clone, Debug)]
pub(crate) struct DecoderLayer<B: KernelOps, M> {
    input_norm: RmsNorm<B>,
    mixer: M,
    post_attention_norm: RmsNorm<B>,
    mlp: Mlp<B>,
}

impl<B: KernelOps, M: Mixer<B>> DecoderLayer<B, M> {
    /// The norms and MLP of `layers.{layer}` around `mixer`.
    pub(crate) fn load<S: TensorSource>(
        w: &Weights<'_, B, S>,
        layer: usize,
        hidden: usize,
        inter: usize,
        mixer: M,
    ) -> Result<Self> {
        let p = format!("layers.{layer}");
        let mlp = Mlp::new(
            w.linear(&format!("{p}.mlp.gate_proj"), inter, hidden)?,
            w.linear(&format!("{p}.mlp.up_proj"), inter, hidden)?,
            w.linear(&format!("{p}.mlp.down_proj"), hidden, inter)?,
        );
        Ok(Self {
            input_norm: w.norm(&format!("{p}.input_layernorm"), hidden)?,
            mixer,
            post_attention_norm: w.norm(&format!("{p}.post_attention_layernorm"), hidden)?,
            mlp,
        })
    }

    /// The layer on the residual stream `x`, given `normed`, its input norm (applied by the
    /// caller: each residual add is fused with the norm after it). Returns the new stream and
    /// `next` (the next layer's input norm, or the final norm) applied to it.
    fn forward(
        &mut self,
        x: Tensor<B, 2>,
        normed: Tensor<B, 2>,
        next: &RmsNorm<B>,
        block: &Block<'_, B>,
    ) -> (Tensor<B, 2>, Tensor<B, 2>) {
        let mixed = self.mixer.mix(normed, block);
        let (x, normed) = self
            .post_attention_norm
            .add_linear_forward(x, mixed, self.mixer.out_proj());
        next.add_linear_forward(x, self.mlp.activate(normed), self.mlp.down())
    }
}

/// The sizes a stack is built with.
pub(crate) struct StackSpec {
    pub(crate) vocab: usize,
    pub(crate) hidden: usize,
    pub(crate) intermediate: usize,
    pub(crate) layers: usize,
    pub(crate) tie_word_embeddings: bool,
    pub(crate) max_position_embeddings: usize,
    /// Rotary inverse frequencies and the cos/sin scaling.
    pub(crate) rope: (Vec<f32>, f32),
    /// Whether some mixer carries state along the sequence (Gated DeltaNet): verify then needs
    /// every node's parent, and only a root-first path can be committed.
    pub(crate) recurrent: bool,
}

/// Embeddings, decoder layers, final norm and LM head, with the cursor over their caches.
#[derive(Clone, Debug)]
pub(crate) struct Stack<B: KernelOps, M> {
    embed_tokens: Tensor<B, 2>,
    layers: Vec<DecoderLayer<B, M>>,
    norm: RmsNorm<B>,
    lm_head: Linear<B>,
    rope: RopeTable<B>,
    capture_layers: Vec<usize>,
    cursor: Cursor,
    vocab: usize,
    recurrent: bool,
    /// Parents of the pending verified block (recurrent models).
    pending_parents: Vec<i32>,
    device: B::Device,
}

impl<B: KernelOps, M: Mixer<B>> Stack<B, M> {
    /// Loads the shared tensors; `mixer(layer, capacity)` builds each layer's mixer.
    pub(crate) fn load<S: TensorSource>(
        w: &Weights<'_, B, S>,
        spec: StackSpec,
        options: LoadOptions,
        mut mixer: impl FnMut(usize, usize) -> Result<M>,
    ) -> Result<Self> {
        if let Some(&layer) = options.capture_layers.iter().find(|&&l| l >= spec.layers) {
            return Err(Error::CaptureLayer {
                layer,
                layers: spec.layers,
            });
        }
        let capacity = options.max_context.unwrap_or(spec.max_position_embeddings);
        let (vocab, hidden) = (spec.vocab, spec.hidden);
        let embed_tokens = w.matrix("embed_tokens.weight", vocab, hidden)?;
        let lm_head = if spec.tie_word_embeddings {
            Linear::new(embed_tokens.clone())
        } else {
            Linear::new(w.matrix("lm_head.weight", vocab, hidden)?)
        };
        let layers = (0..spec.layers)
            .map(|l| DecoderLayer::load(w, l, hidden, spec.intermediate, mixer(l, capacity)?))
            .collect::<Result<Vec<_>>>()?;
        let (inv_freq, scaling) = &spec.rope;
        Ok(Self {
            embed_tokens,
            layers,
            norm: w.norm("norm", hidden)?,
            lm_head,
            rope: RopeTable::new(inv_freq, *scaling, capacity, w.device),
            capture_layers: options.capture_layers,
            cursor: Cursor::new(capacity),
            vocab,
            recurrent: spec.recurrent,
            pending_parents: Vec::new(),
            device: w.device.clone(),
        })
    }

    pub(crate) fn committed_len(&self) -> usize {
        self.cursor.committed()
    }

    pub(crate) fn max_context(&self) -> usize {
        self.cursor.capacity()
    }

    /// Moves the cursor back (attention caches only: recurrent state cannot rewind).
    pub(crate) fn truncate(&mut self, len: usize) {
        self.cursor.truncate(len);
    }

    pub(crate) fn reset(&mut self) {
        self.cursor.truncate(0);
        self.layers.iter_mut().for_each(|l| l.mixer.reset());
    }

    pub(crate) fn prefill(&mut self, tokens: &[u32]) -> Result<ForwardOutput<B>> {
        check_vocab(tokens, self.vocab)?;
        let start = self.cursor.begin(tokens.len())?;
        let positions: Vec<usize> = (start..start + tokens.len()).collect();
        let chain: Vec<i32> = if self.recurrent {
            (-1..tokens.len() as i32 - 1).collect()
        } else {
            Vec::new()
        };
        let out = self.forward(tokens, &positions, AttentionContext::causal(start), &chain, true);
        self.cursor.advance(tokens.len());
        out
    }

    pub(crate) fn verify(&mut self, tree: &TreeBlock<'_>) -> Result<ForwardOutput<B>> {
        tree.check(self.vocab)?;
        let parents = if self.recurrent {
            tree.parents()?
        } else {
            Vec::new()
        };
        // Positions are checked before the block begins, so a rejected tree leaves no pending
        // block behind whose rows were never written.
        let committed = self.cursor.committed();
        let positions: Vec<usize> = tree.depths.iter().map(|&d| committed + d as usize).collect();
        if let Some(&max) = positions.iter().max()
            && max >= self.rope.positions()
        {
            return Err(Error::ContextFull {
                committed,
                requested: max - committed + 1,
                capacity: self.rope.positions(),
            });
        }
        let start = self.cursor.begin(tree.tokens.len())?;
        let ctx = AttentionContext {
            prefix_len: start,
            visibility: Visibility::Tree(tree.ancestors),
            window: None,
        };
        let out = self.forward(tree.tokens, &positions, ctx, &parents, false);
        self.pending_parents = parents;
        out
    }

    pub(crate) fn commit(&mut self, accepted: &[usize]) -> Result<()> {
        self.cursor.check_commit(accepted)?;
        if self.recurrent {
            check_path(&self.pending_parents, accepted)?;
        }
        let at = self.cursor.committed();
        if !is_identity(accepted) {
            KvCache::compact_layers(
                self.layers.iter_mut().filter_map(|l| l.mixer.kv_cache()),
                at,
                accepted,
            );
        }
        self.layers.iter_mut().for_each(|l| l.mixer.commit(at, accepted));
        self.cursor.advance(accepted.len());
        Ok(())
    }

    pub(crate) fn embed(&self, tokens: &[u32]) -> Result<Tensor<B, 2>> {
        check_vocab(tokens, self.vocab)?;
        let ids = index_tensor(tokens.iter().map(|&t| t as usize), &self.device);
        Ok(self.embed_tokens.clone().select(0, ids))
    }

    pub(crate) fn lm_head(&self, hidden: Tensor<B, 2>) -> Tensor<B, 2> {
        self.lm_head.forward(hidden)
    }

    pub(crate) fn embed_tokens_weight(&self) -> Tensor<B, 2> {
        self.embed_tokens.clone()
    }

    pub(crate) fn lm_head_weight(&self) -> Tensor<B, 2> {
        self.lm_head.weight().clone()
    }

    pub(crate) fn argmax_last(&self, out: &ForwardOutput<B>) -> u32 {
        let [n, vocab] = out.logits.dims();
        let last = out.logits.clone().slice([n - 1..n, 0..vocab]);
        ddtree_kernels::host_ids(B::argmax(last))[0]
    }

    fn forward(
        &mut self,
        tokens: &[u32],
        positions: &[usize],
        ctx: AttentionContext<'_>,
        parents: &[i32],
        commits: bool,
    ) -> Result<ForwardOutput<B>> {
        let x = self.embed(tokens)?;
        let (cos, sin) = self.rope.gather(positions);
        let block = Block {
            cos,
            sin,
            ctx,
            parents,
            commits,
            conv_windows: OnceCell::new(),
        };
        let mut captured: Vec<(usize, Tensor<B, 2>)> = Vec::with_capacity(self.capture_layers.len());
        let mut normed = match self.layers.first() {
            Some(layer) => layer.input_norm.forward(x.clone()),
            None => self.norm.forward(x.clone()),
        };
        let mut x = x;
        for l in 0..self.layers.len() {
            let next = self
                .layers
                .get(l + 1)
                .map_or(&self.norm, |layer| &layer.input_norm)
                .clone();
            (x, normed) = self.layers[l].forward(x, normed, &next, &block);
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
        let hidden = normed;
        Ok(ForwardOutput {
            logits: self.lm_head.forward(hidden.clone()),
            hidden,
            features,
        })
    }
}

/// Recurrent state advances along one path: `accepted` must start at a root and each node must
/// be the previous one's child.
fn check_path(parents: &[i32], accepted: &[usize]) -> Result<()> {
    let mut previous = -1;
    for &node in accepted {
        if parents[node] != previous {
            return Err(Error::InvalidCommit(format!(
                "accepted nodes {accepted:?} are not a path from the root: node {node}'s parent is {}, \
                 not {previous} (-1: the committed prefix)",
                parents[node]
            )));
        }
        previous = node as i32;
    }
    Ok(())
}

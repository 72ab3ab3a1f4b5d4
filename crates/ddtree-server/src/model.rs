//! Loading a target + drafter pair and its tokenizer, behind the [`Generator`] trait the worker
//! drives. The server knows the loading calls and nothing else of the models.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use burn_ndarray::NdArray;
use ddtree_dflash::{DFlash, TargetHead};
use ddtree_engine::{Drafter, Engine, EngineError, GenerateParams, Generation, Target};
use ddtree_kernels::KernelOps;
use ddtree_qwen::{LoadOptions, Qwen3};
use ddtree_weights::{DFlashConfig, GenerationConfig, TokenizerFiles};
use tokenizers::Tokenizer;

use crate::cli::Device;
use crate::template::ChatTemplate;

/// The demo target shipped in the repository, served when no model flags are given: a small
/// trained Qwen3 code model (8 layers, hidden 256, vocabulary 8192, trained on Python source;
/// see `models/demo/README.md`). It is an ordinary Hugging Face `Qwen3ForCausalLM` directory and
/// loads through the same code as any other checkpoint.
pub const DEMO_TARGET_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/demo/target");
/// The demo DFlash drafter trained for [`DEMO_TARGET_DIR`] (a z-lab `DFlashDraftModel`
/// directory).
pub const DEMO_DRAFT_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/demo/draft");

/// A speculative generator: what the worker thread drives.
pub trait Generator {
    /// Generates after `prompt`; see [`Engine::generate`].
    fn generate(
        &mut self,
        prompt: &[u32],
        params: &GenerateParams,
        on_tokens: &mut dyn FnMut(&[u32]) -> ControlFlow<()>,
    ) -> Result<Generation, EngineError>;
}

impl<T: Target, D: Drafter<T::Features>> Generator for Engine<T, D> {
    fn generate(
        &mut self,
        prompt: &[u32],
        params: &GenerateParams,
        on_tokens: &mut dyn FnMut(&[u32]) -> ControlFlow<()>,
    ) -> Result<Generation, EngineError> {
        Engine::generate(self, prompt, params, on_tokens)
    }
}

/// What the HTTP side needs to know of the loaded model.
#[derive(Debug)]
pub struct ModelInfo {
    /// The target's tokenizer.
    pub tokenizer: Tokenizer,
    /// The chat template (`None`: chat completions answer 400, text completions still work).
    pub template: Option<ChatTemplate>,
    /// Tokens that end a generation: generation_config.json's `eos_token_id` and the
    /// tokenizer's eos token.
    pub eos_ids: Vec<u32>,
    /// Vocabulary size of the target.
    pub vocab_size: usize,
    /// The maximum context (prompt + output).
    pub max_context: usize,
    /// The drafter's block size.
    pub block_size: usize,
    /// Sampling defaults from generation_config.json (temperature, top_p, top_k), used when a
    /// request leaves them out; `None` when the checkpoint defaults to greedy decoding.
    pub sampling_defaults: Option<(f32, f32, usize)>,
}

/// Where the model comes from.
#[derive(Clone, Debug)]
pub struct ModelSource {
    /// Target checkpoint directory (config.json, safetensors, tokenizer files).
    pub target: PathBuf,
    /// DFlash drafter directory.
    pub draft: PathBuf,
    /// Cache rows to preallocate (default: the target's `max_position_embeddings`).
    pub max_context: Option<usize>,
    /// A chat template file overriding the checkpoint's.
    pub chat_template: Option<PathBuf>,
}

impl ModelSource {
    /// The demo pair shipped in the repository.
    pub fn demo() -> Self {
        Self {
            target: DEMO_TARGET_DIR.into(),
            draft: DEMO_DRAFT_DIR.into(),
            max_context: None,
            chat_template: None,
        }
    }
}

/// A loaded model: what the HTTP side reads, and the generator the worker owns.
pub type Loaded = (ModelInfo, Box<dyn Generator>);

/// Loads the tokenizer, the template and the model pair on `device`: the CPU (burn's ndarray
/// backend, f32) or an NVIDIA GPU (burn's CubeCL CUDA backend, bf16; needs the `cuda` feature).
pub fn load(source: &ModelSource, device: Device) -> Result<Loaded, String> {
    match device {
        Device::Cpu => load_on::<NdArray<f32>>(source, &Default::default()),
        #[cfg(feature = "cuda")]
        Device::Cuda => load_on::<ddtree_kernels::cube::Cuda>(source, &Default::default()),
        #[cfg(not(feature = "cuda"))]
        Device::Cuda => Err("this binary was built without CUDA (`--features cuda`)".into()),
    }
}

fn load_on<B: KernelOps>(source: &ModelSource, device: &B::Device) -> Result<Loaded, String> {
    let info = |what: &str, dir: &Path, e: &dyn std::fmt::Display| {
        format!("loading the {what} from {}: {e}", dir.display())
    };
    let (tokenizer, template, mut eos_ids) = load_tokenizer(source)?;
    let draft_cfg = DFlashConfig::from_file(source.draft.join("config.json"))
        .map_err(|e| info("drafter config", &source.draft, &e))?;
    let options = LoadOptions {
        max_context: source.max_context,
        capture_layers: draft_cfg.target_layer_ids.clone(),
    };
    let target = Qwen3::<B>::load_dir(&source.target, options, device)
        .map_err(|e| info("target", &source.target, &e))?;
    let head = TargetHead {
        embed_tokens: target.embed_tokens_weight(),
        lm_head: target.lm_head_weight(),
    };
    let drafter = DFlash::<B>::load_dir(&source.draft, head, target.max_context(), device)
        .map_err(|e| info("drafter", &source.draft, &e))?;
    let generation = GenerationConfig::load_optional(&source.target)
        .map_err(|e| info("generation config", &source.target, &e))?;
    if let Some(g) = &generation {
        eos_ids.extend(&g.eos_token_id);
    }
    eos_ids.sort_unstable();
    eos_ids.dedup();
    let sampling_defaults = generation.as_ref().and_then(|g| {
        (g.do_sample == Some(true)).then(|| {
            (
                g.temperature.unwrap_or(1.0) as f32,
                g.top_p.unwrap_or(1.0) as f32,
                g.top_k.unwrap_or(0),
            )
        })
    });
    let model = ModelInfo {
        tokenizer,
        template,
        eos_ids,
        vocab_size: target.config().vocab_size,
        max_context: target.max_context(),
        block_size: drafter.block_size(),
        sampling_defaults,
    };
    Ok((model, Box::new(Engine::new(target, drafter))))
}

/// Loads the tokenizer and the chat template of `source.target`; returns them and the
/// tokenizer's eos id.
pub fn load_tokenizer(source: &ModelSource) -> Result<(Tokenizer, Option<ChatTemplate>, Vec<u32>), String> {
    let files = TokenizerFiles::load(&source.target).map_err(|e| e.to_string())?;
    let source_text = match &source.chat_template {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| format!("reading the chat template {}: {e}", path.display()))?,
        ),
        None => files.chat_template.clone(),
    };
    let special: Vec<(String, String)> = [
        ("bos_token", &files.bos_token),
        ("eos_token", &files.eos_token),
        ("pad_token", &files.pad_token),
    ]
    .into_iter()
    .filter_map(|(k, t)| t.as_ref().map(|t| (k.to_string(), t.content.clone())))
    .collect();
    let template = source_text
        .map(|t| ChatTemplate::new(&t, special))
        .transpose()
        .map_err(|e| format!("compiling the chat template of {}: {e}", source.target.display()))?;
    let eos = files.eos_token.iter().map(|t| t.id).collect();
    Ok((files.tokenizer, template, eos))
}

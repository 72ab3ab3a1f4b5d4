//! A drafter built from `RandomWeights` (no checkpoint) with the fixture configs, over a target
//! built the same way: the generic `DFlash::load` accepts any `TensorSource`, and drafting gives
//! `[block_size − 1, vocab]` finite logits round after round. (Loading the fixture checkpoints
//! through the same generic `load` — `load_dir` opens a `Checkpoint` and calls it — is checked
//! against the reference by `reference_fixtures.rs`.)

use std::path::{Path, PathBuf};

use burn_ndarray::NdArray;
use burn_tensor::Tensor;
use ddtree_dflash::{DFlash, TargetHead};
use ddtree_kernels::host_f32;
use ddtree_qwen::{LoadOptions, Qwen3};
use ddtree_weights::{DFlashConfig, Qwen3Config, RandomWeights};

type B = NdArray<f32>;

fn config_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(name)
        .join("config.json")
}

fn check_finite_and_varied(what: &str, t: Tensor<B, 2>) {
    let v = host_f32(t);
    assert!(v.iter().all(|x| x.is_finite()), "{what}: non-finite values");
    assert!(v.iter().any(|&x| x != v[0]), "{what}: constant");
}

#[test]
fn drafters_from_random_weights_draft_blocks_of_the_right_shape() {
    let device = Default::default();
    let target_config = Qwen3Config::from_file(config_file("qwen3-tiny-untied")).unwrap();
    let vocab = target_config.vocab_size;
    let target_source = RandomWeights {
        std: 0.02,
        tied_embeddings: target_config.tie_word_embeddings,
    };
    for name in ["dflash-tiny", "dflash-tiny-sliding"] {
        let config = DFlashConfig::from_file(config_file(name)).unwrap();
        let block = config.block_size;
        let options = LoadOptions {
            max_context: Some(128),
            capture_layers: config.target_layer_ids.clone(),
        };
        let mut target = Qwen3::<B>::load(target_config.clone(), &target_source, options, &device).unwrap();
        let head = TargetHead {
            embed_tokens: target.embed_tokens_weight(),
            lm_head: target.lm_head_weight(),
        };
        // Drafter checkpoints hold no embedding and no LM head: whether the source "has" them
        // does not matter, the drafter borrows the target's.
        let source = RandomWeights {
            std: 0.02,
            tied_embeddings: true,
        };
        let mut drafter = DFlash::<B>::load(config, &source, head, target.max_context(), &device)
            .unwrap_or_else(|e| panic!("{name}: {e}"));

        let prompt = [5, 17, 1000, 3, 3, 512, 42];
        let out = target.prefill(&prompt).unwrap();
        let bonus = target.argmax_last(&out);
        let logits = drafter.draft_logits(out.features, bonus).unwrap();
        assert_eq!(logits.dims(), [block - 1, vocab], "{name}");
        check_finite_and_varied(name, logits);
        assert_eq!(drafter.context_len(), prompt.len());

        // A second round: the features of one more committed token.
        let out = target.decode(bonus).unwrap();
        let next = target.argmax_last(&out);
        let logits = drafter.draft_logits(out.features, next).unwrap();
        assert_eq!(logits.dims(), [block - 1, vocab], "{name}");
        check_finite_and_varied(name, logits);
        assert_eq!(drafter.context_len(), prompt.len() + 1);
    }
}

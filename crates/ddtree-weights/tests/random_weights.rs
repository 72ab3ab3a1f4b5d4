//! `RandomWeights` and the `TensorSource` implementation of `Checkpoint`, on the f32 CPU backend.

use std::path::{Path, PathBuf};

use burn_ndarray::{NdArray, NdArrayDevice};
use burn_tensor::{DType, Tensor};
use ddtree_weights::{Checkpoint, Error, RandomWeights, TensorSource};

type B = NdArray<f32>;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(name)
}

fn values<const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().to_vec::<f32>().unwrap()
}

/// Loads through the trait only, as the generic model loaders do.
fn via_trait<S: TensorSource, const D: usize>(source: &S, name: &str, shape: [usize; D]) -> Tensor<B, D> {
    source.tensor::<B, D>(name, shape, &Default::default()).unwrap()
}

#[test]
fn every_tensor_has_the_requested_shape_and_the_device_float_dtype() {
    let source = RandomWeights::default();
    let embed = via_trait(&source, "embed_tokens.weight", [1024, 64]);
    assert_eq!(embed.dims(), [1024, 64]);
    assert_eq!(embed.dtype(), DType::F32);
    let up = via_trait(&source, "layers.0.mlp.up_proj.weight", [128, 64]);
    assert_eq!(up.dims(), [128, 64]);
    // A 3-d weight (the Gated DeltaNet conv, `[C, 1, K]`) is a random "matrix" too.
    let conv = via_trait(&source, "layers.0.linear_attn.conv1d.weight", [96, 1, 4]);
    assert_eq!(conv.dims(), [96, 1, 4]);
    assert!(values(conv).iter().any(|&v| v != 0.0));
    for (name, dim) in [
        ("norm.weight", 64),
        ("layers.0.linear_attn.A_log", 4),
        ("x.bias", 7),
    ] {
        let v = via_trait(&source, name, [dim]);
        assert_eq!((v.dims(), v.dtype()), ([dim], DType::F32), "{name}");
    }
}

/// 256 × 256 = 65 536 samples. For normal samples the standard error of the sample mean is
/// σ/256 ≈ 0.004σ and that of the sample standard deviation σ/√(2n) ≈ 0.0028σ; the tolerances
/// (0.03σ and 2 %) are about 7 standard errors, so a correct generator fails with probability
/// < 1e-11, while a wrong scale (e.g. the variance used as the standard deviation: off by 2× for
/// σ = 0.5 and 50× for σ = 0.02) or a missing centring fails by far. The share of samples within
/// one σ (normal: 0.6827, standard error 0.0018) tells a normal from a uniform distribution of
/// the same σ (0.577).
#[test]
fn matrices_are_normal_with_the_requested_std() {
    for std in [0.02, 0.5] {
        let source = RandomWeights {
            std,
            tied_embeddings: false,
        };
        let t = via_trait(&source, "layers.1.self_attn.o_proj.weight", [256, 256]);
        let v: Vec<f64> = values(t).into_iter().map(f64::from).collect();
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
        let within = v.iter().filter(|x| x.abs() <= std).count() as f64 / n;
        assert!(mean.abs() < 0.03 * std, "std {std}: mean {mean}");
        assert!((sd / std - 1.0).abs() < 0.02, "std {std}: sample std {sd}");
        assert!(
            (within - 0.6827).abs() < 0.01,
            "std {std}: {within} within one std"
        );
    }
}

#[test]
fn two_requests_draw_different_values() {
    let source = RandomWeights::default();
    let a = values(via_trait(&source, "layers.0.mlp.gate_proj.weight", [32, 32]));
    let b = values(via_trait(&source, "layers.0.mlp.gate_proj.weight", [32, 32]));
    assert_ne!(a, b);
}

#[test]
fn vectors_follow_the_documented_rule() {
    let source = RandomWeights {
        std: 1.0,
        tied_embeddings: false,
    };
    let ones = [
        "norm.weight",
        "hidden_norm.weight",
        "layers.3.input_layernorm.weight",
        "layers.3.post_attention_layernorm.weight",
        "layers.3.self_attn.q_norm.weight",
        "layers.3.self_attn.k_norm.weight",
        "layers.0.linear_attn.norm.weight",
        "layers.0.linear_attn.dt_bias",
    ];
    for name in ones {
        assert_eq!(values(via_trait(&source, name, [48])), vec![1.0; 48], "{name}");
    }
    for name in ["layers.0.linear_attn.A_log", "layers.0.self_attn.q_proj.bias"] {
        assert_eq!(values(via_trait(&source, name, [48])), vec![0.0; 48], "{name}");
    }
}

#[test]
fn random_weights_hold_what_a_checkpoint_of_the_architecture_holds() {
    let untied = RandomWeights {
        std: 0.02,
        tied_embeddings: false,
    };
    let tied = RandomWeights {
        tied_embeddings: true,
        ..untied
    };
    for source in [untied, tied] {
        assert!(source.contains("embed_tokens.weight"));
        assert!(source.contains("layers.7.mlp.down_proj.weight"));
        // Names are normalised as in a checkpoint: raw, vision and MTP names are never held.
        for raw in [
            "model.embed_tokens.weight",
            "model.visual.blocks.0.weight",
            "mtp.fc.weight",
        ] {
            assert!(!source.contains(raw), "{raw}");
            let err = source.tensor::<B, 1>(raw, [2], &Default::default()).unwrap_err();
            assert!(matches!(err, Error::MissingTensor { .. }), "{raw}: {err}");
        }
        let err = source
            .tensor::<B, 0>("norm.weight", [], &Default::default())
            .unwrap_err();
        assert!(matches!(err, Error::ZeroRank { .. }), "{err}");
    }
    assert!(untied.contains("lm_head.weight"));
    assert_eq!(via_trait(&untied, "lm_head.weight", [16, 8]).dims(), [16, 8]);
    assert!(!tied.contains("lm_head.weight"));
    match tied.tensor::<B, 2>("lm_head.weight", [16, 8], &Default::default()) {
        Err(Error::MissingTensor { tensor, .. }) => assert_eq!(tensor, "lm_head.weight"),
        other => panic!(
            "expected a missing-tensor error, got {:?}",
            other.map(|t| t.dims())
        ),
    }
}

#[test]
fn a_checkpoint_as_a_source_gives_its_own_tensors() {
    let untied = Checkpoint::open(fixture("qwen3-tiny-untied")).unwrap();
    let tied = Checkpoint::open(fixture("qwen3-tiny-tied")).unwrap();
    assert!(TensorSource::contains(&untied, "lm_head.weight"));
    assert!(!TensorSource::contains(&tied, "lm_head.weight"));
    assert!(TensorSource::contains(&tied, "embed_tokens.weight"));
    for name in [
        "embed_tokens.weight",
        "layers.1.mlp.up_proj.weight",
        "norm.weight",
    ] {
        let shape = untied.info(name).unwrap().shape.clone();
        let want = untied.to_f32(name, &shape).unwrap();
        let got = match shape[..] {
            [n] => values(via_trait(&untied, name, [n])),
            [r, c] => values(via_trait(&untied, name, [r, c])),
            _ => unreachable!("{name}: {shape:?}"),
        };
        assert_eq!(got, want, "{name}");
    }
    // Errors come through unchanged.
    let device = NdArrayDevice::default();
    let err = TensorSource::tensor::<B, 1>(&untied, "norm.weight", [3], &device).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { .. }), "{err}");
    let err = TensorSource::tensor::<B, 1>(&tied, "lm_head.weight", [3], &device).unwrap_err();
    assert!(matches!(err, Error::MissingTensor { .. }), "{err}");
}

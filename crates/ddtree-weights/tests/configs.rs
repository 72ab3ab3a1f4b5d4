//! Config parsing against JSON modelled on released Qwen / DFlash configs (tests/data/configs).

mod common;

use std::path::PathBuf;

use common::{TempDir, assert_names};
use ddtree_weights::*;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/configs")
        .join(name)
}

/// `base` (a fixture) with `edit` applied to its JSON, parsed by `parse`.
fn edited<T>(
    base: &'static str,
    edit: impl FnOnce(&mut serde_json::Value),
    parse: fn(&str, &'static str) -> Result<T>,
) -> Result<T> {
    let text = std::fs::read_to_string(fixture(base)).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    edit(&mut v);
    parse(&v.to_string(), base)
}

#[test]
fn qwen3_8b_old_rope_layout() {
    let c = Qwen3Config::from_file(fixture("qwen3_8b.json")).unwrap();
    assert_eq!(c.model_type.as_deref(), Some("qwen3"));
    assert_eq!(
        (
            c.vocab_size,
            c.hidden_size,
            c.intermediate_size,
            c.num_hidden_layers
        ),
        (151936, 4096, 12288, 36)
    );
    assert_eq!(
        (c.num_attention_heads, c.num_key_value_heads, c.head_dim),
        (32, 8, 128)
    );
    assert_eq!(c.rope.theta, 1e6);
    assert_eq!(c.rope.kind, RopeKind::Default);
    assert_eq!(c.rope.partial_rotary_factor, 1.0);
    assert_eq!(c.rope.rotary_dim(c.head_dim), 128);
    assert_eq!(c.rms_norm_eps, 1e-6);
    assert_eq!(c.max_position_embeddings, 40960);
    assert!(!c.tie_word_embeddings && !c.attention_bias);
    assert_eq!(
        (c.bos_token_id.as_slice(), c.eos_token_id.as_slice()),
        (&[151643][..], &[151645][..])
    );
    assert_eq!(c.sliding_window, None);
    assert_eq!(c.dtype.as_deref(), Some("bfloat16"));
}

#[test]
fn qwen3_transformers_v5_rope_parameters() {
    let c = Qwen3Config::from_file(fixture("qwen3_4b_v5.json")).unwrap();
    assert_eq!(
        (c.hidden_size, c.intermediate_size, c.num_hidden_layers),
        (2560, 9728, 36)
    );
    assert!(c.tie_word_embeddings);
    assert_eq!(c.rope.theta, 1e6);
    assert_eq!(c.rope.kind, RopeKind::Default);
    assert_eq!(c.dtype.as_deref(), Some("bfloat16"));

    // YaRN as Qwen documents it for long context, in the v5 layout …
    let yarn = edited(
        "qwen3_4b_v5.json",
        |v| {
            v["rope_parameters"] = serde_json::json!({"rope_type": "yarn", "rope_theta": 1000000,
                "factor": 4.0, "original_max_position_embeddings": 32768});
        },
        Qwen3Config::from_json_str,
    )
    .unwrap();
    let want = RopeKind::Yarn {
        factor: 4.0,
        original_max_position_embeddings: 32768,
        beta_fast: 32.0,
        beta_slow: 1.0,
        attention_factor: None,
        mscale: None,
        mscale_all_dim: None,
        truncate: None,
    };
    assert_eq!(yarn.rope.kind, want);
    // … and in the old layout, with the legacy `type` key, gives the same parameters.
    let old = edited(
        "qwen3_8b.json",
        |v| {
            v["rope_scaling"] = serde_json::json!({"type": "yarn", "factor": 4.0,
                "original_max_position_embeddings": 32768});
        },
        Qwen3Config::from_json_str,
    )
    .unwrap();
    assert_eq!(old.rope.kind, want);
    assert_eq!(old.rope.theta, 1e6);
}

#[test]
fn rope_variants_and_defaults() {
    let with = |rope: serde_json::Value| {
        edited(
            "qwen3_8b.json",
            |v| {
                v.as_object_mut().unwrap().remove("rope_theta");
                v["rope_parameters"] = rope;
            },
            Qwen3Config::from_json_str,
        )
    };
    let c = with(serde_json::json!({"rope_type": "linear", "factor": 2.0})).unwrap();
    assert_eq!(c.rope.kind, RopeKind::Linear { factor: 2.0 });
    assert_eq!(c.rope.theta, 10000.0, "transformers' default θ");
    let c = with(serde_json::json!({"rope_type": "dynamic", "factor": 2.0})).unwrap();
    assert_eq!(
        c.rope.kind,
        RopeKind::Dynamic {
            factor: 2.0,
            original_max_position_embeddings: 40960
        },
        "falls back to max_position_embeddings"
    );
    let c = with(
        serde_json::json!({"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
        "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    )
    .unwrap();
    assert_eq!(
        c.rope.kind,
        RopeKind::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192
        }
    );
    let c = with(
        serde_json::json!({"rope_type": "yarn", "factor": 2.0, "beta_fast": 16,
        "attention_factor": 1.2, "mscale": 1.0, "mscale_all_dim": 0.5, "truncate": false}),
    )
    .unwrap();
    assert!(matches!(
        c.rope.kind,
        RopeKind::Yarn {
            beta_fast: 16.0,
            attention_factor: Some(1.2),
            mscale: Some(1.0),
            mscale_all_dim: Some(0.5),
            truncate: Some(false),
            ..
        }
    ));

    let err = with(serde_json::json!({"rope_type": "longrope", "factor": 2.0})).unwrap_err();
    assert!(
        matches!(err, Error::ConfigInvalid { ref key, .. } if key == "rope_parameters.rope_type"),
        "{err}"
    );
    assert_names(&err, &["longrope", "qwen3_8b.json", "yarn"]);
    let err = with(serde_json::json!({"rope_type": "linear"})).unwrap_err();
    assert!(
        matches!(err, Error::ConfigMissingKey { ref key, .. } if key == "rope_parameters.factor"),
        "{err}"
    );
    let err = with(serde_json::json!({"rope_type": "llama3", "factor": 8.0})).unwrap_err();
    assert!(matches!(err, Error::ConfigMissingKey { .. }), "{err}");
}

#[test]
fn qwen35_27b_multimodal_text_config() {
    let c = Qwen35Config::from_file(fixture("qwen35_27b.json")).unwrap();
    assert_eq!(c.model_type, "qwen3_5_text");
    assert_eq!(c.gdn_layout, GdnProjectionLayout::Separate);
    assert_eq!(
        (
            c.vocab_size,
            c.hidden_size,
            c.intermediate_size,
            c.num_hidden_layers
        ),
        (248320, 5120, 17408, 64)
    );
    assert_eq!(
        (c.num_attention_heads, c.num_key_value_heads, c.head_dim),
        (24, 4, 256)
    );
    assert_eq!((c.linear_num_key_heads, c.linear_num_value_heads), (16, 48));
    assert_eq!(
        (
            c.linear_key_head_dim,
            c.linear_value_head_dim,
            c.linear_conv_kernel_dim
        ),
        (128, 128, 4)
    );
    assert_eq!(c.linear_conv_channels(), 10240);
    assert!(c.attn_output_gate && !c.tie_word_embeddings);
    assert_eq!(c.rope.theta, 1e7);
    assert_eq!(c.rope.partial_rotary_factor, 0.25);
    assert_eq!(c.rope.rotary_dim(c.head_dim), 64);
    assert_eq!(c.rope.mrope_section.as_deref(), Some(&[11, 11, 10][..]));
    assert!(c.rope.mrope_interleaved);
    assert_eq!(c.max_position_embeddings, 262144);
    assert_eq!(c.eos_token_id, [248044]);
    assert_eq!(c.layer_types.len(), 64);
    let full: Vec<usize> = c.full_attention_layers().collect();
    assert_eq!(full.len(), 16);
    assert_eq!(&full[..3], &[3, 7, 11]);
    assert_eq!(c.moe, None);
}

#[test]
fn qwen35_layer_types_from_interval_only() {
    let c = Qwen35Config::from_file(fixture("qwen35_4b_interval.json")).unwrap();
    assert_eq!(c.num_hidden_layers, 32);
    assert_eq!(
        c.full_attention_layers().collect::<Vec<_>>(),
        (0..8).map(|i| 4 * i + 3).collect::<Vec<_>>()
    );
    assert_eq!(c.layer_types[0], LayerType::LinearAttention);
    assert_eq!(c.layer_types[3], LayerType::FullAttention);
    assert!(
        c.tie_word_embeddings,
        "taken from the top level when text_config lacks it"
    );
    assert_eq!(c.linear_conv_channels(), 8192);

    // A different interval, and the default when neither key is present.
    let c = edited(
        "qwen35_4b_interval.json",
        |v| v["text_config"]["full_attention_interval"] = 2.into(),
        Qwen35Config::from_json_str,
    )
    .unwrap();
    assert_eq!(c.full_attention_layers().take(3).collect::<Vec<_>>(), [1, 3, 5]);
    let c = edited(
        "qwen35_4b_interval.json",
        |v| {
            v["text_config"]
                .as_object_mut()
                .unwrap()
                .remove("full_attention_interval");
            v["text_config"]
                .as_object_mut()
                .unwrap()
                .remove("rope_parameters");
        },
        Qwen35Config::from_json_str,
    )
    .unwrap();
    assert_eq!(c.full_attention_layers().count(), 8);
    assert_eq!(c.rope.partial_rotary_factor, 0.25, "Qwen3.5 default");
    assert_eq!(c.rope.theta, 10000.0);
}

#[test]
fn qwen3_next_flat_fused_moe() {
    let c = Qwen35Config::from_file(fixture("qwen3_next_80b_a3b.json")).unwrap();
    assert_eq!(c.model_type, "qwen3_next");
    assert_eq!(c.gdn_layout, GdnProjectionLayout::FusedGrouped);
    assert_eq!(
        (c.num_hidden_layers, c.hidden_size, c.intermediate_size),
        (48, 2048, 5120)
    );
    assert_eq!(
        (c.num_attention_heads, c.num_key_value_heads, c.head_dim),
        (16, 2, 256)
    );
    assert_eq!(c.rope.theta, 5e6);
    assert_eq!(
        c.rope.partial_rotary_factor, 0.25,
        "top-level key in the old layout"
    );
    assert_eq!(c.full_attention_layers().count(), 12);
    assert!(c.attn_output_gate, "default");
    assert_eq!(c.max_position_embeddings, 32768, "class default");
    let moe = c.moe.unwrap();
    assert_eq!((moe.num_experts, moe.num_experts_per_tok), (512, 10));
    assert_eq!(
        (moe.moe_intermediate_size, moe.shared_expert_intermediate_size),
        (512, 512)
    );
    assert!(moe.norm_topk_prob);
    assert_eq!(
        (c.bos_token_id.as_slice(), c.eos_token_id.as_slice()),
        (&[151643][..], &[151645][..])
    );
}

#[test]
fn dflash_qwen3_8b_b16() {
    let c = DFlashConfig::from_file(fixture("dflash_qwen3_8b_b16.json")).unwrap();
    assert_eq!(c.block_size, 16, "top-level block_size");
    assert_eq!(c.mask_token_id, 151669);
    assert_eq!(c.target_layer_ids, [1, 9, 17, 25, 33]);
    assert_eq!(c.num_target_layers, Some(36));
    assert_eq!(
        (c.num_hidden_layers, c.hidden_size, c.intermediate_size),
        (5, 4096, 12288)
    );
    assert_eq!(
        (c.num_attention_heads, c.num_key_value_heads, c.head_dim),
        (32, 8, 128)
    );
    assert_eq!(c.rope.theta, 1e6);
    assert_eq!(c.rope.rotary_dim(c.head_dim), 128, "full rotary");
    assert_eq!(c.layer_types, None);
    assert!(!c.layer_is_causal(0), "full attention, non-causal by default");
    assert_eq!(c.fc_in_features(4096), 5 * 4096);
}

#[test]
fn dflash_qwen35_4b_sliding_layers() {
    let c = DFlashConfig::from_file(fixture("dflash_qwen35_4b.json")).unwrap();
    assert_eq!(c.block_size, 16, "inside dflash_config");
    assert_eq!(c.mask_token_id, 248077);
    assert_eq!(c.target_layer_ids, [1, 5, 9, 13, 17, 21, 25, 29]);
    assert_eq!(c.fc_in_features(2560), 20480);
    assert_eq!(c.num_target_layers, Some(32));
    let types = c.layer_types.as_ref().unwrap();
    assert_eq!(types.len(), 6);
    assert!(types[..5].iter().all(|t| *t == DraftLayerType::SlidingAttention));
    assert_eq!(types[5], DraftLayerType::FullAttention);
    assert_eq!((c.sliding_window, c.use_sliding_window), (Some(4096), Some(true)));
    assert!(c.layer_is_causal(0) && !c.layer_is_causal(5));
    assert_eq!(c.rope.theta, 1e7);
    assert_eq!(c.max_position_embeddings, 262144);

    // `is_causal` overrides the per-layer default.
    let c = edited(
        "dflash_qwen35_4b.json",
        |v| v["is_causal"] = false.into(),
        DFlashConfig::from_json_str,
    )
    .unwrap();
    assert!(!c.layer_is_causal(0));
    // dflash_config wins over the top level; the top level is the fallback.
    let c = edited(
        "dflash_qwen35_4b.json",
        |v| {
            v["block_size"] = 8.into();
            v["mask_token_id"] = 1.into();
        },
        DFlashConfig::from_json_str,
    )
    .unwrap();
    assert_eq!((c.block_size, c.mask_token_id), (16, 248077));
}

#[test]
fn dflash_missing_required_keys_are_named() {
    let err = edited(
        "dflash_qwen3_8b_b16.json",
        |v| {
            v["dflash_config"]
                .as_object_mut()
                .unwrap()
                .remove("target_layer_ids");
        },
        DFlashConfig::from_json_str,
    )
    .unwrap_err();
    assert!(
        matches!(err, Error::ConfigMissingKey { ref key, .. } if key == "dflash_config.target_layer_ids"),
        "{err}"
    );
    assert_names(
        &err,
        &["dflash_config.target_layer_ids", "dflash_qwen3_8b_b16.json"],
    );

    let err = edited(
        "dflash_qwen3_8b_b16.json",
        |v| {
            v.as_object_mut().unwrap().remove("dflash_config");
        },
        DFlashConfig::from_json_str,
    )
    .unwrap_err();
    assert!(
        matches!(err, Error::ConfigMissingKey { ref key, .. } if key == "mask_token_id"),
        "{err}"
    );

    let err = edited(
        "dflash_qwen3_8b_b16.json",
        |v| v["dflash_config"]["target_layer_ids"] = serde_json::json!([1, 9, 36]),
        DFlashConfig::from_json_str,
    )
    .unwrap_err();
    assert!(matches!(err, Error::ConfigInvalid { .. }), "{err}");
    assert_names(&err, &["36", "num_target_layers"]);
}

#[test]
fn config_errors_name_file_and_key() {
    let err = edited(
        "qwen3_8b.json",
        |v| {
            v.as_object_mut().unwrap().remove("hidden_size");
        },
        Qwen3Config::from_json_str,
    )
    .unwrap_err();
    assert!(
        matches!(err, Error::ConfigMissingKey { ref key, .. } if key == "hidden_size"),
        "{err}"
    );
    assert_names(&err, &["qwen3_8b.json", "hidden_size"]);

    let err = edited(
        "qwen3_8b.json",
        |v| v["num_attention_heads"] = "32".into(),
        Qwen3Config::from_json_str,
    )
    .unwrap_err();
    assert!(
        matches!(err, Error::ConfigWrongType { ref key, .. } if key == "num_attention_heads"),
        "{err}"
    );
    assert_names(&err, &["non-negative integer", "\"32\""]);

    let err = edited(
        "qwen3_8b.json",
        |v| v["num_key_value_heads"] = 5.into(),
        Qwen3Config::from_json_str,
    )
    .unwrap_err();
    assert!(
        matches!(err, Error::ConfigInvalid { ref key, .. } if key == "num_key_value_heads"),
        "{err}"
    );
    assert_names(&err, &["32", "5", "multiple"]);

    // Nested keys are named with their parent.
    let err = edited(
        "qwen35_27b.json",
        |v| {
            v["text_config"]
                .as_object_mut()
                .unwrap()
                .remove("num_hidden_layers");
        },
        Qwen35Config::from_json_str,
    )
    .unwrap_err();
    assert!(
        matches!(err, Error::ConfigMissingKey { ref key, .. } if key == "text_config.num_hidden_layers"),
        "{err}"
    );

    let err = edited(
        "qwen35_27b.json",
        |v| {
            v["text_config"]["layer_types"].as_array_mut().unwrap().pop();
        },
        Qwen35Config::from_json_str,
    )
    .unwrap_err();
    assert!(
        matches!(err, Error::ConfigInvalid { ref key, .. } if key == "text_config.layer_types"),
        "{err}"
    );
    assert_names(&err, &["63", "64"]);

    let err = edited(
        "qwen35_27b.json",
        |v| v["text_config"]["linear_num_value_heads"] = 20.into(),
        Qwen35Config::from_json_str,
    )
    .unwrap_err();
    assert!(matches!(err, Error::ConfigInvalid { .. }), "{err}");

    let err = edited(
        "qwen3_8b.json",
        |v| v["model_type"] = "llama".into(),
        Qwen3Config::from_json_str,
    )
    .unwrap_err();
    assert_names(&err, &["llama", "model_type"]);
    let err = Qwen35Config::from_file(fixture("qwen3_8b.json")).unwrap_err();
    assert!(
        matches!(err, Error::ConfigInvalid { .. }),
        "a qwen3 config is not a hybrid: {err}"
    );

    let err = Qwen3Config::from_json_str("{\"vocab_size\": ", "cfg.json").unwrap_err();
    assert!(matches!(err, Error::ConfigParse { .. }), "{err}");
    let err = Qwen3Config::from_json_str("[1]", "cfg.json").unwrap_err();
    assert!(matches!(err, Error::ConfigWrongType { .. }), "{err}");
    let err = Qwen3Config::from_file("/nonexistent/config.json").unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
    // Absurd sizes are rejected before anything is allocated for them.
    let err = edited(
        "qwen35_4b_interval.json",
        |v| v["text_config"]["num_hidden_layers"] = 1_000_000_000_000u64.into(),
        Qwen35Config::from_json_str,
    )
    .unwrap_err();
    assert!(matches!(err, Error::ConfigInvalid { .. }), "{err}");
    let err = edited(
        "qwen35_4b_interval.json",
        |v| v["text_config"]["full_attention_interval"] = 0.into(),
        Qwen35Config::from_json_str,
    )
    .unwrap_err();
    assert!(
        matches!(err, Error::ConfigInvalid { ref key, .. } if key == "text_config.full_attention_interval"),
        "{err}"
    );
}

#[test]
fn qwen3_defaults_for_optional_keys() {
    let c = Qwen3Config::from_json_str(
        r#"{"vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4}"#,
        "tiny.json",
    )
    .unwrap();
    assert_eq!(c.num_key_value_heads, 4, "= heads");
    assert_eq!(c.head_dim, 16, "= hidden / heads");
    assert_eq!(c.rms_norm_eps, 1e-6);
    assert_eq!(c.max_position_embeddings, 32768);
    assert!(!c.tie_word_embeddings && !c.attention_bias);
    assert_eq!(c.rope.theta, 10000.0);
    assert!(c.bos_token_id.is_empty() && c.eos_token_id.is_empty());
    assert_eq!(c.hidden_act, "silu");
    // eos as a list; integral floats accepted.
    let c = Qwen3Config::from_json_str(
        r#"{"vocab_size": 1000.0, "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "eos_token_id": [7, 8],
            "use_sliding_window": true}"#,
        "tiny.json",
    )
    .unwrap();
    assert_eq!(c.vocab_size, 1000);
    assert_eq!(c.eos_token_id, [7, 8]);
    assert_eq!(c.sliding_window, Some(4096));
}

#[test]
fn generation_config() {
    let g = GenerationConfig::from_file(fixture("generation_config.json")).unwrap();
    assert_eq!(g.eos_token_id, [151645, 151643]);
    assert_eq!((g.bos_token_id, g.pad_token_id), (Some(151643), Some(151643)));
    assert_eq!(
        (g.do_sample, g.temperature, g.top_p, g.top_k),
        (Some(true), Some(0.6), Some(0.95), Some(20))
    );

    let dir = TempDir::new("gencfg");
    assert_eq!(GenerationConfig::load_optional(dir.path()).unwrap(), None);
    dir.write("generation_config.json", r#"{"eos_token_id": 2}"#);
    let g = GenerationConfig::load_optional(dir.path()).unwrap().unwrap();
    assert_eq!(g.eos_token_id, [2]);
    assert_eq!(g.temperature, None);
    dir.write("generation_config.json", r#"{"eos_token_id": "2"}"#);
    let err = GenerationConfig::load_optional(dir.path()).unwrap_err();
    assert!(
        matches!(err, Error::ConfigWrongType { ref key, .. } if key == "eos_token_id"),
        "{err}"
    );
    assert_names(&err, &["generation_config.json"]);
    dir.write("generation_config.json", r#"{"top_p": 1.5}"#);
    assert!(matches!(
        GenerationConfig::load_optional(dir.path()),
        Err(Error::ConfigInvalid { .. })
    ));
}

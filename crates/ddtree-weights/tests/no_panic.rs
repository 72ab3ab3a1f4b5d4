//! No input may make the parsers panic: the fuzz seed corpora are replayed through the fuzz
//! targets' own entry points, and proptest feeds random bytes and mutations of valid files.

mod common;

use std::path::PathBuf;

use common::{sample_tensors, serialize};
use ddtree_weights::fuzzing;
use proptest::prelude::*;

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("seed corpus {} missing: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    files.sort();
    files
}

#[test]
fn replay_safetensors_header_corpus() {
    let files = corpus("safetensors_header");
    assert!(files.len() >= 5, "seed corpus too small: {}", files.len());
    let accepted = files
        .iter()
        .filter(|(path, bytes)| {
            eprintln!("replaying {}", path.display());
            fuzzing::safetensors_header(bytes)
        })
        .count();
    // The seeds hold both valid and broken files; both paths must be exercised.
    assert!(
        accepted > 0 && accepted < files.len(),
        "accepted {accepted} of {}",
        files.len()
    );
}

#[test]
fn replay_config_corpus() {
    let files = corpus("config");
    assert!(files.len() >= 5, "seed corpus too small: {}", files.len());
    let accepted: usize = files
        .iter()
        .map(|(path, bytes)| {
            eprintln!("replaying {}", path.display());
            fuzzing::config(bytes)
        })
        .sum();
    assert!(accepted > 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        fuzzing::safetensors_header(&bytes);
    }

    #[test]
    fn random_header_after_valid_prefix(body in "\\PC{0,200}", data_len in 0usize..64) {
        let mut bytes = (body.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(body.as_bytes());
        bytes.resize(bytes.len() + data_len, 0x3F);
        fuzzing::safetensors_header(&bytes);
    }

    #[test]
    fn mutated_valid_file_never_panics(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        cut in proptest::option::of(any::<usize>()),
    ) {
        let mut bytes = serialize(&sample_tensors());
        for (at, val) in edits {
            let i = at % bytes.len();
            bytes[i] = val;
        }
        if let Some(cut) = cut {
            bytes.truncate(cut % (bytes.len() + 1));
        }
        fuzzing::safetensors_header(&bytes);
    }

    #[test]
    fn mutated_header_numbers_never_panic(
        begin in any::<u64>(), end in any::<u64>(),
        dims in proptest::collection::vec(any::<u64>(), 0..4),
        dtype in prop::sample::select(vec!["F32", "F16", "BF16", "I8", "F4", "F6_E2M3", "C64", "BOOL", "X"]),
    ) {
        let header = format!(
            r#"{{"t":{{"dtype":"{dtype}","shape":{dims:?},"data_offsets":[{begin},{end}]}}}}"#
        );
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend_from_slice(&[0u8; 32]);
        fuzzing::safetensors_header(&bytes);
    }

    #[test]
    fn mutated_configs_never_panic(
        pick in 0usize..8,
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
    ) {
        let files = corpus("config");
        let mut bytes = files[pick % files.len()].1.clone();
        for (at, val) in edits {
            if !bytes.is_empty() {
                let i = at % bytes.len();
                bytes[i] = val;
            }
        }
        fuzzing::config(&bytes);
    }

    #[test]
    fn configs_with_a_key_replaced_never_panic(
        pick in 0usize..16,
        key in prop::sample::select(KEYS.to_vec()),
        scope in prop::sample::select(vec!["", "text_config", "dflash_config", "rope_parameters"]),
        value in json_value(),
    ) {
        let files = corpus("config");
        let (_, bytes) = &files[pick % files.len()];
        let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(bytes) else {
            return Ok(());
        };
        let target = if scope.is_empty() { Some(&mut v) } else { v.get_mut(scope) };
        if let Some(serde_json::Value::Object(obj)) = target {
            obj.insert(key.to_string(), value);
        }
        fuzzing::config(v.to_string().as_bytes());
    }
}

const KEYS: &[&str] = &[
    "model_type",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "rope_type",
    "factor",
    "partial_rotary_factor",
    "original_max_position_embeddings",
    "max_position_embeddings",
    "layer_types",
    "full_attention_interval",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "num_experts",
    "num_experts_per_tok",
    "decoder_sparse_step",
    "block_size",
    "mask_token_id",
    "target_layer_ids",
    "num_target_layers",
    "eos_token_id",
    "bos_token_id",
    "text_config",
    "dflash_config",
    "chat_template",
    "eos_token",
    "top_p",
    "temperature",
    "mrope_section",
];

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::{Value, json};
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (0u64..70).prop_map(Value::from),
        any::<f64>()
            .prop_filter("JSON has no NaN/inf", |f| f.is_finite())
            .prop_map(Value::from),
        prop::sample::select(vec![
            "yarn",
            "linear",
            "dynamic",
            "llama3",
            "default",
            "qwen3",
            "qwen3_5",
            "qwen3_next",
            "full_attention",
            "sliding_attention",
            "linear_attention",
            ""
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS.to_vec()), inner), 0..6).prop_map(|kv| {
                let mut m = serde_json::Map::new();
                for (k, v) in kv {
                    m.insert(k.to_string(), v);
                }
                json!(m)
            }),
        ]
    })
}

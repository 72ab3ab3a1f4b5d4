//! Entry points shared by the `cargo fuzz` targets and the corpus-replay test, so both exercise
//! exactly the same code. Not part of the stable API.

use std::path::Path;

use crate::{Checkpoint, DFlashConfig, GenerationConfig, Qwen3Config, Qwen35Config, TokenizerConfig};

/// Parses `data` as a whole safetensors file and, if it is valid, reads every float tensor.
/// Returns whether the file was accepted.
pub fn safetensors_header(data: &[u8]) -> bool {
    let origin = Path::new("fuzz.safetensors");
    let ckpt = match Checkpoint::from_bytes(data.to_vec(), origin) {
        Ok(c) => c,
        Err(e) => {
            // Formatting must not panic either.
            let _ = e.to_string();
            return false;
        }
    };
    let names: Vec<String> = ckpt.names().map(str::to_string).collect();
    for name in &names {
        let Ok(info) = ckpt.info(name) else {
            return false;
        };
        let shape = info.shape.clone();
        match ckpt.to_f32(name, &shape) {
            Ok(values) => assert_eq!(values.len(), info.numel(), "length of {name}"),
            Err(e) => {
                let _ = e.to_string();
            }
        }
        // A wrong shape must be an error, never a panic.
        let mut wrong = shape;
        wrong.push(1);
        assert!(ckpt.to_f32(name, &wrong).is_err());
    }
    true
}

/// Parses `data` with every config parser. Returns how many accepted it.
pub fn config(data: &[u8]) -> usize {
    let Ok(text) = std::str::from_utf8(data) else {
        return 0;
    };
    let origin = Path::new("fuzz.json");
    let results = [
        Qwen3Config::from_json_str(text, origin).map(drop),
        Qwen35Config::from_json_str(text, origin).map(drop),
        DFlashConfig::from_json_str(text, origin).map(drop),
        GenerationConfig::from_json_str(text, origin).map(drop),
        TokenizerConfig::from_json_str(text, origin).map(drop),
    ];
    results
        .into_iter()
        .filter(|r| match r {
            Ok(()) => true,
            Err(e) => {
                let _ = e.to_string();
                false
            }
        })
        .count()
}

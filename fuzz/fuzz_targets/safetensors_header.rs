//! Fuzzes the safetensors header parser and the float conversion of every accepted tensor.
//! Seeds: fuzz/corpus/safetensors_header/ (replayed by `cargo test -p ddtree-weights`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ddtree_weights::fuzzing::safetensors_header(data);
});

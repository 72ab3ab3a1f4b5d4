//! Fuzzes the config.json / generation_config.json / tokenizer_config.json parsers.
//! Seeds: fuzz/corpus/config/ (replayed by `cargo test -p ddtree-weights`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ddtree_weights::fuzzing::config(data);
});

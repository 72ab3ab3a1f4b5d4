//! Fuzzes request bodies: JSON parsing, chat and text completions validation, chat-template
//! rendering and tokenization of the accepted ones. Every rejection must be a 4xx with an
//! OpenAI error body, never a panic.
//! Seeds: fuzz/corpus/request_body/ (replayed by `cargo test -p ddtree-server`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ddtree_server::fuzzing::request_body(data);
});

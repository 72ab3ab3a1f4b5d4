//! Fuzzes the DDTree builder, compiled tree and walk with arbitrary shapes, budgets and
//! log-probs (NaN and infinities included). The harness lives in the crate
//! (`ddtree::fuzzing::tree_builder`) so that `cargo test -p ddtree` replays this target's corpus.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ddtree::fuzzing::tree_builder(data);
});

//! Replays the `request_body` fuzz target's seed corpus (fuzz/corpus/request_body/) through the
//! same entry point the fuzzer calls, so every seed runs in an ordinary `cargo test`.

use std::path::PathBuf;

#[test]
fn replay_request_body_corpus() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/request_body");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("seed corpus {} missing: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 10, "only {} seeds", files.len());
    let mut accepted = 0;
    for path in &files {
        let data = std::fs::read(path).unwrap();
        if ddtree_server::fuzzing::request_body(&data) {
            accepted += 1;
        }
    }
    // The valid chat seeds render; the others are rejected with a 4xx (asserted inside).
    let valid = [
        "chat_minimal.json",
        "chat_full.json",
        "chat_chain.json",
        "chat_reasoning_content.json",
        "chat_unicode.json",
    ];
    for name in valid {
        assert!(
            ddtree_server::fuzzing::request_body(&std::fs::read(dir.join(name)).unwrap()),
            "{name}"
        );
    }
    assert_eq!(accepted, valid.len());
}

//! Replays the seed corpus of the `tree_builder` fuzz target through the same harness.

use std::path::PathBuf;

#[test]
fn tree_builder_corpus_replays() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/tree_builder");
    let mut replayed = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        ddtree::fuzzing::tree_builder(&data);
        replayed += 1;
    }
    assert!(replayed >= 5, "only {replayed} corpus files in {}", dir.display());
}

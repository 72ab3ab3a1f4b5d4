//! The fixture checkpoints written by transformers' `save_pretrained`: the sharded copy (index +
//! three shards) and the single-file copy of the same model load to identical tensors.

use std::path::{Path, PathBuf};

use ddtree_weights::Checkpoint;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(name)
}

#[test]
fn sharded_and_single_file_fixture_checkpoints_hold_identical_tensors() {
    let sharded = Checkpoint::open(fixture("qwen3-tiny-untied")).unwrap();
    let single = Checkpoint::open(fixture("qwen3-tiny-untied-single")).unwrap();
    let shard_files: std::collections::BTreeSet<_> =
        sharded.names().filter_map(|n| sharded.file_of(n)).collect();
    assert!(
        shard_files.len() >= 2,
        "the sharded fixture spans {} files",
        shard_files.len()
    );

    let names: Vec<&str> = sharded.names().collect();
    assert_eq!(names, single.names().collect::<Vec<_>>());
    assert!(names.contains(&"lm_head.weight") && names.contains(&"embed_tokens.weight"));
    for name in names {
        let info = sharded.info(name).unwrap();
        assert_eq!(info, single.info(name).unwrap(), "{name}");
        let a = sharded.to_f32(name, &info.shape).unwrap();
        let b = single.to_f32(name, &info.shape).unwrap();
        assert!(
            a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
            "{name} differs"
        );
    }
}

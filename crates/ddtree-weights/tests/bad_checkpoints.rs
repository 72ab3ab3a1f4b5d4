//! Broken checkpoints: each gives its own error variant, naming the file and tensor.

mod common;

use common::*;
use ddtree_weights::{Checkpoint, Error};

fn open_bytes(tag: &str, bytes: &[u8]) -> (TempDir, String, Error) {
    let dir = TempDir::new(tag);
    let path = dir.write("model.safetensors", bytes);
    let err = Checkpoint::open(dir.path()).unwrap_err();
    (dir, path.to_str().unwrap().to_string(), err)
}

#[test]
fn truncated_data() {
    let mut bytes = serialize(&sample_tensors());
    bytes.truncate(bytes.len() - 4);
    let (_d, path, err) = open_bytes("trunc", &bytes);
    assert!(matches!(err, Error::DataOutOfRange { .. }), "{err}");
    // The last tensor in the data section is the one cut short.
    assert_names(&err, &[&path, "truncated"]);
    let Error::DataOutOfRange { tensor, .. } = &err else {
        unreachable!()
    };
    assert!(err.to_string().contains(&format!("`{tensor}`")));
}

#[test]
fn header_length_larger_than_file() {
    let mut bytes = serialize(&sample_tensors());
    let claimed = bytes.len() as u64 + 1000;
    bytes[..8].copy_from_slice(&claimed.to_le_bytes());
    let (_d, path, err) = open_bytes("hdrlen", &bytes);
    assert!(
        matches!(err, Error::HeaderTooLong { header_len, .. } if header_len == claimed),
        "{err}"
    );
    assert_names(&err, &[&path]);
    // A huge u64 must not overflow anything either.
    bytes[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    let (_d, _, err) = open_bytes("hdrmax", &bytes);
    assert!(matches!(err, Error::HeaderTooLong { .. }), "{err}");
}

#[test]
fn file_shorter_than_prefix() {
    let (_d, path, err) = open_bytes("short", &[1, 2, 3]);
    assert!(matches!(err, Error::FileTooShort { len: 3, .. }), "{err}");
    assert_names(&err, &[&path]);
    let err = Checkpoint::from_bytes(vec![], "empty.safetensors").unwrap_err();
    assert!(matches!(err, Error::FileTooShort { len: 0, .. }), "{err}");
}

#[test]
fn garbage_header() {
    let (_d, path, err) = open_bytes("garbage", &hand_made("{\"a\": [1, 2", b""));
    assert!(matches!(err, Error::InvalidHeader { .. }), "{err}");
    assert_names(&err, &[&path, "JSON"]);

    let mut bytes = hand_made("{\"a\":1}", b"");
    bytes[9] = 0xFF; // not UTF-8
    let (_d, _, err) = open_bytes("utf8", &bytes);
    assert!(
        matches!(err, Error::InvalidHeader { ref reason, .. } if reason.contains("UTF-8")),
        "{err}"
    );

    // Valid JSON of the wrong shape names the tensor.
    let (_d, _, err) = open_bytes(
        "shape",
        &hand_made(
            r#"{"w":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}}"#,
            &[0; 8],
        ),
    );
    assert!(matches!(err, Error::InvalidHeader { .. }), "{err}");
    assert_names(&err, &["`w`", "shape"]);
    let (_d, _, err) = open_bytes("toplist", &hand_made("[1,2,3]", b""));
    assert!(matches!(err, Error::InvalidHeader { .. }), "{err}");
    let (_d, _, err) = open_bytes(
        "offs",
        &hand_made(r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}}"#, &[0; 8]),
    );
    assert_names(&err, &["`w`", "data_offsets"]);
}

#[test]
fn offsets_not_matching_dtype_and_shape() {
    let h = r#"{"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,8]}}"#;
    let (_d, path, err) = open_bytes("size", &hand_made(h, &[0; 12]));
    assert!(
        matches!(err, Error::SizeMismatch { found: 8, ref expected, .. } if expected == "12"),
        "{err}"
    );
    assert_names(&err, &[&path, "`w`", "BF16", "[2, 3]"]);
}

#[test]
fn overlapping_tensors() {
    let h = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
               "b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#;
    let (_d, path, err) = open_bytes("overlap", &hand_made(h, &[0; 12]));
    assert!(matches!(err, Error::OverlappingData { .. }), "{err}");
    assert_names(&err, &[&path, "`a`", "`b`"]);
}

#[test]
fn offsets_reversed_or_past_end() {
    let h = r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[5,3]}}"#;
    let (_d, _, err) = open_bytes("reversed", &hand_made(h, &[0; 8]));
    assert!(
        matches!(err, Error::DataOutOfRange { begin: 5, end: 3, .. }),
        "{err}"
    );
    let h = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551614,18446744073709551615]}}"#;
    let (_d, _, err) = open_bytes("far", &hand_made(h, &[0; 8]));
    assert!(matches!(err, Error::DataOutOfRange { .. }), "{err}");
}

#[test]
fn missing_tensor_and_wrong_shape() {
    let dir = TempDir::new("missing");
    let path = dir.write("model.safetensors", serialize(&sample_tensors()));
    let ck = Checkpoint::open(dir.path()).unwrap();

    let err = ck.to_f32("layers.1.mlp.up_proj.weight", &[2, 2]).unwrap_err();
    assert!(matches!(err, Error::MissingTensor { .. }), "{err}");
    // Names the tensor, the checkpoint, and a similar name that does exist.
    assert_names(
        &err,
        &[
            "layers.1.mlp.up_proj.weight",
            dir.path().to_str().unwrap(),
            "layers.0.mlp.up_proj.weight",
        ],
    );
    assert!(matches!(ck.info("nope"), Err(Error::MissingTensor { .. })));
    assert!(!ck.contains("nope"));

    let err = ck.to_f32("embed_tokens.weight", &[2, 3]).unwrap_err();
    assert!(
        matches!(err, Error::ShapeMismatch { ref expected, ref found, .. }
            if expected == &[2, 3] && found == &[3, 2]),
        "{err}"
    );
    assert_names(
        &err,
        &["embed_tokens.weight", "[3, 2]", "[2, 3]", path.to_str().unwrap()],
    );
}

#[test]
fn unsupported_dtypes() {
    let dir = TempDir::new("dtype");
    let path = dir.write(
        "model.safetensors",
        serialize(&[
            raw("q", safetensors::Dtype::I8, &[4], vec![1, 2, 3, 4]),
            raw("d", safetensors::Dtype::F64, &[1], 2.5f64.to_le_bytes().to_vec()),
            raw("f8", safetensors::Dtype::F8_E4M3, &[2], vec![0, 0]),
        ]),
    );
    let ck = Checkpoint::open(dir.path()).unwrap();
    for (name, dtype, shape) in [
        ("q", "I8", &[4usize][..]),
        ("d", "F64", &[1]),
        ("f8", "F8_E4M3", &[2]),
    ] {
        let err = ck.to_f32(name, shape).unwrap_err();
        assert!(
            matches!(err, Error::UnsupportedDtype { dtype: ref d, .. } if d == dtype),
            "{err}"
        );
        assert_names(
            &err,
            &[
                &format!("`{name}`"),
                dtype,
                "F32, F16 and BF16",
                path.to_str().unwrap(),
            ],
        );
        let err = ck
            .tensor::<burn_ndarray::NdArray<f32>, 1>(name, [shape[0]], &Default::default())
            .unwrap_err();
        assert!(matches!(err, Error::UnsupportedDtype { .. }), "{err}");
    }

    // A dtype string that safetensors does not define is rejected when opening.
    let h = r#"{"w":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,1]}}"#;
    let (_d, path, err) = open_bytes("unknown", &hand_made(h, &[0; 1]));
    assert!(matches!(err, Error::UnsupportedDtype { .. }), "{err}");
    assert_names(&err, &[&path, "`w`", "Q4_K"]);
}

#[test]
fn index_naming_a_missing_shard() {
    let dir = TempDir::new("noshard");
    dir.write(
        "model-00001-of-00002.safetensors",
        serialize(&[f32s("model.norm.weight", &[1], &[1.0])]),
    );
    let index = dir.write(
        "model.safetensors.index.json",
        r#"{"metadata":{},"weight_map":{
            "model.norm.weight":"model-00001-of-00002.safetensors",
            "lm_head.weight":"model-00002-of-00002.safetensors"}}"#,
    );
    let err = Checkpoint::open(dir.path()).unwrap_err();
    assert!(matches!(err, Error::MissingShard { .. }), "{err}");
    assert_names(
        &err,
        &[
            index.to_str().unwrap(),
            "model-00002-of-00002.safetensors",
            "lm_head.weight",
        ],
    );
}

#[test]
fn index_disagreeing_with_shards() {
    let dir = TempDir::new("badindex");
    dir.write(
        "s1.safetensors",
        serialize(&[f32s("model.norm.weight", &[1], &[1.0])]),
    );
    dir.write(
        "model.safetensors.index.json",
        r#"{"weight_map":{"model.norm.weight":"s1.safetensors","lm_head.weight":"s1.safetensors"}}"#,
    );
    let err = Checkpoint::open(dir.path()).unwrap_err();
    assert!(matches!(err, Error::InvalidIndex { .. }), "{err}");
    assert_names(
        &err,
        &["lm_head.weight", "s1.safetensors", "model.safetensors.index.json"],
    );

    for bad in [
        r#"{"weight_map":{"a":"../outside.safetensors"}}"#,
        r#"{"weight_map":{"a":"/etc/passwd"}}"#,
        r#"{"weight_map":{"a":3}}"#,
        r#"{"metadata":{}}"#,
    ] {
        dir.write("model.safetensors.index.json", bad);
        let err = Checkpoint::open(dir.path()).unwrap_err();
        assert!(matches!(err, Error::InvalidIndex { .. }), "{bad}: {err}");
    }
    dir.write("model.safetensors.index.json", "{not json");
    let err = Checkpoint::open(dir.path()).unwrap_err();
    assert!(matches!(err, Error::ConfigParse { .. }), "{err}");
}

#[test]
fn missing_directory_and_empty_directory() {
    let dir = TempDir::new("empty");
    let err = Checkpoint::open(dir.path()).unwrap_err();
    assert!(matches!(err, Error::NoCheckpoint { .. }), "{err}");
    assert_names(&err, &[dir.path().to_str().unwrap()]);

    let gone = dir.join("does-not-exist");
    let err = Checkpoint::open(&gone).unwrap_err();
    assert!(
        matches!(&err, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
        "{err}"
    );
    assert_names(&err, &["does-not-exist"]);
    let err = Checkpoint::open_file(dir.join("x.safetensors")).unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
}

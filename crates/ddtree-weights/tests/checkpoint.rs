//! Loading valid checkpoints: dtypes, alignment, sharding, name normalisation, burn tensors.

mod common;

use burn_ndarray::NdArray;
use common::*;
use ddtree_weights::safetensors::parse_header;
use ddtree_weights::{Checkpoint, Dtype, Error};
use half::{bf16, f16};

#[test]
fn f32_f16_bf16_round_trip_known_values() {
    let dir = TempDir::new("roundtrip");
    // Values exactly representable in each dtype, plus ones that must round like `half` does.
    let exact = [1.0f32, -2.0, 0.5, 0.25, 3.0, -0.125];
    let rounding = [0.1f32, 1.0 / 3.0, 1e-3, 300.7];
    dir.write(
        "model.safetensors",
        serialize(&[
            f32s("a32", &[2, 3], &exact),
            f16s("a16", &[2, 3], &exact),
            bf16s("abf", &[3, 2], &exact),
            f16s("r16", &[4], &rounding),
            bf16s("rbf", &[4], &rounding),
        ]),
    );
    let ck = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(ck.to_f32("a32", &[2, 3]).unwrap(), exact);
    assert_eq!(ck.to_f32("a16", &[2, 3]).unwrap(), exact);
    assert_eq!(ck.to_f32("abf", &[3, 2]).unwrap(), exact);
    let want16: Vec<f32> = rounding.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
    let wantbf: Vec<f32> = rounding.iter().map(|&v| bf16::from_f32(v).to_f32()).collect();
    assert_eq!(ck.to_f32("r16", &[4]).unwrap(), want16);
    assert_eq!(ck.to_f32("rbf", &[4]).unwrap(), wantbf);
    // bf16 keeps 8 bits of mantissa: 1/3 is not exact.
    assert_ne!(wantbf[1], 1.0 / 3.0);

    let info = ck.info("abf").unwrap();
    assert_eq!(
        (info.dtype, info.shape.as_slice()),
        (Dtype::BF16, &[3usize, 2][..])
    );
    assert_eq!(
        ck.names().collect::<Vec<_>>(),
        ["a16", "a32", "abf", "r16", "rbf"]
    );
}

#[test]
fn unaligned_data_section() {
    let dir = TempDir::new("unaligned");
    let vals = [1.5f32, -2.25, 1e-30, 7.0];
    let mut data: Vec<u8> = vec![0xEE]; // one pad byte: the f32 tensor starts at an odd offset
    data.extend(vals.iter().flat_map(|v| v.to_le_bytes()));
    data.extend(
        [1.0f32, -3.0]
            .iter()
            .flat_map(|v| bf16::from_f32(*v).to_bits().to_le_bytes()),
    );
    // Pad the header with spaces until 8 + header_len is odd.
    let mut header = String::from(
        r#"{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[1,17]},"b":{"dtype":"BF16","shape":[2],"data_offsets":[17,21]}}"#,
    );
    if header.len() % 2 == 0 {
        header.push(' ');
    }
    let bytes = hand_made(&header, &data);
    let parsed = parse_header(&bytes, "x".as_ref()).unwrap();
    assert_eq!(
        parsed.data_start % 2,
        1,
        "data section must start at an odd offset"
    );
    assert!(
        parsed.tensors.iter().all(|t| t.range.start % 2 == 0),
        "tensors at odd addresses"
    );
    let path = dir.write("unaligned.safetensors", &bytes);

    let ck = Checkpoint::open_file(&path).unwrap();
    assert_eq!(ck.to_f32("w", &[2, 2]).unwrap(), vals);
    assert_eq!(ck.to_f32("b", &[2]).unwrap(), [1.0, -3.0]);
    let t = ck
        .tensor::<NdArray<f32>, 2>("w", [2, 2], &Default::default())
        .unwrap();
    assert_eq!(t.into_data().to_vec::<f32>().unwrap(), vals);
    // Raw bytes are handed out as stored, unaligned.
    let raw = ck.bytes("b", Dtype::BF16, &[2]).unwrap();
    assert_eq!(raw, &data[17..21]);
}

fn write_sharded(dir: &TempDir, tensors: Vec<T>) {
    let (first, second) = tensors.split_at(2);
    dir.write("model-00001-of-00002.safetensors", serialize(first));
    dir.write("model-00002-of-00002.safetensors", serialize(second));
    let mut map = serde_json::Map::new();
    for t in first {
        map.insert(t.name.clone(), "model-00001-of-00002.safetensors".into());
    }
    for t in second {
        map.insert(t.name.clone(), "model-00002-of-00002.safetensors".into());
    }
    let index = serde_json::json!({"metadata": {"total_size": 0}, "weight_map": map});
    dir.write("model.safetensors.index.json", index.to_string());
}

#[test]
fn sharded_and_single_file_load_identical_values() {
    let single = TempDir::new("single");
    single.write("model.safetensors", serialize(&sample_tensors()));
    let sharded = TempDir::new("sharded");
    write_sharded(&sharded, sample_tensors());

    let a = Checkpoint::open(single.path()).unwrap();
    let b = Checkpoint::open(sharded.path()).unwrap();
    let names: Vec<&str> = a.names().collect();
    assert_eq!(names, b.names().collect::<Vec<_>>());
    assert_eq!(names.len(), 5);
    for name in names {
        let info = a.info(name).unwrap();
        assert_eq!(info, b.info(name).unwrap());
        assert_eq!(
            a.to_f32(name, &info.shape).unwrap(),
            b.to_f32(name, &info.shape).unwrap(),
            "{name}"
        );
    }
    // The tensors really come from two files.
    let f1 = b.file_of("embed_tokens.weight").unwrap().to_owned();
    let f2 = b.file_of("norm.weight").unwrap().to_owned();
    assert_ne!(f1, f2);
    assert_eq!(
        b.to_f32("embed_tokens.weight", &[3, 2]).unwrap(),
        [1.0, -2.0, 0.5, 0.25, 3.0, -0.125]
    );
}

#[test]
fn shards_without_index_and_odd_file_names() {
    let dir = TempDir::new("noindex");
    let tensors = sample_tensors();
    let (a, b) = tensors.split_at(3);
    dir.write("part-b.safetensors", serialize(b));
    dir.write("part-a.safetensors", serialize(a));
    dir.write("README.md", "not a checkpoint");
    let ck = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(ck.len(), 5);
    assert_eq!(ck.to_f32("norm.weight", &[2]).unwrap(), [1.0, 2.0]);

    let drafter = TempDir::new("drafter");
    drafter.write(
        "dflash.safetensors",
        serialize(&[
            f32s("fc.weight", &[1, 2], &[3.0, 4.0]),
            f32s("hidden_norm.weight", &[1], &[1.0]),
        ]),
    );
    let ck = Checkpoint::open(drafter.path()).unwrap();
    assert_eq!(
        ck.names().collect::<Vec<_>>(),
        ["fc.weight", "hidden_norm.weight"]
    );
    // open() on a file is open_file().
    let ck2 = Checkpoint::open(drafter.join("dflash.safetensors")).unwrap();
    assert_eq!(ck2.to_f32("fc.weight", &[1, 2]).unwrap(), [3.0, 4.0]);
}

#[test]
fn prefix_normalisation_drops_visual_and_mtp() {
    let dir = TempDir::new("prefix");
    let one = |n: &str| f32s(n, &[1], &[1.0]);
    dir.write(
        "model.safetensors",
        serialize(&[
            one("model.language_model.embed_tokens.weight"),
            one("model.language_model.layers.0.linear_attn.in_proj_qkv.weight"),
            one("model.language_model.layers.0.linear_attn.A_log"),
            one("model.language_model.norm.weight"),
            one("model.visual.blocks.0.attn.qkv.weight"),
            one("model.visual.merger.mlp.0.weight"),
            one("visual.patch_embed.proj.weight"),
            one("mtp.layers.0.mlp.up_proj.weight"),
            one("mtp.fc.weight"),
            one("lm_head.weight"),
        ]),
    );
    let ck = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(
        ck.names().collect::<Vec<_>>(),
        [
            "embed_tokens.weight",
            "layers.0.linear_attn.A_log",
            "layers.0.linear_attn.in_proj_qkv.weight",
            "lm_head.weight",
            "norm.weight",
        ]
    );
    assert_eq!(
        ck.raw_name("norm.weight"),
        Some("model.language_model.norm.weight")
    );
    // Asking with the raw name fails with a hint toward the normalised one.
    let err = ck.to_f32("model.language_model.norm.weight", &[1]).unwrap_err();
    assert!(matches!(err, Error::MissingTensor { .. }), "{err}");
    assert_names(
        &err,
        &["model.language_model.norm.weight", "ask for `norm.weight`"],
    );
}

#[test]
fn two_raw_names_normalising_to_one_is_an_error() {
    let dir = TempDir::new("collision");
    let path = dir.write(
        "model.safetensors",
        serialize(&[
            f32s("model.norm.weight", &[1], &[1.0]),
            f32s("model.language_model.norm.weight", &[1], &[2.0]),
        ]),
    );
    let err = Checkpoint::open(dir.path()).unwrap_err();
    assert!(
        matches!(err, Error::NameCollision { ref name, .. } if name == "norm.weight"),
        "{err}"
    );
    assert_names(
        &err,
        &[
            "model.norm.weight",
            "model.language_model.norm.weight",
            path.to_str().unwrap(),
        ],
    );
}

#[test]
fn same_tensor_in_two_shards_is_an_error() {
    let dir = TempDir::new("dupshard");
    dir.write(
        "a.safetensors",
        serialize(&[f32s("model.norm.weight", &[1], &[1.0])]),
    );
    dir.write(
        "b.safetensors",
        serialize(&[f32s("model.norm.weight", &[1], &[2.0])]),
    );
    let err = Checkpoint::open(dir.path()).unwrap_err();
    assert!(matches!(err, Error::DuplicateTensor { .. }), "{err}");
    assert_names(&err, &["model.norm.weight", "a.safetensors", "b.safetensors"]);
}

#[test]
fn burn_tensors_on_the_f32_backend() {
    let dir = TempDir::new("burn");
    dir.write("model.safetensors", serialize(&sample_tensors()));
    let ck = Checkpoint::open(dir.path()).unwrap();
    let dev = Default::default();
    let t = ck
        .tensor::<NdArray<f32>, 2>("embed_tokens.weight", [3, 2], &dev)
        .unwrap();
    assert_eq!(t.dims(), [3, 2]);
    assert_eq!(t.dtype(), burn_tensor::DType::F32);
    assert_eq!(
        t.into_data().to_vec::<f32>().unwrap(),
        [1.0, -2.0, 0.5, 0.25, 3.0, -0.125]
    );
    // (f64 is tested in tests/burn_f64.rs: burn 0.21 keys the default float dtype by device,
    // and NdArray<f32> and NdArray<f64> share the CPU device, so they cannot share a process.)
    let t = ck
        .tensor::<NdArray<f32>, 1>("layers.0.input_layernorm.weight", [2], &dev)
        .unwrap();
    assert_eq!(t.into_data().to_vec::<f32>().unwrap(), [1.5, -65504.0]);

    let err = ck
        .tensor::<NdArray<f32>, 1>("embed_tokens.weight", [6], &dev)
        .unwrap_err();
    assert!(
        matches!(err, Error::ShapeMismatch { ref expected, ref found, .. }
            if expected == &[6] && found == &[3, 2]),
        "{err}"
    );
}

#[test]
fn scalars_and_empty_tensors() {
    let dir = TempDir::new("scalar");
    dir.write(
        "model.safetensors",
        serialize(&[f32s("s", &[], &[4.0]), f32s("e", &[0, 3], &[])]),
    );
    let ck = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(ck.to_f32("s", &[]).unwrap(), [4.0]);
    assert_eq!(ck.to_f32("e", &[0, 3]).unwrap(), Vec::<f32>::new());
    let err = ck
        .tensor::<NdArray<f32>, 0>("s", [], &Default::default())
        .unwrap_err();
    assert!(matches!(err, Error::ZeroRank { .. }), "{err}");
}

#[test]
fn raw_bytes_check_dtype() {
    let dir = TempDir::new("bytes");
    let path = dir.write("model.safetensors", serialize(&sample_tensors()));
    let ck = Checkpoint::open(dir.path()).unwrap();
    let b = ck.bytes("embed_tokens.weight", Dtype::BF16, &[3, 2]).unwrap();
    assert_eq!(b.len(), 12);
    assert_eq!(bf16::from_bits(u16::from_le_bytes([b[2], b[3]])).to_f32(), -2.0);
    let err = ck.bytes("embed_tokens.weight", Dtype::F32, &[3, 2]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::WrongDtype {
                requested: Dtype::F32,
                found: Dtype::BF16,
                ..
            }
        ),
        "{err}"
    );
    assert_names(
        &err,
        &["embed_tokens.weight", "BF16", "F32", path.to_str().unwrap()],
    );
}

#[test]
fn in_memory_checkpoint() {
    let ck = Checkpoint::from_bytes(serialize(&sample_tensors()), "memory.safetensors").unwrap();
    assert_eq!(ck.len(), 5);
    assert_eq!(ck.path(), std::path::Path::new("memory.safetensors"));
    assert_eq!(
        ck.to_f32("lm_head.weight", &[3, 2]).unwrap(),
        [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    );
}

//! `Checkpoint::tensor` on an f64 backend. Its own test binary: burn 0.21 locks the default float
//! dtype per device on first use, and NdArray<f32> / NdArray<f64> share the CPU device.

mod common;

use burn_ndarray::NdArray;
use burn_tensor::DType;
use common::*;
use ddtree_weights::Checkpoint;

#[test]
fn f64_backend_gets_f64_values() {
    let ck = Checkpoint::from_bytes(serialize(&sample_tensors()), "mem.safetensors").unwrap();
    let dev = Default::default();
    let t = ck
        .tensor::<NdArray<f64>, 2>("layers.0.mlp.up_proj.weight", [2, 2], &dev)
        .unwrap();
    assert_eq!(t.dtype(), DType::F64);
    // f32 → f64 is exact, so the values are the stored f32 values widened.
    let want: Vec<f64> = [0.1f32, -0.2, 1e-8, 3.5e10].iter().map(|&v| v as f64).collect();
    assert_eq!(t.into_data().to_vec::<f64>().unwrap(), want);
    let t = ck
        .tensor::<NdArray<f64>, 2>("embed_tokens.weight", [3, 2], &dev)
        .unwrap();
    assert_eq!(
        t.into_data().to_vec::<f64>().unwrap(),
        [1.0, -2.0, 0.5, 0.25, 3.0, -0.125]
    );
}

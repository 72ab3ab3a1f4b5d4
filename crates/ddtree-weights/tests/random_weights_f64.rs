//! `RandomWeights` on an f64 backend: every tensor is made in the device's float dtype. Its own
//! test binary: burn 0.21 locks the default float dtype per device on first use, and
//! NdArray<f32> / NdArray<f64> share the CPU device.

use burn_ndarray::NdArray;
use burn_tensor::DType;
use ddtree_weights::{RandomWeights, TensorSource};

type B = NdArray<f64>;

#[test]
fn f64_backend_gets_f64_tensors() {
    let source = RandomWeights::default();
    let device = Default::default();
    let matrix = source
        .tensor::<B, 2>("layers.0.mlp.up_proj.weight", [8, 4], &device)
        .unwrap();
    assert_eq!(matrix.dtype(), DType::F64);
    let norm = source.tensor::<B, 1>("norm.weight", [4], &device).unwrap();
    assert_eq!(norm.dtype(), DType::F64);
    assert_eq!(norm.into_data().to_vec::<f64>().unwrap(), [1.0; 4]);
    let a_log = source
        .tensor::<B, 1>("layers.0.linear_attn.A_log", [4], &device)
        .unwrap();
    assert_eq!(a_log.dtype(), DType::F64);
}

//! The checks of `qwen3_fixtures.rs` on our CubeCL kernels through cubecl's wgpu runtime (f32;
//! in CI, Mesa's software Vulkan device): the models as the GPU runs them — decode steps on the
//! GEMV and the fused norms, the q/k norm + RoPE launch, the attention kernels with split keys
//! and ancestor bits, the argmax — against transformers' numbers. (Rows past the GEMV's eight
//! take burn's matmul here: the tensor-core kernels need an NVIDIA device, the H200 self-test.)
#![cfg(feature = "wgpu")]

mod common;

type B = ddtree_kernels::cube::Wgpu;

include!("qwen3_fixtures/checks.rs");

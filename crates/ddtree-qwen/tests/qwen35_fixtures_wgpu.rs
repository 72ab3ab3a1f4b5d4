//! The checks of `qwen35_fixtures.rs` on our CubeCL kernels through cubecl's wgpu runtime (f32,
//! e.g. Mesa's software Vulkan device): the hybrid models as the GPU runs them — the Gated
//! DeltaNet's conv, gate, delta-rule and gated-norm kernels over sequences and trees, the gated
//! attention layers on the GEMV, norm, RoPE and attention kernels — against transformers' numbers.
//!
//! Not in the CI command yet: one run of 73 with the earlier burn-op Gated DeltaNet path failed on
//! lavapipe for a cause not found (docs/perf-notes.md, eighth and ninth sessions). Run it with
//! `cargo test -p ddtree-qwen --features wgpu --test qwen35_fixtures_wgpu`.
#![cfg(feature = "wgpu")]

mod common;

type B = ddtree_kernels::cube::Wgpu;

include!("qwen35_fixtures/checks.rs");

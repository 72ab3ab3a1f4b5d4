//! The CubeCL kernels against the plain-burn reference in f32, on cubecl's wgpu runtime (in CI:
//! Mesa's software Vulkan device, lavapipe). The reference runs on the CPU backend from the same
//! inputs. A kernel that did not run leaves zeros or garbage (lavapipe reports no error for
//! unsupported features), so every test compares values.
#![cfg(feature = "wgpu")]

type Gpu = ddtree_kernels::cube::Wgpu;
/// Relative error allowed against the f32 reference (summation order only).
const TOL: f32 = 1e-5;
const NAME: &str = "f32";

include!("cube_kernels/checks.rs");

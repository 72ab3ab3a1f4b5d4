//! The CubeCL kernels against the plain-burn f32 reference in f16 (inputs rounded to f16 on
//! upload; the kernels accumulate in f32), on cubecl's wgpu runtime. See `cube_kernels_f32.rs`.
#![cfg(feature = "wgpu")]

type Gpu = burn_cubecl::CubeBackend<burn_wgpu::WgpuRuntime, half::f16, i32, u32>;
/// Relative error allowed: a few f16 ulps (2⁻¹¹ ≈ 4.9e-4) of input and output rounding.
const TOL: f32 = 4e-3;
const NAME: &str = "f16";

include!("cube_kernels/checks.rs");

//! The tree-verify and drafter linear `y = x · Wᵀ` (9–256 rows of `x`) on Hopper's warpgroup MMAs
//! (`wgmma`, sm_90a), fed by the tensor memory accelerator (TMA). Reference:
//! [`crate::reference::linear`]; the standalone prototype it follows: `tools/wgmma_linear.cu`.
//!
//! Why beside [`super::linear::linear_mma()`]: that kernel's warp MMAs (`mma.sync`) and
//! per-unit copies left the 65-row linears at 45–70 % of the H200's bandwidth. A warpgroup kernel
//! of cuBLAS's tile reads the weight 1.3–2× faster at 16–129 rows (docs/perf-notes.md, twenty-sixth
//! session). cubecl 0.10's IR has no `wgmma` and no wait on an mbarrier's phase, so the main loop
//! is CUDA C++ generated here ([`main_loop_source`]) and written into the kernel through cubecl's
//! comment path, as [`super::fence::device_fence()`] writes its fence. cubecl declares the
//! kernel, its tensor maps and its shared memory, and runs the epilogue. CUDA on sm_90 only.
//!
//! A cube is one warpgroup (128 units) and owns 64 rows of W — 64 output features, or with
//! `swiglu` 32 gate rows and the 32 matching up rows, so that one cube holds both halves of its
//! features. It walks its k-slice in chunks of 64 values (128 bytes, one row of the 128-byte
//! swizzle):
//! - one unit issues a chunk's TMA box copies (W's rows, and all `x` rows padded to `tokens` by
//!   the copy's zero fill) into one of [`STAGES`] stages; an mbarrier counts their bytes;
//! - every unit waits on it, and the warpgroup runs four m64nNk16 MMAs (N = `tokens`) from
//!   shared-memory descriptors;
//! - once every unit is done, the stage is refilled with the chunk [`STAGES`] ahead.
//!
//! The accumulators go through shared memory to the epilogue, which writes `y` (with `swiglu`,
//! `silu(gate) ⊙ up`) or, with k-slices, the f32 partial sums `[k_splits, rows, n_out]` that the
//! next launch adds up.

use cubecl::ir::{Variable, VariableKind};
use cubecl::prelude::*;
use std::fmt::Write;

use super::linear::silu_times;

/// Rows of W per cube: the warpgroup MMA's M.
pub const CUBE_ROWS: usize = 64;
/// k values per chunk: one 128-byte row of the 128-byte swizzle.
pub const CHUNK: usize = 64;
/// Chunks in flight per cube (four of 17–40 KB: two or three cubes per multiprocessor).
pub const STAGES: usize = 4;
/// The most `x` rows (the MMA's largest N, and the longest TMA box).
pub const MAX_TOKENS: usize = 256;
/// The most k-slices a launch splits `k` into.
pub const MAX_K_SPLITS: usize = 8;

/// The weight and `x` as tensor maps of 32-bit words (pairs of 2-byte values), copied in boxes
/// of 32 words (128 bytes) by [`CUBE_ROWS`] W rows (32 with `swiglu`) or `tokens` `x` rows,
/// 128-byte swizzled.
#[derive(CubeType, CubeLaunch)]
pub struct TileMaps {
    /// The weight `[n_out, k]`.
    pub w: TensorMap<u32, Tiled>,
    /// The rows `x: [rows, k]`.
    pub x: TensorMap<u32, Tiled>,
}

/// A launch's shape: `x` rows padded for the MMA, and k-slices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WgmmaShape {
    /// `x` rows rounded up to a multiple of 8 (the MMA's N).
    pub tokens: usize,
    /// k-slices (grid `y`); more than one writes partial sums.
    pub k_splits: usize,
}

impl WgmmaShape {
    /// The shape for `rows` of `x` times a `[n_out, k]` weight on `multiprocessors` cores, if
    /// the kernel takes it: the fewest k-slices that give at least 1.4 cubes per core (one cube
    /// per core leaves the last wave's cores idle while the grid's tail runs; the H100's
    /// measurements were within 3 % of the best of every configuration with this rule), each
    /// slice a whole number of chunks.
    pub fn choose(rows: usize, n_out: usize, k: usize, multiprocessors: usize) -> Option<Self> {
        let tokens = rows.div_ceil(8) * 8;
        if rows <= 1 || tokens > MAX_TOKENS || !k.is_multiple_of(CHUNK) || !n_out.is_multiple_of(CUBE_ROWS) {
            return None;
        }
        let chunks = k / CHUNK;
        let columns = n_out / CUBE_ROWS;
        let wanted = (multiprocessors * 7).div_ceil(5);
        let divisors = || (1..=MAX_K_SPLITS).filter(move |s| chunks.is_multiple_of(*s));
        let k_splits = divisors()
            .find(|s| columns * s >= wanted)
            .or_else(|| divisors().next_back())
            .unwrap_or(1);
        Some(Self { tokens, k_splits })
    }

    /// Bytes of one stage: 64 W rows and `tokens` `x` rows of 128 bytes.
    pub fn stage_bytes(&self) -> usize {
        (CUBE_ROWS + self.tokens) * CHUNK * 2
    }

    /// Shared memory per cube: the stages (1 KiB aligned, as the swizzle needs), their
    /// mbarriers.
    pub fn shared_bytes(&self) -> usize {
        1024 + STAGES * self.stage_bytes() + 8 * STAGES
    }
}

/// The cube's main loop, then its accumulators written to shared memory as `acc[n · 64 + r]`
/// (`x` row `n`, W row `r` of the cube). It runs in every unit; `w_map` and `x_map` are the
/// kernel's tensor-map parameters, `half` the row of the first up row with `swiglu`.
pub fn main_loop_source(
    w_map: &str,
    x_map: &str,
    shape: WgmmaShape,
    chunks: usize,
    half: Option<usize>,
    bf16: bool,
) -> String {
    let tokens = shape.tokens;
    let regs = tokens / 2;
    let stage = shape.stage_bytes();
    let w_bytes = CUBE_ROWS * CHUNK * 2;
    let kind = if bf16 { "bf16" } else { "f16" };
    let mut s = String::new();
    // The comment path prints the text between `/*` and `*/`: close it first, reopen it last.
    let _ = write!(
        s,
        "warpgroup MMA main loop (ddtree_kernels::cube::wgmma)\n*/ {{
const unsigned wg_tid = threadIdx.x;
const unsigned wg_base = ((unsigned)__cvta_generic_to_shared(dynamic_shared_mem) + 1023u) & ~1023u;
const unsigned wg_bars = wg_base + {STAGES}u * {stage}u;
const int wg_k0 = (int)blockIdx.y * {slice_words};
auto wg_copy = [&](unsigned dst, const void *map, int c0, int c1, unsigned bar) {{
  asm volatile(\"cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {{%2, %3}}], [%4];\\n\"
               :: \"r\"(dst), \"l\"(map), \"r\"(c0), \"r\"(c1), \"r\"(bar) : \"memory\");
}};
auto wg_issue = [&](unsigned chunk, unsigned s) {{
  const unsigned bar = wg_bars + 8u * s, dst = wg_base + s * {stage}u;
  const int kc = wg_k0 + (int)chunk * 32;
  asm volatile(\"mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\\n\" :: \"r\"(bar), \"r\"({stage}u) : \"memory\");
",
        slice_words = chunks * CHUNK / 2,
    );
    match half {
        None => {
            let _ = writeln!(
                s,
                "  wg_copy(dst, &{w_map}, kc, (int)blockIdx.x * {CUBE_ROWS}, bar);"
            );
        }
        Some(half) => {
            let _ = writeln!(
                s,
                "  wg_copy(dst, &{w_map}, kc, (int)blockIdx.x * 32, bar);\n  wg_copy(dst + 4096u, &{w_map}, kc, {half} + (int)blockIdx.x * 32, bar);"
            );
        }
    }
    let _ = write!(
        s,
        "  wg_copy(dst + {w_bytes}u, &{x_map}, kc, 0, bar);
}};
auto wg_desc = [](unsigned addr) -> unsigned long long {{
  return (unsigned long long)((addr & 0x3FFFFu) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}};
if (wg_tid == 0) {{
  for (unsigned s = 0; s < {STAGES}u; s++) asm volatile(\"mbarrier.init.shared::cta.b64 [%0], 1;\\n\" :: \"r\"(wg_bars + 8u * s));
  asm volatile(\"fence.mbarrier_init.release.cluster;\\n\" ::: \"memory\");
}}
__syncthreads();
if (wg_tid == 0) for (unsigned s = 0; s < {STAGES}u && s < {chunks}u; s++) wg_issue(s, s);
float wg_d[{regs}];
#pragma unroll
for (int i = 0; i < {regs}; i++) wg_d[i] = 0.f;
for (unsigned i = 0; i < {chunks}u; i++) {{
  const unsigned s = i % {STAGES}u, bar = wg_bars + 8u * s;
  for (unsigned tries = 0, done = 0; !done; tries++) {{
    asm volatile(\"{{\\n.reg .pred p;\\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\\nselp.u32 %0, 1, 0, p;\\n}}\\n\"
                 : \"=r\"(done) : \"r\"(bar), \"r\"((i / {STAGES}u) & 1u) : \"memory\");
    if (tries > (1u << 24)) __trap();
  }}
  const unsigned at = wg_base + s * {stage}u;
  asm volatile(\"wgmma.fence.sync.aligned;\\n\" ::: \"memory\");
"
    );
    let pin = |s: &mut String| {
        let _ = writeln!(
            s,
            "  #pragma unroll\n  for (int i = 0; i < {regs}; i++) asm volatile(\"\" : \"+f\"(wg_d[i]) :: \"memory\");"
        );
    };
    pin(&mut s);
    let outs = (0..regs).map(|i| format!("%{i}")).collect::<Vec<_>>().join(", ");
    let operands = (0..regs)
        .map(|i| format!("\"+f\"(wg_d[{i}])"))
        .collect::<Vec<_>>()
        .join(", ");
    for step in 0..CHUNK / 16 {
        let _ = writeln!(
            s,
            "  asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{p}, 0;\\nwgmma.mma_async.sync.aligned.m64n{tokens}k16.f32.{kind}.{kind} {{{outs}}}, %{a}, %{b}, p, 1, 1, 0, 0;\\n}}\\n\"
               : {operands}
               : \"l\"(wg_desc(at + {ao}u)), \"l\"(wg_desc(at + {bo}u)), \"r\"(1));",
            p = regs + 2,
            a = regs,
            b = regs + 1,
            ao = 32 * step,
            bo = w_bytes + 32 * step,
        );
    }
    let _ = writeln!(
        s,
        "  asm volatile(\"wgmma.commit_group.sync.aligned;\\n\" ::: \"memory\");\n  asm volatile(\"wgmma.wait_group.sync.aligned 0;\\n\" ::: \"memory\");"
    );
    pin(&mut s);
    let _ = write!(
        s,
        "  __syncthreads();
  if (wg_tid == 0 && i + {STAGES}u < {chunks}u) wg_issue(i + {STAGES}u, s);
}}
float *wg_acc = reinterpret_cast<float *>(dynamic_shared_mem);
const unsigned wg_row = (wg_tid / 32) * 16 + (wg_tid % 32) / 4;
#pragma unroll
for (unsigned c = 0; c < {tiles}u; c++) {{
  const unsigned n = c * 8 + (wg_tid % 4) * 2;
  wg_acc[n * 64 + wg_row] = wg_d[4 * c];
  wg_acc[(n + 1) * 64 + wg_row] = wg_d[4 * c + 1];
  wg_acc[n * 64 + wg_row + 8] = wg_d[4 * c + 2];
  wg_acc[(n + 1) * 64 + wg_row + 8] = wg_d[4 * c + 3];
}}
}} /* end of the warpgroup MMA main loop",
        tiles = tokens / 8,
    );
    s
}

/// The name cubecl's C++ back end gives a tensor-map parameter.
fn tensor_map_name(variable: &Variable) -> String {
    match variable.kind {
        VariableKind::TensorMapInput(id) | VariableKind::TensorMapOutput(id) => format!("tensor_map_{id}"),
        other => panic!("wgmma: expected a tensor map parameter, got {other:?}"),
    }
}

/// [`main_loop_source`] written into the kernel (every unit runs it). Its arguments are read at
/// expansion only, hence unused in the host-side function the macro also generates.
#[cube]
#[allow(unused_variables)]
fn main_loop(
    maps: &TileMaps,
    #[comptime] shape: WgmmaShape,
    #[comptime] chunks: usize,
    #[comptime] half: Option<usize>,
    #[comptime] bf16: bool,
) {
    intrinsic!(|scope| {
        let source = main_loop_source(
            &tensor_map_name(&maps.w.expand),
            &tensor_map_name(&maps.x.expand),
            shape,
            chunks,
            half,
            bf16,
        );
        cubecl::frontend::cube_comment::expand(scope, &source)
    })
}

/// `y = x · Wᵀ` on warpgroup MMAs (the module's documentation has the scheme). `maps`: the
/// weight `[n_out, k]` and `x: [rows, k]` ([`TileMaps`], W's box 32 rows with `swiglu`); `y:
/// [rows, n_out]` (with `swiglu`, `[rows, n_out / 2] = silu(gate) ⊙ up` of the fused gate/up
/// weight's halves) when `k_splits` is 1, else `partial: [k_splits, rows, n_out]` f32. Launch
/// with `CubeDim = 128`, cubes `(n_out / 64, k_splits)`, CUDA on sm_90 only.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn linear_wgmma<F: Float>(
    maps: &TileMaps,
    y: &mut Array<F>,
    partial: &mut Array<f32>,
    rows: usize,
    #[comptime] n_out: usize,
    #[comptime] k: usize,
    #[comptime] tokens: usize,
    #[comptime] k_splits: usize,
    #[comptime] swiglu: bool,
    #[comptime] bf16: bool,
) {
    let shape = comptime!(WgmmaShape { tokens, k_splits });
    let acc = SharedMemory::<f32>::new(comptime!(shape.shared_bytes().div_ceil(4)));
    let half = comptime!(if swiglu { Some(n_out / 2) } else { None });
    main_loop(maps, shape, comptime!(k / CHUNK / k_splits), half, bf16);
    sync_cube();
    let unit = UNIT_POS as usize;
    let slice = CUBE_POS_Y as usize;
    if comptime!(swiglu) {
        // Unit `j` of each group of 32 takes feature `j`: its gate in the cube's row `j`, its up
        // in row `32 + j`; four rows of `x` at a time.
        let half = comptime!(n_out / 2);
        let j = unit % 32;
        let f = CUBE_POS_X as usize * 32 + j;
        let mut n = unit / 32;
        while n < rows {
            let gate = acc[n * 64 + j];
            let up = acc[n * 64 + 32 + j];
            if comptime!(k_splits == 1) {
                y[n * half + f] = silu_times::<F>(gate, up);
            } else {
                let at = (slice * rows + n) * n_out + f;
                partial[at] = gate;
                partial[at + half] = up;
            }
            n += 4;
        }
    } else {
        let j = unit % 64;
        let f = CUBE_POS_X as usize * 64 + j;
        let mut n = unit / 64;
        while n < rows {
            let value = acc[n * 64 + j];
            if comptime!(k_splits == 1) {
                y[n * n_out + f] = F::cast_from(value);
            } else {
                partial[(slice * rows + n) * n_out + f] = value;
            }
            n += 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choose_gives_each_core_more_than_one_cube() {
        // Qwen3-8B's 65-row verify on 132 cores: QKV 96 columns × 2 slices, o_proj 64 × 4 (3
        // does not divide its 64 chunks), gate/up 384 × 1, down 64 × 3, the LM head 2374 × 1.
        let pick = |n, k| WgmmaShape::choose(65, n, k, 132).map(|s| s.k_splits);
        assert_eq!(pick(6144, 4096), Some(2));
        assert_eq!(pick(4096, 4096), Some(4));
        assert_eq!(pick(24576, 4096), Some(1));
        assert_eq!(pick(4096, 12288), Some(3));
        assert_eq!(pick(151936, 4096), Some(1));
        assert_eq!(
            WgmmaShape::choose(65, 6144, 4096, 132).map(|s| s.tokens),
            Some(72)
        );
        assert_eq!(
            WgmmaShape::choose(16, 6144, 4096, 132).map(|s| s.tokens),
            Some(16)
        );
        // Not taken: one row, more than 256, k not whole chunks, n_out not whole cubes.
        assert_eq!(WgmmaShape::choose(1, 6144, 4096, 132), None);
        assert_eq!(WgmmaShape::choose(257, 6144, 4096, 132), None);
        assert_eq!(WgmmaShape::choose(65, 6144, 4000, 132), None);
        assert_eq!(WgmmaShape::choose(65, 6100, 4096, 132), None);
        // Few chunks: the most slices that divide them.
        assert_eq!(WgmmaShape::choose(65, 64, 192, 132).map(|s| s.k_splits), Some(3));
    }

    #[test]
    fn main_loop_names_its_maps_and_fits_the_comment() {
        let shape = WgmmaShape {
            tokens: 72,
            k_splits: 2,
        };
        let source = main_loop_source("tensor_map_0", "tensor_map_1", shape, 32, Some(12288), true);
        assert!(source.starts_with("warpgroup MMA main loop"));
        assert!(source.contains("\n*/ {"));
        assert!(source.ends_with("/* end of the warpgroup MMA main loop"));
        // Only the opening and closing of the comment path: no other `*/` in the C++.
        assert_eq!(source.matches("*/").count(), 1);
        assert_eq!(source.matches("/*").count(), 1);
        assert!(source.contains("&tensor_map_0, kc, 12288 + (int)blockIdx.x * 32"));
        assert!(source.contains("&tensor_map_1, kc, 0, bar"));
        assert_eq!(
            source
                .matches("wgmma.mma_async.sync.aligned.m64n72k16.f32.bf16.bf16")
                .count(),
            4
        );
        assert!(source.contains("%35}, %36, %37, p"));
        assert_eq!(shape.shared_bytes(), 1024 + 4 * (64 + 72) * 128 + 32);
    }
}

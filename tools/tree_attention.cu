// How fast can a well-written tensor-core attention of one tree-verify block be on an H100/H200
// (sm_90a) at Qwen3-8B's shapes? A standalone FlashAttention-2-style kernel to set beside the
// project's CubeCL tree attention (about 30 µs per layer at 65 rows plus a 6 µs split-combine
// launch on an H100), checked against a plain f32 reference before it is timed.
//
// The computation, per layer: 32 query heads, 8 KV heads (query head h reads KV head h / 4),
// head_dim 128, 2048 committed prefix keys, `rows` block rows. q, out: bf16 [rows, 32, 128];
// K, V caches: bf16 [8, 4096, 128] with keys 0..2048 the prefix and 2048 + c the block's row c.
// Row r sees every prefix key and block key c iff c is r or an ancestor of r in a random tree
// (node r ≥ 1 has its parent uniform in [max(0, r − 12), r)), given as u32 ancestor bits,
// ceil(rows / 32) words per row. out = softmax(q·kᵀ / sqrt(128)) · V, f32 accumulation.
//
// The kernel (`tree_attn`): a "query" is a (row, head) pair of one KV head, numbered
// j = row · 4 + head_in_group, so 4 · rows queries per KV head. A CTA takes one KV head, a block of
// queries (each warp one or two m16 tiles) and a contiguous split of the keys; grid = (8 KV heads,
// splits, query blocks). Q is staged in shared memory once (and, for one m16 tile per warp, kept
// in registers as A fragments); K and V stream through a ring of `cp.async` stages, each 256-byte
// row's 16-byte chunks XOR-swizzled by row % 8 so that `ldmatrix` reads them without bank
// conflicts (`.trans` for V). S = Q·Kᵀ and O += P·V
// are `mma.sync.m16n8k16` bf16 → f32; the online softmax runs on S's accumulator fragments (exp2
// with scale · log2 e folded into one FMA), and S's fragments become P's A fragments in registers.
// Only key steps that reach the block's keys or pass the split's end test the mask. PSPLIT = 1
// splits each weight p into bf16 hi + bf16 lo (p − hi) and issues two MMAs per V fragment, so P·V
// is as exact as f32 weights (the project kernel's choice); PSPLIT = 0 uses bf16(p) alone, as
// FlashAttention does. With more than one split, each CTA writes f32 partial outputs and its
// per-query running max and sum, and `combine` (one warp per query, lanes over head_dim) merges
// them; with one split the attention writes `out` itself.
//
// Every configuration is checked twice before it is timed: on uniform [-1, 1) q, K, V (max abs
// error vs the f32 reference; FAIL above 2e-2, or above 2e-2 of the reference's largest value:
// the outputs are averages of ~2000 values, at most ~0.06, so 2e-2 absolute alone would pass a
// badly wrong kernel), and with the prefix's V rows zeroed, so the output comes only from the
// tree's keys and a wrong mask bit, split merge or fragment shows as a large relative error (FAIL
// above 2e-2 of the largest value). A correct kernel's relative errors are bf16 output rounding,
// about 3e-3 (psplit 0 adds bf16 weights: about 4e-3). Timing: the median of five runs of 32
// layers back to back (attention + combine), each layer on the next of 8 K/V cache copies
// (16.8 MB each, more than the L2 holds).
//
// Build and run on the GPU machine (from the repository root):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/tree_attention tools/tree_attention.cu
//   /tmp/tree_attention [rows...]        # 65 by default; /tmp/tree_attention 17 65 129 for all
// Output: a table of the kernel variants (registers, spilled bytes, CTAs per SM), then per row
// count the K/V bytes and FLOPs of a layer and one line per configuration, e.g. (an H100 80GB
// HBM3, twenty-ninth session; docs/perf-notes.md)
//   rows 65  warps 4  q/warp 16  keys/step 64  stages 2  psplit 1  splits  6  regs 218  ctas/SM 2
//     err 1.2e-04  rel 2.2e-03  tree rel 2.9e-03  us 22.27
// and a line naming the fastest passing configuration per (rows, psplit).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda_timing.h"

using bf16 = __nv_bfloat16;

constexpr int Q_HEADS = 32, KV_HEADS = 8, GROUP = Q_HEADS / KV_HEADS, HEAD_DIM = 128;
constexpr int PREFIX = 2048, CAPACITY = 4096;
constexpr int ROW_BYTES = HEAD_DIM * 2;  // one key's (or query's) 256 bytes in shared memory
constexpr int CHUNKS = ROW_BYTES / 16;   // 16-byte chunks per row
constexpr int MAX_SPLITS = 32;           // partial buffers are sized for this many splits
constexpr int LAYERS = 32;               // layers back to back per timing
constexpr int COPIES = 8;                // K/V cache copies in rotation

// ---- device helpers ----

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global → shared; `src_bytes` 0 writes zeros (and reads nothing).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8×8 b16 matrices; lane i gives the address of row i % 8 of matrix i / 8, and register m
// of lane l receives matrix m's row l / 4, elements 2 (l % 4) and + 1 (`.trans`: the transpose's).
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// c (16×8 f32) += a (16×16 bf16, row-major) · b (16×8 bf16, col-major).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as a bf16 pair (the lower column in the low half, as the MMA fragments want).
__device__ __forceinline__ uint32_t pack_bf16(float lo_col, float hi_col) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo_col, hi_col);
  uint32_t u;
  memcpy(&u, &h, 4);
  return u;
}

// hi = bf16(a, b) and lo = bf16 of what hi missed, so hi + lo carries p to about 2^-17.
__device__ __forceinline__ void split_bf16(float a, float b, uint32_t& hi, uint32_t& lo) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  float2 back = __bfloat1622float2(h);
  memcpy(&hi, &h, 4);
  lo = pack_bf16(a - back.x, b - back.y);
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a staged [rows, 128] bf16 tile. Rows are
// 256 bytes, so without the XOR the 8 rows one ldmatrix matrix reads would share their banks.
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  return (uint32_t)(row * ROW_BYTES + ((chunk ^ (row & 7)) << 4));
}

struct Params {
  const bf16* q;         // [rows, 32, 128]
  const bf16* k;         // [8, CAPACITY, 128]
  const bf16* v;         // [8, CAPACITY, 128]
  const uint32_t* anc;   // [rows, words] ancestor bits (a row's own bit set)
  bf16* out;             // [rows, 32, 128] (one split)
  float* part_o;         // [splits, rows · 32, 128] unnormalised partial outputs (several splits)
  float2* part_ml;       // [splits, rows · 32]: running max (log2 units) and sum
  int rows, words, nkeys, per_split;
  float scale_log2;      // 1/sqrt(128) · log2(e)
};

// ---- the attention ----

// WARPS warps of QW (16 or 32) queries each; KS keys per step; STAGES K/V stages in flight.
template <int WARPS, int QW, int KS, int STAGES, bool PSPLIT>
__global__ void __launch_bounds__(WARPS * 32, 1) tree_attn(Params p) {
  constexpr int THREADS = WARPS * 32, MT = QW / 16, QB = WARPS * QW;
  constexpr int NT = KS / 8;             // S n8 tiles per step
  constexpr int KT = HEAD_DIM / 16;      // k16 tiles of Q·Kᵀ
  constexpr int DT = HEAD_DIM / 8;       // O n8 tiles
  constexpr int TILE_BYTES = KS * ROW_BYTES;
  constexpr bool Q_REGS = MT == 1;       // two tiles' Q fragments (64 registers) would not fit
  static_assert(QW == 16 || QW == 32, "one or two m16 tiles per warp");
  static_assert(KS % 16 == 0 && KS % (THREADS / CHUNKS) == 0 && (THREADS / CHUNKS) % 8 == 0,
                "whole copies per thread, one swizzle term per thread");
  static_assert(STAGES >= 2, "a ring of at least two stages");
  static_assert(PREFIX % KS == 0 && KS % 32 == 0, "steps never straddle the prefix's end; whole mask words");

  extern __shared__ __align__(128) unsigned char smem[];
  // 256-byte aligned (the launch adds 256 bytes), so a chunk's swizzle is an XOR on the address.
  const uint32_t s_q = (smem_u32(smem) + 255u) & ~255u;
  const uint32_t s_kv = s_q + QB * ROW_BYTES;  // stage s: K at s_kv + 2 s TILE_BYTES, then V

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int kvh = blockIdx.x, split = blockIdx.y;
  const int nq = GROUP * p.rows;
  const int q0 = blockIdx.z * QB;     // the CTA's first query
  const int qw0 = q0 + warp * QW;     // this warp's first query
  const bool active = qw0 < nq;       // warp-uniform: a warp with no query only copies
  const int k0 = split * p.per_split;
  const int kend = min(k0 + p.per_split, p.nkeys);
  const int nsteps = k0 < kend ? (kend - k0 + KS - 1) / KS : 0;
  const bf16* kbase = p.k + (size_t)kvh * CAPACITY * HEAD_DIM;
  const bf16* vbase = p.v + (size_t)kvh * CAPACITY * HEAD_DIM;

  // Q: query j is (row j / 4, head kvh · 4 + j % 4); queries past the last are zeros.
  for (int i = tid; i < QB * CHUNKS; i += THREADS) {
    const int r = i / CHUNKS, c = i % CHUNKS, j = q0 + r;
    const bool ok = j < nq;
    const bf16* src = ok ? p.q + ((size_t)(j / GROUP) * Q_HEADS + kvh * GROUP + j % GROUP) * HEAD_DIM + c * 8 : p.q;
    cp_async16(s_q + swz(r, c), src, ok ? 16 : 0);
  }
  cp_async_commit();

  // Step `step`'s keys into stage `stage` (= step % STAGES). Thread tid copies chunk tid % 16 of
  // keys tid / 16 + i · RSTEP: the same swizzle term for every i (RSTEP is a multiple of 8), so
  // one shared and one global offset per thread, plus immediates. Keys past the split's end (only
  // in its last step) copy its last key, masked later: in bounds, and finite, so 0 · V stays 0.
  constexpr int RSTEP = THREADS / CHUNKS;
  const int r0 = tid / CHUNKS, c0 = tid % CHUNKS;
  const uint32_t dst0 = swz(r0, c0);
  auto load_tile = [&](int step, int stage) {
    const uint32_t sk = s_kv + stage * 2 * TILE_BYTES + dst0, sv = sk + TILE_BYTES;
    const int kb = k0 + step * KS;
    if (kb + KS <= kend) {
      const bf16* ks = kbase + (size_t)(kb + r0) * HEAD_DIM + c0 * 8;
      const bf16* vs = vbase + (size_t)(kb + r0) * HEAD_DIM + c0 * 8;
#pragma unroll
      for (int i = 0; i < KS / RSTEP; ++i) {
        cp_async16(sk + i * RSTEP * ROW_BYTES, ks + i * RSTEP * HEAD_DIM, 16);
        cp_async16(sv + i * RSTEP * ROW_BYTES, vs + i * RSTEP * HEAD_DIM, 16);
      }
    } else {
#pragma unroll
      for (int i = 0; i < KS / RSTEP; ++i) {
        const size_t off = (size_t)min(kb + r0 + i * RSTEP, kend - 1) * HEAD_DIM + c0 * 8;
        cp_async16(sk + i * RSTEP * ROW_BYTES, kbase + off, 16);
        cp_async16(sv + i * RSTEP * ROW_BYTES, vbase + off, 16);
      }
    }
  };
  // One commit group per step, empty ones included, so wait_group counts stay uniform.
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < nsteps) load_tile(s, s);
    cp_async_commit();
  }

  // ldmatrix addresses. Q (A) and V (B, .trans): matrices {rows 0-7, 8-15} × {chunk +0, +1}, so
  // lane l gives row (l & 7) + 8 ((l >> 3) & 1), chunk + (l >> 4): registers {a0a1, a2a3, a4a5,
  // a6a7} for Q; for V {b0, b1} of d tile 2 dp and {b0, b1} of d tile 2 dp + 1. K (B, not
  // transposed): matrices {keys 0-7: chunk +0, +1}, {keys 8-15: chunk +0, +1}, so lane l gives key
  // (l & 7) + 8 (l >> 4), chunk + ((l >> 3) & 1): {b0, b1} of key tile 2 np, then of 2 np + 1.
  // Every row these name is ≡ lane (mod 8), so with 256-byte rows on a 256-byte aligned base the
  // swizzled address of chunk 2 x + c is (base + row · 256 + ((c ^ (lane & 7)) << 4)) ^ (x << 5):
  // a lane offset computed once, then an XOR with an immediate per fragment (adding whole rows
  // leaves bits 4-7 alone).
  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_chunk = lane >> 4;
  const int k_row = (lane & 7) + (lane >> 4) * 8, k_chunk = (lane >> 3) & 1;
  const uint32_t a_lane = a_row * ROW_BYTES + ((a_chunk ^ (lane & 7)) << 4);
  const uint32_t k_lane = k_row * ROW_BYTES + ((k_chunk ^ (lane & 7)) << 4);
  const uint32_t q_warp = s_q + warp * QW * ROW_BYTES + a_lane;  // + mt · 16 rows

  uint32_t qf[Q_REGS ? KT : 1][4];
  cp_async_wait<STAGES - 1>();  // Q's group is in (the K/V groups may still be in flight)
  __syncthreads();
  if constexpr (Q_REGS) {
    if (active) {
#pragma unroll
      for (int kt = 0; kt < KT; ++kt) ldsm_x4(qf[kt], q_warp ^ (kt << 5));
    }
  }

  float o[MT][DT][4];
  float m_run[MT][2], l_run[MT][2];  // rows g and g + 8 of each tile; m in log2 units
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][dt][e] = 0.f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      m_run[mt][h] = -INFINITY;
      l_run[mt][h] = 0.f;
    }
  }
  const float sl2 = p.scale_log2;

  int read_stage = 0, write_stage = STAGES - 1;  // step it's stage, step it + STAGES − 1's
  for (int it = 0; it < nsteps; ++it) {
    cp_async_wait<STAGES - 2>();  // this thread's copies of step `it` are in
    __syncthreads();              // everyone's are, and everyone is done with step it − 1's stage
    if (it + STAGES - 1 < nsteps) load_tile(it + STAGES - 1, write_stage);  // step it − 1's stage
    cp_async_commit();
    const int stage = read_stage;
    read_stage = read_stage + 1 == STAGES ? 0 : read_stage + 1;
    write_stage = write_stage + 1 == STAGES ? 0 : write_stage + 1;
    if (!active) continue;

    const uint32_t sk = s_kv + stage * 2 * TILE_BYTES, sv = sk + TILE_BYTES;
    const int kb = k0 + it * KS;

    // S = Q · Kᵀ: every K fragment serves all MT tiles.
    float s[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
#pragma unroll
    for (int kt = 0; kt < KT; ++kt) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (Q_REGS) {
#pragma unroll
          for (int e = 0; e < 4; ++e) a[mt][e] = qf[kt][e];
        } else {
          ldsm_x4(a[mt], (q_warp + mt * 16 * ROW_BYTES) ^ (kt << 5));
        }
      }
#pragma unroll
      for (int np = 0; np < KS / 16; ++np) {
        uint32_t b[4];
        ldsm_x4(b, ((sk + k_lane) ^ (kt << 5)) + np * 16 * ROW_BYTES);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(s[mt][2 * np], a[mt], b[0], b[1]);
          mma_bf16(s[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }

    // Mask, only where the step reaches the block's keys or the split's end. S fragment: lane
    // holds rows g (e = 0, 1) and g + 8 (e = 2, 3), keys nt · 8 + 2 t + (e & 1). A step never
    // straddles the prefix's end (PREFIX and every split start are multiples of KS), so its keys
    // are all prefix keys (visible up to the split's end) or all block keys c = cb.., whose bits
    // are KS / 32 whole words of the query's ancestor row.
    if (kb + KS > PREFIX || kb + KS > kend) {
      const int cb = kb - PREFIX;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int j = qw0 + mt * 16 + g + 8 * h;
          const bool qok = j < nq;  // a padding query sees only the prefix
          uint32_t bits[KS / 32];
#pragma unroll
          for (int w = 0; w < KS / 32; ++w) {
            const int wi = cb / 32 + w;
            bits[w] = cb < 0                   ? 0xffffffffu
                      : qok && wi < p.words ? __ldg(p.anc + (size_t)(j / GROUP) * p.words + wi)
                                            : 0u;
          }
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int key = kb + nt * 8 + 2 * t + e;
              const bool vis = key < kend && ((bits[nt / 4] >> ((nt % 4) * 8 + 2 * t + e)) & 1u);
              if (!vis) s[mt][nt][2 * h + e] = -INFINITY;
            }
        }
    }

    // Online softmax per row (a row's 4 lanes share it: quad shuffles).
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m_run[mt][h], mx * sl2);
        // A row with nothing visible yet keeps m = −inf; subtract 0 then, not −inf (NaN).
        const float m_use = m_new == -INFINITY ? 0.f : m_new;
        const float corr = exp2f(m_run[mt][h] - m_use);
        m_run[mt][h] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float pv = exp2f(fmaf(s[mt][nt][2 * h + e], sl2, -m_use));
            s[mt][nt][2 * h + e] = pv;
            sum += pv;
          }
        l_run[mt][h] = l_run[mt][h] * corr + sum;  // this lane's share; the quad's sum at the end
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
          o[mt][dt][2 * h] *= corr;
          o[mt][dt][2 * h + 1] *= corr;
        }
      }

    // O += P · V. P's A fragment for keys kk · 16.. is S tiles 2 kk (a0..a3) and 2 kk + 1 (a4..a7).
#pragma unroll
    for (int kk = 0; kk < KS / 16; ++kk) {
      uint32_t ph[MT][4], pl[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (PSPLIT) {
          split_bf16(s[mt][2 * kk][0], s[mt][2 * kk][1], ph[mt][0], pl[mt][0]);
          split_bf16(s[mt][2 * kk][2], s[mt][2 * kk][3], ph[mt][1], pl[mt][1]);
          split_bf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1], ph[mt][2], pl[mt][2]);
          split_bf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3], ph[mt][3], pl[mt][3]);
        } else {
          ph[mt][0] = pack_bf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
          ph[mt][1] = pack_bf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
          ph[mt][2] = pack_bf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
          ph[mt][3] = pack_bf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
      }
      // Opaque to the compiler, so it forms the 8 XORed V addresses for each kk rather than
      // holding them in 8 registers from the first kk to the last (two tiles per warp spilled).
      uint32_t v_base = sv + a_lane + kk * 16 * ROW_BYTES;
      asm volatile("" : "+r"(v_base));
#pragma unroll
      for (int dp = 0; dp < DT / 2; ++dp) {
        uint32_t b[4];
        ldsm_x4_trans(b, v_base ^ (dp << 5));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(o[mt][2 * dp], ph[mt], b[0], b[1]);
          mma_bf16(o[mt][2 * dp + 1], ph[mt], b[2], b[3]);
          if constexpr (PSPLIT) {
            mma_bf16(o[mt][2 * dp], pl[mt], b[0], b[1]);
            mma_bf16(o[mt][2 * dp + 1], pl[mt], b[2], b[3]);
          }
        }
      }
    }
  }
  cp_async_wait<0>();
  if (!active) return;

  // The quad's sums (every lane shuffles before any lane skips a padding query).
  float l_sum[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = l_run[mt][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      l_sum[mt][h] = l;
    }
  const int n_out = p.rows * Q_HEADS;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int j = qw0 + mt * 16 + g + 8 * h;
      if (j >= nq) continue;
      const int oi = (j / GROUP) * Q_HEADS + kvh * GROUP + j % GROUP;  // output (row, head)
      if (gridDim.y == 1) {
        const float inv = l_sum[mt][h] > 0.f ? 1.f / l_sum[mt][h] : 0.f;
        bf16* dst = p.out + (size_t)oi * HEAD_DIM + 2 * t;
#pragma unroll
        for (int dt = 0; dt < DT; ++dt)
          *reinterpret_cast<uint32_t*>(dst + dt * 8) = pack_bf16(o[mt][dt][2 * h] * inv, o[mt][dt][2 * h + 1] * inv);
      } else {
        float* dst = p.part_o + ((size_t)split * n_out + oi) * HEAD_DIM + 2 * t;
#pragma unroll
        for (int dt = 0; dt < DT; ++dt)
          *reinterpret_cast<float2*>(dst + dt * 8) = make_float2(o[mt][dt][2 * h], o[mt][dt][2 * h + 1]);
        if (t == 0) p.part_ml[(size_t)split * n_out + oi] = make_float2(m_run[mt][h], l_sum[mt][h]);
      }
    }
}

// Merges the splits: one warp per output (row, head), 4 of head_dim per lane.
__global__ void __launch_bounds__(128) combine(const float* part_o, const float2* part_ml, bf16* out, int n_out,
                                               int splits) {
  const int oi = blockIdx.x * 4 + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (oi >= n_out) return;
  float m = -INFINITY;
  for (int s = 0; s < splits; ++s) m = fmaxf(m, part_ml[(size_t)s * n_out + oi].x);
  float l = 0.f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s = 0; s < splits; ++s) {
    const float2 ml = part_ml[(size_t)s * n_out + oi];
    const float w = ml.x == -INFINITY ? 0.f : exp2f(ml.x - m);  // a split that saw nothing weighs 0
    l += w * ml.y;
    const float4 po = reinterpret_cast<const float4*>(part_o + ((size_t)s * n_out + oi) * HEAD_DIM)[lane];
    acc.x += w * po.x;
    acc.y += w * po.y;
    acc.z += w * po.z;
    acc.w += w * po.w;
  }
  const float inv = l > 0.f ? 1.f / l : 0.f;
  uint2 pk;
  pk.x = pack_bf16(acc.x * inv, acc.y * inv);
  pk.y = pack_bf16(acc.z * inv, acc.w * inv);
  reinterpret_cast<uint2*>(out + (size_t)oi * HEAD_DIM)[lane] = pk;
}

// ---- the f32 reference: one CTA of 128 threads per (row, head), two passes ----

__device__ __forceinline__ float block_reduce(float v, bool is_max, float* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, other) : v + other;
  }
  __syncthreads();  // scratch is free again
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < 4; ++w) v = is_max ? fmaxf(v, scratch[w]) : v + scratch[w];
  return v;
}

__global__ void __launch_bounds__(128) reference(const bf16* q, const bf16* k, const bf16* v, const uint32_t* anc,
                                                 float* out, int rows, int words, float scale) {
  extern __shared__ float score[];  // [nkeys]
  __shared__ float qs[HEAD_DIM];
  __shared__ float scratch[4];
  const int row = blockIdx.x, head = blockIdx.y, kvh = head / GROUP, d = threadIdx.x;
  const int nkeys = PREFIX + rows;
  const bf16* kh = k + (size_t)kvh * CAPACITY * HEAD_DIM;
  const bf16* vh = v + (size_t)kvh * CAPACITY * HEAD_DIM;
  qs[d] = __bfloat162float(q[((size_t)row * Q_HEADS + head) * HEAD_DIM + d]);
  __syncthreads();
  float mx = -INFINITY;
  for (int key = d; key < nkeys; key += blockDim.x) {
    const int c = key - PREFIX;
    const bool vis = key < PREFIX || ((anc[row * words + c / 32] >> (c % 32)) & 1u);
    float s = -INFINITY;
    if (vis) {
      s = 0.f;
      for (int i = 0; i < HEAD_DIM; ++i) s = fmaf(qs[i], __bfloat162float(kh[(size_t)key * HEAD_DIM + i]), s);
      s *= scale;
    }
    score[key] = s;
    mx = fmaxf(mx, s);
  }
  mx = block_reduce(mx, true, scratch);
  float sum = 0.f;
  for (int key = d; key < nkeys; key += blockDim.x) {
    const float e = score[key] == -INFINITY ? 0.f : expf(score[key] - mx);
    score[key] = e;
    sum += e;
  }
  sum = block_reduce(sum, false, scratch);  // its barriers also publish score[]
  float acc = 0.f;
  for (int key = 0; key < nkeys; ++key) acc = fmaf(score[key], __bfloat162float(vh[(size_t)key * HEAD_DIM + d]), acc);
  out[((size_t)row * Q_HEADS + head) * HEAD_DIM + d] = acc / sum;
}

// ---- harness ----

struct Variant {
  int warps, qw, ks, stages;
  bool psplit;
  void (*kernel)(Params);
  size_t smem;
  int regs = 0, spill = 0, ctas_per_sm = 0;
};

template <int WARPS, int QW, int KS, int STAGES, bool PSPLIT>
static Variant variant() {
  Variant v{WARPS, QW, KS, STAGES, PSPLIT, tree_attn<WARPS, QW, KS, STAGES, PSPLIT>,
            (size_t)(WARPS * QW + STAGES * 2 * KS) * ROW_BYTES + 256};
  CHECK(cudaFuncSetAttribute(v.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)v.smem));
  cudaFuncAttributes attr;
  CHECK(cudaFuncGetAttributes(&attr, v.kernel));
  v.regs = attr.numRegs;
  v.spill = (int)attr.localSizeBytes;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v.ctas_per_sm, v.kernel, WARPS * 32, v.smem));
  return v;
}

struct Buffers {
  bf16 *q, *out;
  std::vector<bf16*> k, v;  // COPIES each
  bf16* v_tree;             // copy 0's V with the prefix rows zeroed
  uint32_t* anc;
  float *part_o, *ref, *ref_tree;
  float2* part_ml;
};

// One layer: the attention over (k, v), then the combine when there are several splits.
static void launch(const Variant& var, const Buffers& b, const bf16* k, const bf16* v, int rows, int words,
                   int per_split, int splits) {
  Params p;
  p.q = b.q;
  p.k = k;
  p.v = v;
  p.anc = b.anc;
  p.out = b.out;
  p.part_o = b.part_o;
  p.part_ml = b.part_ml;
  p.rows = rows;
  p.words = words;
  p.nkeys = PREFIX + rows;
  p.per_split = per_split;
  p.scale_log2 = (float)(1.0 / std::sqrt((double)HEAD_DIM) * 1.4426950408889634);
  const int qb = var.warps * var.qw;
  const dim3 grid(KV_HEADS, splits, (GROUP * rows + qb - 1) / qb);
  var.kernel<<<grid, var.warps * 32, var.smem>>>(p);
  if (splits > 1) combine<<<(rows * Q_HEADS + 3) / 4, 128>>>(b.part_o, b.part_ml, b.out, rows * Q_HEADS, splits);
}

struct Errors {
  float err, rel, tree_rel;
  bool finite;
};

// max |got − want| and that over max |want|.
static void compare(const bf16* got_d, const float* want_d, size_t n, float& err, float& rel, bool& finite) {
  std::vector<bf16> got(n);
  std::vector<float> want(n);
  CHECK(cudaMemcpy(got.data(), got_d, n * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(want.data(), want_d, n * 4, cudaMemcpyDeviceToHost));
  float e = 0.f, scale = 0.f;
  for (size_t i = 0; i < n; ++i) {
    const float g = __bfloat162float(got[i]);
    if (!std::isfinite(g)) finite = false;
    e = std::max(e, std::fabs(g - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  err = e;
  rel = e / scale;
}

static Errors check(const Variant& var, const Buffers& b, int rows, int words, int per_split, int splits) {
  const size_t n = (size_t)rows * Q_HEADS * HEAD_DIM;
  Errors r{0.f, 0.f, 0.f, true};
  float unused;
  // NaN everywhere, so an output or partial never written shows (and none is left from before).
  const size_t n_part = (size_t)splits * rows * Q_HEADS;
  CHECK(cudaMemset(b.part_o, 0xff, n_part * HEAD_DIM * 4));
  CHECK(cudaMemset(b.part_ml, 0xff, n_part * sizeof(float2)));
  CHECK(cudaMemset(b.out, 0xff, n * 2));
  launch(var, b, b.k[0], b.v[0], rows, words, per_split, splits);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  compare(b.out, b.ref, n, r.err, r.rel, r.finite);
  CHECK(cudaMemset(b.part_o, 0xff, n_part * HEAD_DIM * 4));
  CHECK(cudaMemset(b.part_ml, 0xff, n_part * sizeof(float2)));
  CHECK(cudaMemset(b.out, 0xff, n * 2));
  launch(var, b, b.k[0], b.v_tree, rows, words, per_split, splits);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  compare(b.out, b.ref_tree, n, unused, r.tree_rel, r.finite);
  return r;
}

int main(int argc, char** argv) {
  std::vector<int> row_counts;
  for (int i = 1; i < argc; ++i) row_counts.push_back(std::atoi(argv[i]));
  if (row_counts.empty()) row_counts.push_back(65);
  for (int rows : row_counts)
    if (rows < 1 || rows > CAPACITY - PREFIX) {
      std::fprintf(stderr, "rows must be in 1..%d\n", CAPACITY - PREFIX);
      return 1;
    }
  const int max_rows = *std::max_element(row_counts.begin(), row_counts.end());

  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("device %s, %d SMs\n", prop.name, sms);

  // Caches and queries: uniform [-1, 1); 8 K/V copies, each K + V 16.8 MB.
  const size_t cache_elems = (size_t)KV_HEADS * CAPACITY * HEAD_DIM;
  const size_t max_out = (size_t)max_rows * Q_HEADS * HEAD_DIM;
  Buffers b;
  CHECK(cudaMalloc(&b.q, max_out * 2));
  CHECK(cudaMalloc(&b.out, max_out * 2));
  CHECK(cudaMalloc(&b.ref, max_out * 4));
  CHECK(cudaMalloc(&b.ref_tree, max_out * 4));
  CHECK(cudaMalloc(&b.part_o, (size_t)MAX_SPLITS * max_out * 4));
  CHECK(cudaMalloc(&b.part_ml, (size_t)MAX_SPLITS * max_rows * Q_HEADS * sizeof(float2)));
  CHECK(cudaMalloc(&b.anc, (size_t)max_rows * ((max_rows + 31) / 32) * 4));
  fill_uniform<<<256, 256>>>(b.q, max_out, 11, 1.f);
  b.k.resize(COPIES);
  b.v.resize(COPIES);
  for (int c = 0; c < COPIES; ++c) {
    CHECK(cudaMalloc(&b.k[c], cache_elems * 2));
    CHECK(cudaMalloc(&b.v[c], cache_elems * 2));
    fill_uniform<<<1024, 256>>>(b.k[c], cache_elems, 100 + 2 * c, 1.f);
    fill_uniform<<<1024, 256>>>(b.v[c], cache_elems, 101 + 2 * c, 1.f);
  }
  CHECK(cudaMalloc(&b.v_tree, cache_elems * 2));
  CHECK(cudaMemcpy(b.v_tree, b.v[0], cache_elems * 2, cudaMemcpyDeviceToDevice));
  for (int h = 0; h < KV_HEADS; ++h)
    CHECK(cudaMemset(b.v_tree + (size_t)h * CAPACITY * HEAD_DIM, 0, (size_t)PREFIX * ROW_BYTES));
  CHECK(cudaDeviceSynchronize());

  // The variants (warps, queries per warp, keys per step, stages, psplit).
  std::vector<Variant> variants = {
      variant<4, 16, 64, 2, true>(),  variant<4, 16, 64, 3, true>(),  variant<4, 16, 32, 3, true>(),
      variant<4, 32, 32, 3, true>(),  variant<8, 16, 64, 3, true>(),
      variant<4, 16, 64, 2, false>(), variant<4, 16, 64, 3, false>(), variant<4, 16, 32, 3, false>(),
      variant<4, 32, 32, 3, false>(), variant<8, 16, 64, 3, false>(),
  };
  std::printf("\nvariants: warps  q/warp  keys/step  stages  psplit  smem KB  regs  spill B  ctas/SM\n");
  for (const Variant& v : variants)
    std::printf("          %5d  %6d  %9d  %6d  %6d  %7zu  %4d  %7d  %7d\n", v.warps, v.qw, v.ks, v.stages,
                (int)v.psplit, v.smem / 1024, v.regs, v.spill, v.ctas_per_sm);

  for (int rows : row_counts) {
    // The tree: node 0 the root, node r's parent uniform in [max(0, r − 12), r); seeded.
    const int words = (rows + 31) / 32;
    std::vector<uint32_t> anc((size_t)rows * words, 0u);
    uint64_t state = 0x7265655f73656564ull;
    auto next = [&]() {  // splitmix64
      uint64_t z = (state += 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      return z ^ (z >> 31);
    };
    size_t visible = 0;
    for (int r = 0; r < rows; ++r) {
      if (r > 0) {
        const int lo = std::max(0, r - 12);
        const int parent = lo + (int)(next() % (uint64_t)(r - lo));
        for (int w = 0; w < words; ++w) anc[(size_t)r * words + w] = anc[(size_t)parent * words + w];
      }
      anc[(size_t)r * words + r / 32] |= 1u << (r % 32);
      for (int w = 0; w < words; ++w) visible += __builtin_popcount(anc[(size_t)r * words + w]);
    }
    CHECK(cudaMemcpy(b.anc, anc.data(), anc.size() * 4, cudaMemcpyHostToDevice));

    const int nkeys = PREFIX + rows;
    const float scale = (float)(1.0 / std::sqrt((double)HEAD_DIM));
    const size_t ref_smem = (size_t)nkeys * 4;
    if (ref_smem > 48 * 1024)
      CHECK(cudaFuncSetAttribute(reference, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ref_smem));
    reference<<<dim3(rows, Q_HEADS), 128, ref_smem>>>(b.q, b.k[0], b.v[0], b.anc, b.ref, rows, words, scale);
    reference<<<dim3(rows, Q_HEADS), 128, ref_smem>>>(b.q, b.k[0], b.v_tree, b.anc, b.ref_tree, rows, words, scale);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());

    const double kv_bytes = 2.0 * KV_HEADS * nkeys * ROW_BYTES;
    const double flops = 4.0 * Q_HEADS * rows * nkeys * HEAD_DIM;  // Q·Kᵀ and P·V, every key
    std::printf("\nrows %d: tree with %.1f visible block keys per row on average; K/V read per layer %.2f MB = %.2f us "
                "at 3.35 TB/s; MMA work %.2f GFLOP (psplit 1 issues 1.5x: P.V twice)\n",
                rows, (double)visible / rows, kv_bytes / 1e6, kv_bytes / 3.35e6, flops / 1e9);

    struct Best {
      float us = 1e30f;
      char line[320] = "none passed";
    } best[2];
    for (const Variant& var : variants) {
      const int steps = (nkeys + var.ks - 1) / var.ks;
      const int qblocks = (GROUP * rows + var.warps * var.qw - 1) / (var.warps * var.qw);
      // Default: fill one wave at the occupancy the variant gets.
      const int fill = std::max(1, sms * var.ctas_per_sm / (KV_HEADS * qblocks));
      std::vector<int> tried;
      for (int want : {1, 4, 6, 8, 12, fill}) {
        want = std::min({want, steps, MAX_SPLITS});
        const int per_split = (steps + want - 1) / want * var.ks;  // a multiple of the key step
        const int splits = (nkeys + per_split - 1) / per_split;    // none empty
        if (std::find(tried.begin(), tried.end(), splits) != tried.end()) continue;
        tried.push_back(splits);
        char line[256];
        std::snprintf(line, sizeof line,
                      "rows %d  warps %d  q/warp %d  keys/step %d  stages %d  psplit %d  splits %2d  regs %d  ctas/SM %d",
                      rows, var.warps, var.qw, var.ks, var.stages, (int)var.psplit, splits, var.regs, var.ctas_per_sm);
        const Errors e = check(var, b, rows, words, per_split, splits);
        const bool ok = e.finite && e.err <= 2e-2f && e.rel <= 2e-2f && e.tree_rel <= 2e-2f;
        if (!ok) {
          std::printf("%s  err %.1e  rel %.1e  tree rel %.1e%s  FAIL\n", line, e.err, e.rel, e.tree_rel,
                      e.finite ? "" : "  (non-finite output)");
          continue;
        }
        const float ms = median_ms([&] {
          for (int l = 0; l < LAYERS; ++l)
            launch(var, b, b.k[l % COPIES], b.v[l % COPIES], rows, words, per_split, splits);
        });
        const float us = ms * 1000.f / LAYERS;
        std::printf("%s  err %.1e  rel %.1e  tree rel %.1e  us %.2f\n", line, e.err, e.rel, e.tree_rel, us);
        Best& bst = best[var.psplit ? 1 : 0];
        if (us < bst.us) {
          bst.us = us;
          std::snprintf(bst.line, sizeof bst.line, "%s  us %.2f", line, us);
        }
      }
    }
    for (int ps = 1; ps >= 0; --ps) std::printf("best rows %d psplit %d: %s\n", rows, ps, best[ps].line);
  }
  std::printf("done\n");
  return 0;
}

// How near the DRAM bandwidth the AR step's GEMVs (`y = W · x`, bf16 `W: [n, k]` in the Hugging
// Face layout, one row of `x`) can get, apart from CubeCL, checked against an f32 reference.
//
// Part 1 times one GEMV written four ways on the issue's shapes, back to back over weight copies
// the L2 cannot hold:
// - `warp_rows`: our pattern (`linear::linear_rows` at one row): a cube of four planes per output
//   feature, each plane a quarter of `k` in 16-byte loads, a cube reduction at the end;
// - `warp_stride`: persistent planes, each walking whole rows (16 loads of a row in flight at a
//   time) and striding by the grid's plane count;
// - `bulk`: persistent cubes, each owning a contiguous range of rows — contiguous bytes, since a
//   row is `k` consecutive weights — streamed into shared memory by one `cp.async.bulk` per stage
//   (1–4 rows a stage, 2–4 stages), its units reading the staged rows against `x` in registers;
// - cuBLAS (`cublasGemmEx`, bf16 in and out, f32 accumulation), unless built with -DNO_CUBLAS.
//
// Part 2 times the GEMVs of a whole Qwen3-8B AR step (36 layers of QKV, o_proj, gate/up and down,
// then the LM head: 145 launches, 15.1 GB) for each kernel at its best configuration per shape.
//
// Part 3 asks whether the launches between the GEMVs can hide the next GEMV's first bytes: an AR
// step's sequence with stand-ins for the attention (a latency-bound launch of 264 cubes that reads
// 8 MB of keys and values in about 11 µs) and for the add + norms (32 cubes, about 3 µs), where
// the stand-ins, and optionally each GEMV's last wave of cubes, prefetch the first bytes of the
// next weight into L2 (`cp.async.bulk.prefetch.L2`).
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/gemv_reads \
//       tools/gemv_reads.cu -lcublas && /tmp/gemv_reads [parts, "123" by default]
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#ifndef NO_CUBLAS
#include <cublas_v2.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "cuda_timing.h"

using bf16 = __nv_bfloat16;

// ---- shared helpers ----

__device__ __forceinline__ float dot8(uint4 w, uint4 x) {
  const __nv_bfloat162* a = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(&x);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 fa = __bfloat1622float2(a[i]);
    float2 fb = __bfloat1622float2(b[i]);
    s = fmaf(fa.x, fb.x, s);
    s = fmaf(fa.y, fb.y, s);
  }
  return s;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One unit per output, in f32 over the bf16 inputs.
__global__ void reference(const bf16* w, const bf16* x, float* y, int n, int k) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= n) return;
  const bf16* row = w + (size_t)r * k;
  float s = 0.f;
  for (int i = 0; i < k; ++i) s = fmaf(__bfloat162float(row[i]), __bfloat162float(x[i]), s);
  y[r] = s;
}

// ---- warp_rows: a cube of PLANES planes per feature, each a slice of k ----

template <int PLANES>
__device__ __forceinline__ void warp_rows_cube(const bf16* w, const bf16* x, bf16* y, int k) {
  __shared__ float part[PLANES];
  const int plane = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int segs = k / 8;                 // 16-byte segments per row
  const int per_plane = segs / PLANES;    // k is a multiple of 8 · 32 · PLANES here
  const uint4* row = reinterpret_cast<const uint4*>(w + (size_t)blockIdx.x * k) + plane * per_plane;
  const uint4* xv = reinterpret_cast<const uint4*>(x) + plane * per_plane;
  float s = 0.f;
  for (int i = lane; i < per_plane; i += 32) s += dot8(__ldg(row + i), __ldg(xv + i));
  s = warp_sum(s);
  if (lane == 0) part[plane] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.f;
#pragma unroll
    for (int p = 0; p < PLANES; ++p) t += part[p];
    y[blockIdx.x] = __float2bfloat16(t);
  }
}

template <int PLANES>
__global__ void __launch_bounds__(PLANES * 32) warp_rows(const bf16* w, const bf16* x, bf16* y, int k) {
  warp_rows_cube<PLANES>(w, x, y, k);
}

// ---- warp_stride: persistent planes over whole rows ----

// SEGS = k / 256: each lane's 16-byte segments of one row, loaded 16 at a time before any is used
// (x is read through L1: 8–24 KB, the same for every row).
template <int SEGS>
__global__ void __launch_bounds__(256) warp_stride(const bf16* w, const bf16* x, bf16* y, int n, int k) {
  constexpr int GROUP = SEGS < 16 ? SEGS : 16;
  static_assert(SEGS % GROUP == 0, "whole groups");
  const int lane = threadIdx.x % 32;
  const int planes = gridDim.x * (blockDim.x / 32);
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  for (int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; r < n; r += planes) {
    const uint4* row = reinterpret_cast<const uint4*>(w + (size_t)r * k);
    float s = 0.f;
#pragma unroll
    for (int g = 0; g < SEGS; g += GROUP) {
      uint4 wr[GROUP];
#pragma unroll
      for (int i = 0; i < GROUP; ++i) wr[i] = __ldg(row + lane + 32 * (g + i));
#pragma unroll
      for (int i = 0; i < GROUP; ++i) s += dot8(wr[i], __ldg(xv + lane + 32 * (g + i)));
    }
    s = warp_sum(s);
    if (lane == 0) y[r] = __float2bfloat16(s);
  }
}

// ---- bulk: persistent cubes streaming contiguous rows through shared memory ----

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void bar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void bar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// One thread: the stage's barrier expects `bytes`, and one bulk copy brings them.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  // The stage was last read through ordinary loads; order those before the async proxy's write.
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

constexpr int BULK_UNITS = 256;
constexpr int BULK_PLANES = BULK_UNITS / 32;
constexpr int MAX_STAGES = 4;
constexpr int MAX_STAGE_ROWS = 4;
// The most staged bytes a multiprocessor gives the bulk cubes (of its 227 KB of shared memory).
constexpr int BULK_SMEM = 220 * 1024;

// SEGS = k / (8 · BULK_UNITS): each unit's 16-byte segments of a row (its x segments in registers).
template <int SEGS>
__global__ void __launch_bounds__(BULK_UNITS) bulk(const bf16* w, const bf16* x, bf16* y, int n, int k,
                                                   int stage_rows, int stages) {
  extern __shared__ __align__(128) unsigned char staged[];
  __shared__ __align__(8) uint64_t full[MAX_STAGES];
  __shared__ float part[2][BULK_PLANES][MAX_STAGE_ROWS];
  const int unit = threadIdx.x, plane = unit / 32, lane = unit % 32;
  const long long lo = (long long)blockIdx.x * n / gridDim.x, hi = (long long)(blockIdx.x + 1) * n / gridDim.x;
  const int rows = (int)(hi - lo);
  const int chunks = (rows + stage_rows - 1) / stage_rows;
  const size_t row_bytes = (size_t)k * 2, stage_bytes = row_bytes * stage_rows;
  const unsigned char* src = reinterpret_cast<const unsigned char*>(w + lo * (long long)k);

  auto chunk_bytes = [&](int c) { return (uint32_t)(min(stage_rows, rows - c * stage_rows) * row_bytes); };
  if (unit == 0) {
    for (int s = 0; s < stages; ++s) bar_init(&full[s], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (unit == 0)
    for (int c = 0; c < min(stages, chunks); ++c)
      bulk_load(staged + c * stage_bytes, src + c * stage_bytes, chunk_bytes(c), &full[c]);

  const uint4* xv = reinterpret_cast<const uint4*>(x);
  uint4 xr[SEGS];
#pragma unroll
  for (int i = 0; i < SEGS; ++i) xr[i] = __ldg(xv + unit + BULK_UNITS * i);

  for (int c = 0; c < chunks; ++c) {
    const int s = c % stages;
    bar_wait(&full[s], (c / stages) & 1);
    const int here = min(stage_rows, rows - c * stage_rows);
    const unsigned char* stage = staged + s * stage_bytes;
    for (int j = 0; j < here; ++j) {
      const uint4* row = reinterpret_cast<const uint4*>(stage + j * row_bytes);
      float acc = 0.f;
#pragma unroll
      for (int i = 0; i < SEGS; ++i) acc += dot8(row[unit + BULK_UNITS * i], xr[i]);
      acc = warp_sum(acc);
      if (lane == 0) part[c & 1][plane][j] = acc;
    }
    __syncthreads();  // every unit is done with stage s, and the partial sums are in
    if (unit == 0 && c + stages < chunks)
      bulk_load(staged + s * stage_bytes, src + (size_t)(c + stages) * stage_bytes, chunk_bytes(c + stages), &full[s]);
    if (unit < here) {
      float t = 0.f;
#pragma unroll
      for (int p = 0; p < BULK_PLANES; ++p) t += part[c & 1][p][unit];
      y[lo + c * stage_rows + unit] = __float2bfloat16(t);
    }
  }
}

// ---- part 3: L2 prefetch of the next weight ----

// This cube's share of `bytes` from `base` into L2, in pieces of at most 64 KiB, from one unit.
__device__ __forceinline__ void prefetch_share(const unsigned char* base, size_t bytes, int cube, int cubes) {
  if (bytes == 0) return;
  const size_t share = ((bytes + cubes - 1) / cubes + 15) & ~(size_t)15;
  const size_t from = share * cube;
  if (from >= bytes) return;
  const size_t end = from + share < bytes ? from + share : bytes;
  for (size_t at = from; at < end; at += 65536) {
    const uint32_t len = (uint32_t)((end - at) < 65536 ? (end - at) : 65536);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(base + at), "r"(len) : "memory");
  }
}

// A stand-in for a latency-bound launch: each cube reads its share of `vecs` 16-byte words, then
// waits until `cycles` have passed since it started; its first unit first prefetches its share of
// `pf_bytes` from `pf` into L2.
__global__ void stand_in(const uint4* data, size_t vecs, unsigned* sink, long long cycles,
                         const unsigned char* pf, size_t pf_bytes) {
  const long long t0 = clock64();
  if (threadIdx.x == 0) prefetch_share(pf, pf_bytes, blockIdx.x, gridDim.x);
  unsigned acc = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < vecs; i += (size_t)gridDim.x * blockDim.x) {
    uint4 v = __ldg(data + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  while (clock64() - t0 < cycles) {
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads
}

// `warp_rows<4>` whose cubes from `pf_from` on (the last wave) each prefetch a share of `pf_bytes`.
__global__ void __launch_bounds__(128) warp_rows_prefetch(const bf16* w, const bf16* x, bf16* y, int k,
                                                          const unsigned char* pf, size_t pf_bytes, int pf_from) {
  if (threadIdx.x == 0 && (int)blockIdx.x >= pf_from)
    prefetch_share(pf, pf_bytes, blockIdx.x - pf_from, gridDim.x - pf_from);
  warp_rows_cube<4>(w, x, y, k);
}

// ---- harness ----

struct Shape {
  const char* name;
  int n, k;
};

using Launch = std::function<void(const bf16* w, bf16* y)>;

struct Config {
  std::string kernel, label;
  Launch launch;
};

static int sms = 0;
#ifndef NO_CUBLAS
static cublasHandle_t blas;
#endif

template <int SEGS>
static bool bulk_config(std::vector<Config>& out, const Shape& s, const bf16* x, int stage_rows, int stages,
                        int per_sm) {
  size_t smem = (size_t)s.k * 2 * stage_rows * stages;
  if (smem * per_sm > BULK_SMEM) return false;
  CHECK(cudaFuncSetAttribute(bulk<SEGS>, cudaFuncAttributeMaxDynamicSharedMemorySize, BULK_SMEM));
  int n = s.n, k = s.k, grid = sms * per_sm;
  char label[64];
  std::snprintf(label, sizeof label, "%d row(s) x %d stages, %d cube(s)/SM", stage_rows, stages, per_sm);
  out.push_back({"bulk", label, [=](const bf16* w, bf16* y) {
                   bulk<SEGS><<<grid, BULK_UNITS, smem>>>(w, x, y, n, k, stage_rows, stages);
                 }});
  return true;
}

template <int SEGS>
static void configs_for(std::vector<Config>& out, const Shape& s, const bf16* x) {
  int n = s.n, k = s.k;
  out.push_back({"warp_rows", "4 planes/feature", [=](const bf16* w, bf16* y) { warp_rows<4><<<n, 128>>>(w, x, y, k); }});
  for (int per_sm : {4, 8}) {
    int grid = sms * per_sm;
    char label[64];
    std::snprintf(label, sizeof label, "%d cubes/SM of 8 planes", per_sm);
    out.push_back({"warp_stride", label, [=](const bf16* w, bf16* y) {
                     warp_stride<SEGS * 8><<<grid, 256>>>(w, x, y, n, k);
                   }});
  }
  for (int per_sm : {1, 2})
    for (int stage_rows : {1, 2, 4})
      for (int stages : {2, 3, 4}) bulk_config<SEGS>(out, s, x, stage_rows, stages, per_sm);
#ifndef NO_CUBLAS
  out.push_back({"cublas", "GemmEx", [=](const bf16* w, bf16* y) {
                   const float one = 1.f, zero = 0.f;
                   CHECK(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, n, 1, k, &one, w, CUDA_R_16BF, k, x,
                                      CUDA_R_16BF, k, &zero, y, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
                 }});
#endif
}

static void configs(std::vector<Config>& out, const Shape& s, const bf16* x) {
  if (s.k == 4096)
    configs_for<2>(out, s, x);
  else if (s.k == 12288)
    configs_for<6>(out, s, x);
  else {
    std::fprintf(stderr, "unsupported k %d\n", s.k);
    std::exit(1);
  }
}

// µs per launch over `launches` launches that cycle through `copies`.
static float time_launches(const Launch& launch, const std::vector<bf16*>& copies, bf16* y, int launches) {
  return median_ms([&] {
           for (int i = 0; i < launches; ++i) launch(copies[i % copies.size()], y);
         }) *
         1000.f / launches;
}

// max |y − ref| / max |ref|.
static float check(const Launch& launch, const bf16* w, const bf16* x, int n, int k, bf16* y, float* ref) {
  CHECK(cudaMemset(y, 0, (size_t)n * 2));
  launch(w, y);
  reference<<<(n + 255) / 256, 256>>>(w, x, ref, n, k);
  CHECK(cudaDeviceSynchronize());
  std::vector<bf16> got(n);
  std::vector<float> want(n);
  CHECK(cudaMemcpy(got.data(), y, (size_t)n * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(want.data(), ref, (size_t)n * 4, cudaMemcpyDeviceToHost));
  float err = 0.f, scale = 0.f;
  for (int i = 0; i < n; ++i) {
    err = std::max(err, std::fabs(__bfloat162float(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return err / scale;
}

int main(int argc, char** argv) {
  // Which parts to run ("123" by default; part 2 needs part 1's choices).
  const std::string parts = argc > 1 ? argv[1] : "123";
  auto runs_part = [&](char p) { return parts.find(p) != std::string::npos; };
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  sms = prop.multiProcessorCount;
  std::printf("device %s, %d SMs\n", prop.name, sms);
#ifndef NO_CUBLAS
  CHECK(cublasCreate(&blas));
#endif
  const Shape shapes[] = {{"qkv", 6144, 4096},   {"o_proj", 4096, 4096},    {"gate_up", 24576, 4096},
                          {"down", 4096, 12288}, {"issue_12288x4096", 12288, 4096}, {"lm_head", 151936, 4096}};
  const size_t max_k = 12288, max_n = 151936;
  bf16 *x, *y;
  float* ref;
  CHECK(cudaMalloc(&x, max_k * 2));
  CHECK(cudaMalloc(&y, max_n * 2));
  CHECK(cudaMalloc(&ref, max_n * 4));
  fill_uniform<<<64, 256>>>(x, max_k, 7, 1.f);

  // Part 1: every configuration on every shape.
  std::printf("\npart 1: us per launch, back to back (median of 5 x 20 launches); GB/s; max err / max |ref|\n");
  std::vector<std::vector<Config>> best_by_shape;
  for (const Shape& s : shapes) {
    if (!runs_part('1')) break;
    size_t bytes = (size_t)s.n * s.k * 2;
    int copies_n = (int)std::max<size_t>(2, (300ull << 20) / bytes + 1);
    std::vector<bf16*> copies(copies_n);
    for (int c = 0; c < copies_n; ++c) {
      CHECK(cudaMalloc(&copies[c], bytes));
      fill_uniform<<<1024, 256>>>(copies[c], (size_t)s.n * s.k, 100 + c, 0.05f);
    }
    CHECK(cudaDeviceSynchronize());
    std::vector<Config> all;
    configs(all, s, x);
    std::vector<Config> best;  // the fastest correct configuration of each kernel
    std::vector<float> best_us;
    for (const Config& cfg : all) {
      float err = check(cfg.launch, copies[0], x, s.n, s.k, y, ref);
      float us = time_launches(cfg.launch, copies, y, 20);
      bool ok = err < 1e-2f;
      std::printf("%-18s %-12s %-34s %9.2f us %7.0f GB/s  err %.2e %s\n", s.name, cfg.kernel.c_str(), cfg.label.c_str(),
                  us, bytes / us / 1e3, err, ok ? "ok" : "WRONG");
      if (!ok) continue;
      auto at = std::find_if(best.begin(), best.end(), [&](const Config& b) { return b.kernel == cfg.kernel; });
      if (at == best.end()) {
        best.push_back(cfg);
        best_us.push_back(us);
      } else if (us < best_us[at - best.begin()]) {
        best_us[at - best.begin()] = us;
        *at = cfg;
      }
    }
    for (size_t i = 0; i < best.size(); ++i)
      std::printf("best %-18s %-12s %-34s %9.2f us %5.1f %% of 4.3 TB/s\n", s.name, best[i].kernel.c_str(),
                  best[i].label.c_str(), best_us[i], bytes / best_us[i] / 4.3e6 * 100);
    best_by_shape.push_back(best);
    for (bf16* c : copies) CHECK(cudaFree(c));
  }

  // Part 2: an AR step's GEMVs (36 layers of qkv, o_proj, gate_up, down, then the LM head).
  std::printf("\npart 2: an AR step's 145 GEMVs, ms (median of 5)\n");
  const int layer_shapes[] = {0, 1, 2, 3};
  std::vector<bf16*> layer_w[4];
  size_t total = 0;
  for (int l = 0; l < 36; ++l)
    for (int i : layer_shapes) {
      size_t count = (size_t)shapes[i].n * shapes[i].k;
      bf16* p;
      CHECK(cudaMalloc(&p, count * 2));
      fill_uniform<<<1024, 256>>>(p, count, 1000 + l * 4 + i, 0.05f);
      layer_w[i].push_back(p);
      total += count * 2;
    }
  bf16* head;
  CHECK(cudaMalloc(&head, (size_t)shapes[5].n * shapes[5].k * 2));
  fill_uniform<<<1024, 256>>>(head, (size_t)shapes[5].n * shapes[5].k, 99, 0.05f);
  total += (size_t)shapes[5].n * shapes[5].k * 2;
  CHECK(cudaDeviceSynchronize());
  for (const Config& kernel_head : runs_part('2') && !best_by_shape.empty() ? best_by_shape[5] : std::vector<Config>{}) {
    const std::string& kernel = kernel_head.kernel;
    const Launch* per_shape[4];
    bool all = true;
    for (int i : layer_shapes) {
      auto at = std::find_if(best_by_shape[i].begin(), best_by_shape[i].end(),
                             [&](const Config& b) { return b.kernel == kernel; });
      if (at == best_by_shape[i].end()) all = false;
      else per_shape[i] = &at->launch;
    }
    if (!all) continue;
    auto step = [&]() {
      for (int l = 0; l < 36; ++l)
        for (int i : layer_shapes) (*per_shape[i])(layer_w[i][l], y);
      kernel_head.launch(head, y);
    };
    float ms = median_ms(step);
    std::printf("step %-12s %8.3f ms  %6.0f GB/s  %5.1f %% of 4.3 TB/s (%.2f GB)\n", kernel.c_str(), ms,
                total / ms / 1e6, total / ms / 4.3e7, total / 1e9);
  }
  // Part 3: the AR step's order of launches, with stand-ins between the GEMVs.
  std::printf("\npart 3: an AR step with stand-ins, ms (median of 5): prefetch MB by the attention (of o_proj), "
              "by the norms (of the next GEMV), by each GEMV's last wave (of the next GEMV)\n");
  int khz;  // SM clock
  CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  const long long attention_cycles = 11LL * khz / 1000, norm_cycles = 3LL * khz / 1000;
  const size_t kv_bytes = 8ull << 20;
  std::vector<uint4*> kv(36);
  for (auto& p : kv) {
    CHECK(cudaMalloc(&p, kv_bytes));
    CHECK(cudaMemset(p, 1, kv_bytes));
  }
  unsigned* sink;
  CHECK(cudaMalloc(&sink, 4));
  const int wave = sms * 16;  // warp_rows cubes resident at once (16 cubes of 4 planes per SM)
  auto bytes_of = [&](int i) { return (size_t)shapes[i].n * shapes[i].k * 2; };
  auto as_bytes = [](const bf16* p) { return reinterpret_cast<const unsigned char*>(p); };
  struct Prefetch {
    double attention_mb, norm_mb, tail_mb;
  };
  const Prefetch plans[] = {{0, 0, 0}, {8, 0, 0}, {16, 0, 0}, {34, 0, 0}, {34, 4, 0}, {34, 8, 0},
                            {34, 8, 4}, {34, 8, 8}, {0, 0, 8}};
  for (int round = 0; round < (runs_part('3') ? 2 : 0); ++round)
    for (const Prefetch& plan : plans) {
      auto mb = [](double m) { return (size_t)(m * (1 << 20)); };
      auto gemv = [&](int i, const bf16* w, const bf16* next, size_t next_bytes) {
        int n = shapes[i].n, k = shapes[i].k;
        size_t tail = next ? std::min(mb(plan.tail_mb), next_bytes) : 0;
        warp_rows_prefetch<<<n, 128>>>(w, x, y, k, as_bytes(next), tail, std::max(0, n - wave));
      };
      auto step = [&]() {
        for (int l = 0; l < 36; ++l) {
          const bf16* next_qkv = l + 1 < 36 ? layer_w[0][l + 1] : head;
          const size_t next_qkv_bytes = l + 1 < 36 ? bytes_of(0) : bytes_of(5);
          gemv(0, layer_w[0][l], nullptr, 0);  // the attention follows
          stand_in<<<264, 128>>>(kv[l], kv_bytes / 16, sink, attention_cycles, as_bytes(layer_w[1][l]),
                                 std::min(mb(plan.attention_mb), bytes_of(1)));
          gemv(1, layer_w[1][l], nullptr, 0);  // a norm follows
          stand_in<<<32, 128>>>(kv[l], 0, sink, norm_cycles, as_bytes(layer_w[2][l]),
                                std::min(mb(plan.norm_mb), bytes_of(2)));
          gemv(2, layer_w[2][l], layer_w[3][l], bytes_of(3));
          gemv(3, layer_w[3][l], nullptr, 0);  // a norm follows
          stand_in<<<32, 128>>>(kv[l], 0, sink, norm_cycles, as_bytes(next_qkv),
                                std::min(mb(plan.norm_mb), next_qkv_bytes));
        }
        warp_rows_prefetch<<<shapes[5].n, 128>>>(head, x, y, shapes[5].k, nullptr, 0, shapes[5].n);
      };
      std::printf("stand-ins round %d prefetch attention %4.0f MB, norms %2.0f MB, tails %2.0f MB: %8.3f ms\n", round,
                  plan.attention_mb, plan.norm_mb, plan.tail_mb, median_ms(step));
    }
  // The prefetching GEMV is the plain one when it prefetches nothing: the same answer as warp_rows.
  {
    int n = shapes[3].n, k = shapes[3].k;
    auto launch = [&](const bf16* w, bf16* out) {
      warp_rows_prefetch<<<n, 128>>>(w, x, out, k, as_bytes(layer_w[0][0]), 4u << 20, std::max(0, n - wave));
    };
    std::printf("warp_rows_prefetch down: err %.2e\n", check(launch, layer_w[3][0], x, n, k, y, ref));
  }
  std::printf("done\n");
  return 0;
}

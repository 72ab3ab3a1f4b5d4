// How fast the GPU's memory serves the read patterns of our linear kernels, with no arithmetic:
// a question the kernels' own timings cannot answer because their loads and math interleave.
//
// The weight is Qwen3-8B's fused gate/up, [24576, 4096] bf16 (201 MB; two copies, read
// alternately, so the L2 never holds the next launch's bytes). Every pattern reads all of it once,
// 16 bytes per load, and folds what it read into one word per cube so no load is dead:
//
// - `segments`: what the tensor-core linear stages — a cube owns `rows_per_cube` weight rows and
//   walks `k` in chunks; a chunk is the `seg` bytes of each of its rows at the same offset (rows
//   8 KiB apart), all of a chunk's loads in flight before any is used;
// - `packed`: the same cubes and chunks with each chunk's bytes contiguous (a weight stored
//   chunk by chunk), to tell what the row-strided segments cost;
// - `rows`: what the GEMV does — each warp streams whole rows, `planes` warps per cube.
//
// Build and run on the GPU machine: `nvcc -O3 -arch=sm_90 -o /tmp/dram_patterns
// tools/dram_patterns.cu && /tmp/dram_patterns`; one JSON line per pattern and shape (µs per
// launch, the median of 5 timings of 20 launches, and the fraction of 4.3 TB/s).
#include <algorithm>
#include <cstdio>
#include <cuda_runtime.h>
#include <vector>

#include "cuda_timing.h"

constexpr size_t N = 24576, K_BYTES = 4096 * 2, BYTES = N * K_BYTES;
constexpr int THREADS = 256;

__device__ __forceinline__ unsigned fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

// `LOADS` 16-byte loads per thread per chunk: 256 threads × LOADS × 16 bytes = one chunk.
template <int LOADS, bool PACKED>
__global__ void segments(const uint4 *w, unsigned *sink, int rows_per_cube, int seg) {
  const int vecs_per_seg = seg / 16;
  const int chunks = K_BYTES / seg;
  const size_t row0 = (size_t)blockIdx.x * rows_per_cube;
  unsigned acc = 0;
  for (int c = 0; c < chunks; ++c) {
    uint4 v[LOADS];
#pragma unroll
    for (int i = 0; i < LOADS; ++i) {
      const int e = i * THREADS + threadIdx.x;  // the element of this chunk
      size_t at;
      if (PACKED) {
        at = ((size_t)blockIdx.x * chunks + c) * (size_t)rows_per_cube * vecs_per_seg + e;
      } else {
        const int r = e / vecs_per_seg, j = e % vecs_per_seg;
        at = (row0 + r) * (K_BYTES / 16) + (size_t)c * vecs_per_seg + j;
      }
      v[i] = w[at];
    }
#pragma unroll
    for (int i = 0; i < LOADS; ++i) acc ^= fold(v[i]);
  }
  if (acc == 0x12345678u) sink[blockIdx.x] = acc;
}

// Each warp streams whole rows, 512 bytes per load instruction, `UNROLL` loads in flight.
template <int UNROLL>
__global__ void rows(const uint4 *w, unsigned *sink) {
  const size_t warp = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const size_t row_vecs = K_BYTES / 16;
  unsigned acc = 0;
  if (warp < N) {
    const uint4 *row = w + warp * row_vecs;
    for (size_t j = lane; j < row_vecs; j += 32 * UNROLL) {
      uint4 v[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) v[u] = row[j + 32 * u];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) acc ^= fold(v[u]);
    }
  }
  if (acc == 0x12345678u) sink[blockIdx.x] = acc;
}

// µs per launch: the median of five timings of 20 launches back to back.
template <typename Launch>
double us_per_launch(Launch launch) {
  return median_ms([&] {
           for (int i = 0; i < 20; ++i) launch(i);
         }) *
         1e3 / 20;
}

void report(const char *pattern, int cubes, int rows_per_cube, int seg, double us) {
  printf("{\"pattern\":\"%s\",\"cubes\":%d,\"rows_per_cube\":%d,\"seg_bytes\":%d,\"us\":%.2f,"
         "\"of_4300\":%.3f}\n",
         pattern, cubes, rows_per_cube, seg, us, BYTES / (us * 1e-6) / 4.3e12);
  fflush(stdout);
}

template <int LOADS>
void run_segments(const uint4 *const *w, unsigned *sink, int rows_per_cube) {
  const int seg = LOADS * THREADS * 16 / rows_per_cube;
  const int cubes = N / rows_per_cube;
  double plain = us_per_launch([&](int i) {
    segments<LOADS, false><<<cubes, THREADS>>>(w[i % 2], sink, rows_per_cube, seg);
  });
  report("segments", cubes, rows_per_cube, seg, plain);
  double packed = us_per_launch([&](int i) {
    segments<LOADS, true><<<cubes, THREADS>>>(w[i % 2], sink, rows_per_cube, seg);
  });
  report("packed", cubes, rows_per_cube, seg, packed);
}

int main() {
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  printf("{\"device\":\"%s\",\"multiprocessors\":%d}\n", prop.name, prop.multiProcessorCount);
  uint4 *w[2];
  unsigned *sink;
  for (auto &p : w) {
    cudaMalloc(&p, BYTES);
    cudaMemset(p, 1, BYTES);
  }
  cudaMalloc(&sink, 1 << 20);
  // 256 rows per cube (96 cubes, the fused gate/up at 65 rows): 128-, 256- and 512-byte segments.
  run_segments<8>(w, sink, 256);
  run_segments<16>(w, sink, 256);
  run_segments<32>(w, sink, 256);
  // 128 rows per cube (192 cubes, one feature tile per plane): 256- and 512-byte segments.
  run_segments<8>(w, sink, 128);
  run_segments<16>(w, sink, 128);
  for (int unroll : {1, 2, 4}) {
    for (int planes : {4, 8}) {
      const int cubes = N / planes;
      double us = us_per_launch([&](int i) {
        if (unroll == 1) rows<1><<<cubes, planes * 32>>>(w[i % 2], sink);
        if (unroll == 2) rows<2><<<cubes, planes * 32>>>(w[i % 2], sink);
        if (unroll == 4) rows<4><<<cubes, planes * 32>>>(w[i % 2], sink);
      });
      char name[32];
      snprintf(name, sizeof name, "rows_unroll%d", unroll);
      report(name, cubes, planes, (int)K_BYTES, us);
    }
  }
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(err));
    return 1;
  }
  return 0;
}

// What the standalone CUDA tools in this folder share beside CHECK: GPU time by events (one
// untimed run, then the median of five), and a fill of bf16 tensors by a hash of each index.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "cuda_check.h"

// Milliseconds `work` takes on the GPU: one untimed run, then the median of five.
inline float median_ms(const std::function<void()>& work) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  work();
  std::vector<float> runs;
  for (int r = 0; r < 5; ++r) {
    CHECK(cudaEventRecord(a));
    work();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    runs.push_back(ms);
  }
  CHECK(cudaGetLastError());
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

// Fills `p` without a host copy: a hash of each index, uniform in [-scale, scale) in steps of
// scale / 32768.
__global__ void fill_uniform(__nv_bfloat16* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    h *= 3266489917u;
    h ^= h >> 16;
    p[i] = __float2bfloat16(((float)(h & 0xFFFF) / 32768.f - 1.f) * scale);
  }
}

// The host cost of a TMA launch, apart from any kernel: how long `cuTensorMapEncodeTiled` takes for
// the warpgroup-MMA linear's maps, and how long enqueueing a kernel takes with two tensor maps as
// `__grid_constant__` parameters against two pointers. Every launch runs an empty kernel, so the
// times are the host's alone (enqueued in batches of 256, well under the launch queue's depth).
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/tma_launch_cost \
//       tools/tma_launch_cost.cu -lcuda && /tmp/tma_launch_cost
#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdlib>

#include "cuda_check.h"

// Empty kernels; the never-true test (128 units) keeps the parameters from being dropped.
__global__ void with_pointers(const unsigned* a, const unsigned* b) {
  if (threadIdx.x == 1024) printf("%p %p", a, b);
}

__global__ void with_maps(const __grid_constant__ CUtensorMap a, const __grid_constant__ CUtensorMap b) {
  if (threadIdx.x == 1024) printf("%p %p", &a, &b);
}

using Clock = std::chrono::steady_clock;

static double micros(Clock::time_point start, int count) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count() / count;
}

// A dense [rows, k] bf16 tensor as [rows, k / 2] 32-bit words in boxes of box_rows × 32 words,
// 128-byte swizzle, 256-byte L2 promotion: the linear's maps (`tile_map` in cube/mod.rs).
static CUresult encode_at(CUtensorMap* map, void* base, unsigned long long rows, unsigned long long k,
                          unsigned box_rows) {
  cuuint64_t dims[2] = {k / 2, rows};
  cuuint64_t strides[1] = {k * 2};
  cuuint32_t box[2] = {32, box_rows};
  cuuint32_t elem[2] = {1, 1};
  return cuTensorMapEncodeTiled(map, CU_TENSOR_MAP_DATA_TYPE_UINT32, 2, base, dims, strides, box, elem,
                                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

static void encode(CUtensorMap* map, void* base, unsigned long long rows, unsigned long long k,
                   unsigned box_rows) {
  CHECK(encode_at(map, base, rows, k, box_rows));
}

int main() {
  CHECK(cudaFree(nullptr));
  const unsigned long long n_out = 12288, k = 4096, rows = 65;
  void *w, *x;
  CHECK(cudaMalloc(&w, n_out * k * 2));
  CHECK(cudaMalloc(&x, 256 * k * 2));
  CUtensorMap wm, xm;
  // Whether a map encodes on a thread with no current context, at a placeholder address.
  CUresult placeholder = CUDA_SUCCESS;
  std::thread([&] { placeholder = encode_at(&wm, (void*)(1ull << 32), n_out, k, 64); }).join();
  std::printf("encode on a thread without a context, placeholder address: result %d\n", (int)placeholder);
  const int reps = 20000;
  for (int round = 0; round < 3; ++round) {
    auto start = Clock::now();
    for (int i = 0; i < reps; ++i) {
      encode(&wm, w, n_out, k, 64);
      encode(&xm, x, rows, k, 72);
    }
    const double encode_two = micros(start, reps);

    const int batch = 256, batches = 40;
    double pointers = 0, maps = 0;
    for (int b = 0; b < batches; ++b) {
      start = Clock::now();
      for (int i = 0; i < batch; ++i) with_pointers<<<192, 128>>>((const unsigned*)w, (const unsigned*)x);
      pointers += micros(start, batch) / batches;
      CHECK(cudaDeviceSynchronize());
      start = Clock::now();
      for (int i = 0; i < batch; ++i) with_maps<<<192, 128>>>(wm, xm);
      maps += micros(start, batch) / batches;
      CHECK(cudaDeviceSynchronize());
    }
    CHECK(cudaGetLastError());
    std::printf("round %d: encode two maps %.2f us; enqueue with two pointers %.2f us, with two maps %.2f us\n",
                round, encode_two, pointers, maps);
  }
  return 0;
}

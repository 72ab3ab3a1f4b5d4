// CHECK(call): stop with the file, line, the call's text and its status (with the runtime's
// message for a cudaError_t) when a CUDA runtime, driver or cuBLAS call returns non-zero. Shared
// by the standalone CUDA tools in this folder.
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

template <typename Status>
inline const char* cuda_check_text(Status) {
  return "";
}
inline const char* cuda_check_text(cudaError_t e) { return cudaGetErrorString(e); }

#define CHECK(call)                                                                                   \
  do {                                                                                                \
    auto status_ = (call);                                                                            \
    if (status_ != 0) {                                                                               \
      std::fprintf(stderr, "%s:%d %s failed: %d %s\n", __FILE__, __LINE__, #call, (int)status_,      \
                   cuda_check_text(status_));                                                         \
      std::exit(1);                                                                                   \
    }                                                                                                 \
  } while (0)

// CUDA error checking that names the file and line of the failing call.
#pragma once

#include <cuda_runtime.h>  // cudaError_t, cudaGetErrorString

#include <string>

#include "inference/status.h"

namespace rote::inference::cuda {

inline Status CudaStatus(cudaError_t err, const char* what, const char* file, int line) {
  if (err == cudaSuccess) return OkStatus();
  return Internal(std::string("CUDA error at ") + file + ":" + std::to_string(line) + " in " + what + ": " +
                  cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

}  // namespace rote::inference::cuda

// Returns a Status from the enclosing function when the CUDA call fails.
#define ROTE_CUDA_RETURN_IF_ERROR(call)                                                              \
  do {                                                                                               \
    const cudaError_t rote_cuda_err_ = (call);                                                       \
    if (rote_cuda_err_ != cudaSuccess)                                                               \
      return ::rote::inference::cuda::CudaStatus(rote_cuda_err_, #call, __FILE__, __LINE__);         \
  } while (0)

// Four consecutive weights of a lane row (one 8- or 16-byte load) and their exact fp32 values:
// shared by the kernel files that read weights in lane order. Device code only (.cu files).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "inference/cuda/kernels.h"

namespace rote::inference::cuda {

// Four consecutive weights of a lane, raw, and their exact fp32 values.
template <WeightType T>
struct Weights4;

template <>
struct Weights4<WeightType::kBF16> {
  using Raw = uint2;
  static __device__ __forceinline__ void ToF32(Raw r, float* f) {
    f[0] = __uint_as_float(r.x << 16);
    f[1] = __uint_as_float(r.x & 0xffff0000u);
    f[2] = __uint_as_float(r.y << 16);
    f[3] = __uint_as_float(r.y & 0xffff0000u);
  }
};

template <>
struct Weights4<WeightType::kF16> {
  using Raw = uint2;
  static __device__ __forceinline__ void ToF32(Raw r, float* f) {
    // Widening fp16 -> fp32 is exact, so __half2float equals the host's f16_to_f32 on every input.
    f[0] = __half2float(__ushort_as_half(static_cast<unsigned short>(r.x & 0xffffu)));
    f[1] = __half2float(__ushort_as_half(static_cast<unsigned short>(r.x >> 16)));
    f[2] = __half2float(__ushort_as_half(static_cast<unsigned short>(r.y & 0xffffu)));
    f[3] = __half2float(__ushort_as_half(static_cast<unsigned short>(r.y >> 16)));
  }
};

template <>
struct Weights4<WeightType::kF32> {
  using Raw = float4;
  static __device__ __forceinline__ void ToF32(Raw r, float* f) {
    f[0] = r.x;
    f[1] = r.y;
    f[2] = r.z;
    f[3] = r.w;
  }
};

}  // namespace rote::inference::cuda

// Hopper's warpgroup matrix instruction (wgmma.mma_async, m64n128k16, bf16 in, fp32
// accumulators) and its fences, for the fast profile's prefill products (fast_wgmma.cuh) and the
// benchmarks' bf16 ceiling (bench/inference/cuda_ceilings.cu). The instructions exist only on
// sm_90a; elsewhere WgMma traps and the fences are empty.
#pragma once

#include <vector_types.h>

#include <cstdint>

namespace rote::inference::cuda {

// A no-swizzle K-major shared-memory matrix descriptor: start, leading (between the k halves)
// and stride (between 8-row groups) byte offsets, in 16-byte units.
__device__ __forceinline__ uint64_t WgDescriptor(uint32_t smem_addr, uint32_t leading, uint32_t stride) {
  return uint64_t((smem_addr >> 4) & 0x3fff) | (uint64_t((leading >> 4) & 0x3fff) << 16) |
         (uint64_t((stride >> 4) & 0x3fff) << 32);
}

// d += A (64 x 16, this warp's 16 rows in registers) x B (16 x 128, shared memory).
__device__ __forceinline__ void WgMma(float (&d)[64], const uint4& a, uint64_t b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, accumulate, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(b), "r"(1));
#else
  (void)d, (void)a, (void)b;
  __trap();
#endif
}
__device__ __forceinline__ void WgFence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void WgCommit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void WgWait(float (&d)[64]) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  // The accumulators as operands: nothing reads them above the wait.
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
#else
  (void)d;
#endif
}

}  // namespace rote::inference::cuda

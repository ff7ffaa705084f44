// The benchmarks' kernel timeline (kernels.h, SetKernelTimeline), in ROTE_CUDA_TIMELINE builds.
// Device code only (.cu files). Each file that includes it has its own g_timeline (no separate
// compilation of device code), which SetKernelTimeline sets in every one of them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "inference/cuda/kernels.h"

namespace rote::inference::cuda {
namespace {

// Declared first in an instrumented kernel: reads the clock at the start and at Waited() (right
// after WaitForPrevious), and thread 0 appends the block's record to its multiprocessor's log
// when the scope closes, on whichever path it returns by. Elsewhere an empty struct.
#ifdef ROTE_CUDA_TIMELINE
// The log the instrumented kernels of this step append to; set before each step's launches
// (cudaMemcpyToSymbolAsync), read-only while a kernel runs.
__constant__ KernelTimeline* g_timeline = nullptr;

__device__ __forceinline__ unsigned long long TimelineClock() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

struct TimelineScope {
  KernelTimeline* tl;
  unsigned long long start = 0, waited = 0;
  TimelineKind kind;
  __device__ __forceinline__ explicit TimelineScope(TimelineKind kd) : tl(g_timeline), kind(kd) {
    if (tl != nullptr) start = TimelineClock();
  }
  __device__ __forceinline__ void Waited() {
    if (tl != nullptr) waited = TimelineClock();
  }
  __device__ __forceinline__ ~TimelineScope() {
    if (tl == nullptr || threadIdx.x + threadIdx.y + threadIdx.z != 0) return;
    const unsigned long long end = TimelineClock();
    unsigned long long grid;
    uint32_t sm;
    asm volatile("mov.u64 %0, %%gridid;" : "=l"(grid));
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    if (sm >= kTimelineMaxSms) return;
    const uint32_t slot = atomicAdd(&tl->cursor[sm], 1u);
    if (slot >= kTimelineRecordsPerSm) return;
    tl->log[sm][slot] = {grid, start, waited, end, static_cast<uint32_t>(kind), gridDim.x * gridDim.y * gridDim.z, 0, 0};
  }
};
// Benchmarks: thread 0 of the block passing point `point` (1..7) of a kernel's body; reductions
// that return nothing (red), so the thread does not wait for them.
__device__ __forceinline__ void TimelinePoint(uint32_t point) {
  KernelTimeline* tl = g_timeline;
  if (tl == nullptr || threadIdx.x != 0) return;
  const unsigned long long t = TimelineClock();
  unsigned long long grid;
  asm volatile("mov.u64 %0, %%gridid;" : "=l"(grid));
  const int g = static_cast<int>(grid % kTimelinePointGrids);
  asm volatile("red.global.max.u64 [%0], %1;" ::"l"(&tl->point_not_first[g][point]), "l"(~t) : "memory");
  asm volatile("red.global.max.u64 [%0], %1;" ::"l"(&tl->point_last[g][point]), "l"(t) : "memory");
}
#else
struct TimelineScope {
  __device__ __forceinline__ explicit TimelineScope(TimelineKind) {}
  __device__ __forceinline__ void Waited() {}
};
__device__ __forceinline__ void TimelinePoint(uint32_t) {}
#endif

}  // namespace
}  // namespace rote::inference::cuda

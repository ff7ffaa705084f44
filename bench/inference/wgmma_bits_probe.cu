// Does Hopper's warpgroup product (wgmma.mma_async m64n16k16, bf16 -> fp32) give the same bits as
// the fast profile's mma.sync.m16n8k16 when each accumulator is chained in the same order? If it
// does, a warpgroup form of the fast profile's products can keep its order and so its bits
// (docs/fast_profile.md).
//
// One warpgroup computes 64 weight rows x 16 tokens over kSteps 16-column steps; per step the
// activations' three pieces (lo, mid, hi: fast_tiles.h's exact split) each go through one
// instruction on the one accumulator, as FastLinearKernel's warps do. Four trials of different
// value ranges; each prints one JSON line per layout with the bit mismatches against mma.sync and
// the largest relative error against an fp64 sum. Exit status 1 if the K-major core-matrix layout
// (128 bytes between the two 8-column core matrices, 256 between 8-row groups) differs.
//
//   wgmma_bits_probe            (on an sm_90a GPU)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace {

constexpr int kRows = 64, kToks = 16, kSteps = 24, kCols = 16 * kSteps;

__device__ __forceinline__ uint32_t Pair(const uint16_t* p) { return uint32_t(p[0]) | (uint32_t(p[1]) << 16); }

// a: [kRows][kCols] bf16; pieces: [3][kToks][kCols] bf16 (lo, mid, hi); out: [kRows][kToks].
__global__ void MmaSyncChains(const uint16_t* a, const uint16_t* pieces, float* out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  float acc[kToks / 8][4] = {};
  for (int s = 0; s < kSteps; ++s) {
    const int k0 = 16 * s, r0 = 16 * warp + g;
    const uint32_t a0 = Pair(a + r0 * kCols + k0 + 2 * t), a1 = Pair(a + (r0 + 8) * kCols + k0 + 2 * t);
    const uint32_t a2 = Pair(a + r0 * kCols + k0 + 2 * t + 8), a3 = Pair(a + (r0 + 8) * kCols + k0 + 2 * t + 8);
    for (int piece = 0; piece < 3; ++piece)
      for (int j = 0; j < kToks / 8; ++j) {
        const uint16_t* b = pieces + (piece * kToks + 8 * j + g) * kCols + k0;
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(Pair(b + 2 * t)), "r"(Pair(b + 2 * t + 8)));
      }
  }
  for (int j = 0; j < kToks / 8; ++j)
    for (int e = 0; e < 4; ++e) out[(16 * warp + g + 8 * (e / 2)) * kToks + 8 * j + 2 * t + e % 2] = acc[j][e];
}

// A shared-memory matrix descriptor without swizzle: start, leading (K direction) and stride
// (row direction) byte offsets, each in 16-byte units.
__device__ __forceinline__ uint64_t Descriptor(const void* smem, uint32_t leading, uint32_t stride) {
  const uint32_t at = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return uint64_t((at >> 4) & 0x3fff) | (uint64_t((leading >> 4) & 0x3fff) << 16) |
         (uint64_t((stride >> 4) & 0x3fff) << 32);
}

// Element (r, k) of an [R][16] tile in 8 x 8 core matrices (16 bytes a row): kind 0 puts the
// two K halves of an 8-row group side by side (leading 128, stride 256 bytes), kind 1 puts every
// 8-row group of one K half first (leading R / 8 * 128, stride 128).
__device__ __forceinline__ int CoreIndex(int kind, int rows, int r, int k) {
  return (kind == 0 ? (r / 8) * 2 + k / 8 : (k / 8) * (rows / 8) + r / 8) * 64 + (r % 8) * 8 + k % 8;
}

__global__ void WgmmaChains(const uint16_t* a, const uint16_t* pieces, float* out, int kind, uint32_t leading,
                            uint32_t stride_a, uint32_t stride_b) {
  __shared__ __align__(128) uint16_t sa[kRows * 16];
  __shared__ __align__(128) uint16_t sb[3][kToks * 16];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  float d[kToks / 2] = {};
  for (int s = 0; s < kSteps; ++s) {
    __syncthreads();
    for (int i = tid; i < kRows * 16; i += 128) sa[CoreIndex(kind, kRows, i / 16, i % 16)] = a[(i / 16) * kCols + 16 * s + i % 16];
    for (int i = tid; i < 3 * kToks * 16; i += 128) {
      const int p = i / (kToks * 16), n = (i / 16) % kToks, k = i % 16;
      sb[p][CoreIndex(kind, kToks, n, k)] = pieces[(p * kToks + n) * kCols + 16 * s + k];
    }
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // wgmma exists only in sm_90a's code
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the stores, visible to wgmma
    __syncthreads();
    const uint64_t da = Descriptor(sa, kind == 0 ? leading : kRows / 8 * 128, kind == 0 ? stride_a : 128);
    for (int p = 0; p < 3; ++p) {
      const uint64_t db = Descriptor(sb[p], kind == 0 ? leading : kToks / 8 * 128, kind == 0 ? stride_b : 128);
      asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
      asm volatile(
          "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %10, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, accumulate, 1, 1, "
          "0, 0;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
          : "l"(da), "l"(db), "r"(1));
      asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    }
#else
    __syncthreads();
    __trap();
#endif
  }
  // The accumulator's layout is mma.sync's per 8-token group: warp w holds rows 16 w to 16 w + 15.
  for (int j = 0; j < kToks / 8; ++j)
    for (int e = 0; e < 4; ++e) out[(16 * warp + g + 8 * (e / 2)) * kToks + 8 * j + 2 * t + e % 2] = d[4 * j + e];
}

uint32_t Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
float FromBits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

bool Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::printf("{\"what\":\"error\",\"at\":\"%s\",\"error\":\"%s\"}\n", what, cudaGetErrorString(e));
  return false;
}

}  // namespace

int main() {
  int device = 0;
  cudaDeviceProp prop;
  if (!Check(cudaGetDevice(&device), "device") || !Check(cudaGetDeviceProperties(&prop, device), "properties")) return 2;
  if (prop.major != 9) {
    std::printf("{\"what\":\"skipped\",\"reason\":\"needs sm_90a, found sm_%d%d\"}\n", prop.major, prop.minor);
    return 0;
  }
  uint16_t *da = nullptr, *dp = nullptr;
  float* dout = nullptr;
  if (!Check(cudaMalloc(&da, kRows * kCols * 2), "malloc") || !Check(cudaMalloc(&dp, 3 * kToks * kCols * 2), "malloc") ||
      !Check(cudaMalloc(&dout, kRows * kToks * 4), "malloc"))
    return 2;
  int mismatches_of_layout = 0;
  for (int trial = 0; trial < 4; ++trial) {
    std::mt19937 rng(1234 + trial);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<uint16_t> a(kRows * kCols), pieces(3 * kToks * kCols);
    std::vector<float> x(kToks * kCols);
    // Trials 2-3 spread the activations over 2^30, trial 3 the weights over 2^40.
    for (auto& w : a)
      w = Bits(normal(rng) * (trial == 3 ? std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20) : 0.05f)) >> 16;
    for (auto& v : x) v = normal(rng) * (trial >= 2 ? std::ldexp(1.0f, static_cast<int>(rng() % 30) - 15) : 1.0f);
    for (int n = 0; n < kToks; ++n)
      for (int k = 0; k < kCols; ++k) {  // fast_tiles.h's FastSplit
        const float v = x[n * kCols + k];
        const uint32_t hi = Bits(v) & 0xffff0000u;
        const float rest = v - FromBits(hi);
        const uint32_t mid = Bits(rest) & 0xffff0000u;
        pieces[(0 * kToks + n) * kCols + k] = Bits(rest - FromBits(mid)) >> 16;
        pieces[(1 * kToks + n) * kCols + k] = mid >> 16;
        pieces[(2 * kToks + n) * kCols + k] = hi >> 16;
      }
    std::vector<double> exact(kRows * kToks, 0.0);
    for (int m = 0; m < kRows; ++m)
      for (int n = 0; n < kToks; ++n)
        for (int k = 0; k < kCols; ++k)
          exact[m * kToks + n] += static_cast<double>(FromBits(uint32_t(a[m * kCols + k]) << 16)) * x[n * kCols + k];
    if (!Check(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice), "copy") ||
        !Check(cudaMemcpy(dp, pieces.data(), pieces.size() * 2, cudaMemcpyHostToDevice), "copy"))
      return 2;
    std::vector<float> reference(kRows * kToks), got(kRows * kToks);
    MmaSyncChains<<<1, 128>>>(da, dp, dout);
    if (!Check(cudaDeviceSynchronize(), "mma.sync") ||
        !Check(cudaMemcpy(reference.data(), dout, reference.size() * 4, cudaMemcpyDeviceToHost), "copy"))
      return 2;
    auto report = [&](const char* layout, const std::vector<float>& o) {
      double worst = 0.0;
      int mismatches = 0;
      for (int i = 0; i < kRows * kToks; ++i) {
        worst = std::max(worst, std::fabs(o[i] - exact[i]) / (std::fabs(exact[i]) + 1e-30));
        mismatches += Bits(o[i]) != Bits(reference[i]);
      }
      std::printf("{\"what\":\"wgmma_bits\",\"trial\":%d,\"layout\":\"%s\",\"outputs\":%d,\"bit_mismatches\":%d,"
                  "\"max_rel_err_vs_fp64\":%.3e}\n",
                  trial, layout, kRows * kToks, mismatches, worst);
      return mismatches;
    };
    report("mma.sync", reference);
    struct Layout {
      const char* name;
      int kind;
      uint32_t leading, stride_a, stride_b;
    };
    // The third swaps the two offsets: a wrong layout must show as mismatches.
    for (const Layout& l : {Layout{"k_halves_adjacent", 0, 128, 256, 256}, Layout{"row_groups_adjacent", 1, 0, 0, 0},
                            Layout{"offsets_swapped", 0, 256, 128, 128}}) {
      WgmmaChains<<<1, 128>>>(da, dp, dout, l.kind, l.leading, l.stride_a, l.stride_b);
      if (!Check(cudaDeviceSynchronize(), "wgmma") || !Check(cudaMemcpy(got.data(), dout, got.size() * 4, cudaMemcpyDeviceToHost), "copy"))
        return 2;
      const int m = report(l.name, got);
      if (l.kind == 0 && l.leading == 128) mismatches_of_layout += m;
    }
  }
  std::printf("{\"what\":\"wgmma_bits_summary\",\"wgmma_equals_mma_sync\":%s}\n", mismatches_of_layout == 0 ? "true" : "false");
  cudaFree(da);
  cudaFree(dp);
  cudaFree(dout);
  return mismatches_of_layout == 0 ? 0 : 1;
}

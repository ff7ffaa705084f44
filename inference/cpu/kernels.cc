#include "inference/cpu/kernels.h"

#include <immintrin.h>  // AVX2, FMA, F16C intrinsics (used only inside target("...") functions)

#include <cmath>
#include <cstring>

#include "inference/numerics/canonical.h"

namespace rote::inference::cpu {

using numerics::kCanonicalLanes;

bool CpuHasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
  return has;
}

float DotScalar(const float* a, const float* b, int64_t n) { return numerics::canonical_dot(a, b, n); }

float DotSequential(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc = fmaf(a[i], b[i], acc);
  return acc;
}

__attribute__((target("avx2,fma"))) float DotAvx2(const float* a, const float* b, int64_t n) {
  // r0..r3 are lanes 0-7, 8-15, 16-23, 24-31 of the canonical order.
  __m256 r0 = _mm256_setzero_ps(), r1 = _mm256_setzero_ps(), r2 = _mm256_setzero_ps(), r3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    r0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), r0);
    r1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), r1);
    r2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), r2);
    r3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), r3);
  }
  if (i < n) {
    // A tail of fewer than 32 terms: its term i still belongs to lane i % 32.
    alignas(32) float acc[kCanonicalLanes];
    _mm256_store_ps(acc, r0);
    _mm256_store_ps(acc + 8, r1);
    _mm256_store_ps(acc + 16, r2);
    _mm256_store_ps(acc + 24, r3);
    for (; i < n; ++i) acc[i % kCanonicalLanes] = fmaf(a[i], b[i], acc[i % kCanonicalLanes]);
    return numerics::canonical_tree32(acc);
  }
  const __m256 s = _mm256_add_ps(_mm256_add_ps(r0, r2), _mm256_add_ps(r1, r3));  // off 16, off 8
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));  // off 4
  const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));                                  // off 2
  return _mm_cvtss_f32(_mm_add_ss(q, _mm_shuffle_ps(q, q, 1)));                         // off 1
}

namespace {

// The canonical tree over lanes held as r0..r3 (lanes 0-7, 8-15, 16-23, 24-31).
__attribute__((target("avx2,fma"))) inline float Tree(__m256 r0, __m256 r1, __m256 r2, __m256 r3) {
  const __m256 s = _mm256_add_ps(_mm256_add_ps(r0, r2), _mm256_add_ps(r1, r3));  // off 16, off 8
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));  // off 4
  const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));                                  // off 2
  return _mm_cvtss_f32(_mm_add_ss(q, _mm_shuffle_ps(q, q, 1)));                         // off 1
}

// Lanes r0..r3 plus a scalar tail of terms i in [i0, n), each to lane i % 32.
template <typename Term>
__attribute__((target("avx2,fma"))) inline float TreeWithTail(__m256 r0, __m256 r1, __m256 r2, __m256 r3, int64_t i0,
                                                              int64_t n, Term term) {
  if (i0 >= n) return Tree(r0, r1, r2, r3);
  alignas(32) float acc[kCanonicalLanes];
  _mm256_store_ps(acc, r0);
  _mm256_store_ps(acc + 8, r1);
  _mm256_store_ps(acc + 16, r2);
  _mm256_store_ps(acc + 24, r3);
  for (int64_t i = i0; i < n; ++i) acc[i % kCanonicalLanes] = term(i, acc[i % kCanonicalLanes]);
  return numerics::canonical_tree32(acc);
}

__attribute__((target("avx2,fma"))) inline __m256 LoadBf16(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

__attribute__((target("avx2,fma,f16c"))) inline __m256 LoadF16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Three tokens per pass over w: 12 named accumulators so they stay in registers (an indexed
// array of __m256 was spilled by GCC at -O2).
__attribute__((target("avx2,fma"))) void Dot3(const float* w, const float* x0, const float* x1, const float* x2,
                                              int64_t n, float* out) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  __m256 b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps(), b2 = _mm256_setzero_ps(), b3 = _mm256_setzero_ps();
  __m256 c0 = _mm256_setzero_ps(), c1 = _mm256_setzero_ps(), c2 = _mm256_setzero_ps(), c3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256 wv = _mm256_loadu_ps(w + i);
    a0 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x0 + i), a0);
    b0 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x1 + i), b0);
    c0 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x2 + i), c0);
    wv = _mm256_loadu_ps(w + i + 8);
    a1 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x0 + i + 8), a1);
    b1 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x1 + i + 8), b1);
    c1 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x2 + i + 8), c1);
    wv = _mm256_loadu_ps(w + i + 16);
    a2 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x0 + i + 16), a2);
    b2 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x1 + i + 16), b2);
    c2 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x2 + i + 16), c2);
    wv = _mm256_loadu_ps(w + i + 24);
    a3 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x0 + i + 24), a3);
    b3 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x1 + i + 24), b3);
    c3 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x2 + i + 24), c3);
  }
  out[0] = TreeWithTail(a0, a1, a2, a3, i, n, [&](int64_t j, float a) { return fmaf(w[j], x0[j], a); });
  out[1] = TreeWithTail(b0, b1, b2, b3, i, n, [&](int64_t j, float a) { return fmaf(w[j], x1[j], a); });
  out[2] = TreeWithTail(c0, c1, c2, c3, i, n, [&](int64_t j, float a) { return fmaf(w[j], x2[j], a); });
}

__attribute__((target("avx2,fma"))) void Dot2(const float* w, const float* x0, const float* x1, int64_t n, float* out) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  __m256 b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps(), b2 = _mm256_setzero_ps(), b3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256 wv = _mm256_loadu_ps(w + i);
    a0 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x0 + i), a0);
    b0 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x1 + i), b0);
    wv = _mm256_loadu_ps(w + i + 8);
    a1 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x0 + i + 8), a1);
    b1 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x1 + i + 8), b1);
    wv = _mm256_loadu_ps(w + i + 16);
    a2 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x0 + i + 16), a2);
    b2 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x1 + i + 16), b2);
    wv = _mm256_loadu_ps(w + i + 24);
    a3 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x0 + i + 24), a3);
    b3 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x1 + i + 24), b3);
  }
  out[0] = TreeWithTail(a0, a1, a2, a3, i, n, [&](int64_t j, float a) { return fmaf(w[j], x0[j], a); });
  out[1] = TreeWithTail(b0, b1, b2, b3, i, n, [&](int64_t j, float a) { return fmaf(w[j], x1[j], a); });
}

__attribute__((target("avx2,fma"))) void Bf16ToF32Avx2(const uint16_t* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(w));
  }
  for (; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + i, 2);
    dst[i] = numerics::bf16_to_f32(h);
  }
}

__attribute__((target("avx2,fma,f16c"))) void F16ToF32Avx2(const uint16_t* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));  // exact: every binary16 is a binary32
  }
  for (; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + i, 2);
    dst[i] = numerics::f16_to_f32(h);
  }
}

}  // namespace

__attribute__((target("avx2,fma,f16c"))) float DotStoredAvx2(DType dtype, const void* row, const float* x, int64_t n) {
  if (dtype == DType::kF32) return DotAvx2(static_cast<const float*>(row), x, n);
  const auto* h = static_cast<const uint16_t*>(row);
  __m256 r0 = _mm256_setzero_ps(), r1 = _mm256_setzero_ps(), r2 = _mm256_setzero_ps(), r3 = _mm256_setzero_ps();
  int64_t i = 0;
  if (dtype == DType::kBF16) {
    for (; i + 32 <= n; i += 32) {
      r0 = _mm256_fmadd_ps(LoadBf16(h + i), _mm256_loadu_ps(x + i), r0);
      r1 = _mm256_fmadd_ps(LoadBf16(h + i + 8), _mm256_loadu_ps(x + i + 8), r1);
      r2 = _mm256_fmadd_ps(LoadBf16(h + i + 16), _mm256_loadu_ps(x + i + 16), r2);
      r3 = _mm256_fmadd_ps(LoadBf16(h + i + 24), _mm256_loadu_ps(x + i + 24), r3);
    }
  } else {
    for (; i + 32 <= n; i += 32) {
      r0 = _mm256_fmadd_ps(LoadF16(h + i), _mm256_loadu_ps(x + i), r0);
      r1 = _mm256_fmadd_ps(LoadF16(h + i + 8), _mm256_loadu_ps(x + i + 8), r1);
      r2 = _mm256_fmadd_ps(LoadF16(h + i + 16), _mm256_loadu_ps(x + i + 16), r2);
      r3 = _mm256_fmadd_ps(LoadF16(h + i + 24), _mm256_loadu_ps(x + i + 24), r3);
    }
  }
  const bool bf16 = dtype == DType::kBF16;
  return TreeWithTail(r0, r1, r2, r3, i, n, [&](int64_t j, float a) {
    uint16_t v;
    std::memcpy(&v, h + j, 2);
    return fmaf(bf16 ? numerics::bf16_to_f32(v) : numerics::f16_to_f32(v), x[j], a);
  });
}

void DotMultiAvx2(const float* w, const float* const* xs, int count, int64_t n, float* out) {
  if (count == 3) return Dot3(w, xs[0], xs[1], xs[2], n, out);
  if (count == 2) return Dot2(w, xs[0], xs[1], n, out);
  out[0] = DotAvx2(w, xs[0], n);
}

void ConvertToF32(DType dtype, const void* src, int64_t n, float* dst, bool avx2) {
  const auto* p = static_cast<const uint8_t*>(src);
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, p, static_cast<size_t>(n) * 4);
      return;
    case DType::kBF16:
      if (avx2) return Bf16ToF32Avx2(reinterpret_cast<const uint16_t*>(p), n, dst);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = numerics::bf16_to_f32(h);
      }
      return;
    case DType::kF16:
      if (avx2) return F16ToF32Avx2(reinterpret_cast<const uint16_t*>(p), n, dst);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = numerics::f16_to_f32(h);
      }
      return;
  }
}

void WeightedRowSumScalar(const float* w, const float* const* rows, int64_t n, int64_t d, float* scratch,
                          float* out) {
  for (int64_t k = 0; k < kCanonicalLanes * d; ++k) scratch[k] = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    float* acc = scratch + (j % kCanonicalLanes) * d;
    const float* row = rows[j];
    for (int64_t x = 0; x < d; ++x) acc[x] = fmaf(w[j], row[x], acc[x]);
  }
  for (int off = 16; off >= 1; off >>= 1) {
    for (int l = 0; l < off; ++l) {
      float* a = scratch + l * d;
      const float* b = scratch + (l + off) * d;
      for (int64_t x = 0; x < d; ++x) a[x] = a[x] + b[x];
    }
  }
  std::memcpy(out, scratch, static_cast<size_t>(d) * 4);
}

__attribute__((target("avx2,fma"))) void WeightedRowSumAvx2(const float* w, const float* const* rows, int64_t n,
                                                            int64_t d, float* scratch, float* out) {
  if (d % 8 != 0) return WeightedRowSumScalar(w, rows, n, d, scratch, out);
  // Vectorised across x (independent outputs); each (lane, x) accumulator sees its terms in
  // increasing j exactly as in the scalar form.
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t k = 0; k < kCanonicalLanes * d; k += 8) _mm256_storeu_ps(scratch + k, zero);
  for (int64_t j = 0; j < n; ++j) {
    float* acc = scratch + (j % kCanonicalLanes) * d;
    const float* row = rows[j];
    const __m256 wj = _mm256_set1_ps(w[j]);
    for (int64_t x = 0; x < d; x += 8) {
      _mm256_storeu_ps(acc + x, _mm256_fmadd_ps(wj, _mm256_loadu_ps(row + x), _mm256_loadu_ps(acc + x)));
    }
  }
  for (int off = 16; off >= 1; off >>= 1) {
    for (int l = 0; l < off; ++l) {
      float* a = scratch + l * d;
      const float* b = scratch + (l + off) * d;
      for (int64_t x = 0; x < d; x += 8) {
        _mm256_storeu_ps(a + x, _mm256_add_ps(_mm256_loadu_ps(a + x), _mm256_loadu_ps(b + x)));
      }
    }
  }
  std::memcpy(out, scratch, static_cast<size_t>(d) * 4);
}

}  // namespace rote::inference::cpu

// The exact numerics profile's scalar building blocks (docs/numerics.md), written once for the
// host and for CUDA. Everything here uses only IEEE-exact operations: +, -, *, fmaf, correctly
// rounded / and sqrtf, floorf, and bit manipulation. Nothing calls libm's expf, sinf or powf,
// whose results differ between hosts and devices.
//
// This header must compile under g++ (-ffp-contract=off) and under nvcc (-fmad=false); it
// includes only <cmath>, <cstdint> and <cstring> so both can use it.
#pragma once

#include <cmath>    // floorf, fmaf, sqrtf: correctly rounded in glibc and CUDA
#include <cstdint>
#include <cstring>  // memcpy for bit casts on the host

#if defined(__CUDACC__)
#define ROTE_HD __host__ __device__
#else
#define ROTE_HD
#endif

namespace rote::numerics {

// Every reduction of the exact profile has 32 lanes: term i goes to lane i % 32.
inline constexpr int kCanonicalLanes = 32;

ROTE_HD inline float float_from_bits(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

ROTE_HD inline uint32_t bits_from_float(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
#endif
}

// bf16 is the top half of an fp32: the conversion is exact.
ROTE_HD inline float bf16_to_f32(uint16_t h) { return float_from_bits(static_cast<uint32_t>(h) << 16); }

// IEEE binary16 -> binary32, exact for every input (subnormals normalised, inf/NaN kept).
ROTE_HD inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return float_from_bits(sign);
    // Subnormal half: value = mant * 2^-24. Shift until the implicit bit appears.
    uint32_t e = 113;  // 127 - 15 + 1
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    mant &= 0x3ffu;
    return float_from_bits(sign | (e << 23) | (mant << 13));
  }
  if (exp == 31) return float_from_bits(sign | 0x7f800000u | (mant << 13));
  return float_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

// The fixed pairwise tree that combines the 32 lane accumulators:
// for off in 16, 8, 4, 2, 1: acc[l] = acc[l] + acc[l + off] for l < off. Result acc[0].
// (On CUDA this equals the xor-butterfly v += __shfl_xor_sync(~0u, v, off), because IEEE
// addition is commutative.) Destroys acc.
ROTE_HD inline float canonical_tree32(float* acc) {
  for (int off = 16; off >= 1; off >>= 1) {
    for (int l = 0; l < off; ++l) acc[l] = acc[l] + acc[l + off];
  }
  return acc[0];
}

// Canonical dot product of length n: lane l = i % 32 takes fmaf(a[i], b[i], acc[l]) in
// increasing i, then canonical_tree32. This scalar form is the reference every faster
// implementation (AVX2, CUDA warps) must equal bit for bit.
ROTE_HD inline float canonical_dot(const float* a, const float* b, int64_t n) {
  float acc[kCanonicalLanes];
  for (int l = 0; l < kCanonicalLanes; ++l) acc[l] = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc[i % kCanonicalLanes] = fmaf(a[i], b[i], acc[i % kCanonicalLanes]);
  return canonical_tree32(acc);
}

// Canonical plain sum of length n: acc[i % 32] = acc[i % 32] + x[i], then canonical_tree32.
ROTE_HD inline float canonical_sum(const float* x, int64_t n) {
  float acc[kCanonicalLanes];
  for (int l = 0; l < kCanonicalLanes; ++l) acc[l] = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc[i % kCanonicalLanes] = acc[i % kCanonicalLanes] + x[i];
  return canonical_tree32(acc);
}

// (e^r - 1) / r for |r| <= 0.3466 as the Taylor polynomial of degree 6, Horner with fmaf:
//   p = 1/5040; p = fmaf(p, r, 1/720); ... 1/120, 1/24, 1/6, 0.5, 1.0
// Shared by canonical_expf (e^r = fmaf(p, r, 1)) and canonical_tanh (e^r - 1 = r * p).
ROTE_HD inline float canonical_expm1_poly(float r) {
  float p = 1.0f / 5040.0f;
  p = fmaf(p, r, 1.0f / 720.0f);
  p = fmaf(p, r, 1.0f / 120.0f);
  p = fmaf(p, r, 1.0f / 24.0f);
  p = fmaf(p, r, 1.0f / 6.0f);
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.0f);
  return p;
}

// e^x in fp32 from IEEE ops only.
//   k = floor(x * log2(e) + 0.5)             (one mul, one add, floorf: all exact-rounded)
//   r = fmaf(-k, LN2_HI, x); r = fmaf(-k, LN2_LO, r)   (Cody-Waite; k * LN2_HI is exact)
//   p = Taylor polynomial of degree 7 in r, Horner form with fmaf, from 1/5040 down to 1
//   result = (p * 2^k1) * 2^k2 with k1 = k / 2 (truncating), k2 = k - k1, each power built
//            from exponent bits; splitting k keeps both factors normal, so the first product
//            is exact and the second rounds once (also into the subnormal range).
// |r| <= 0.3466 and the Taylor remainder is below 2^-27 relative, so results are within 2 ulp
// of the true e^x. NaN returns NaN; x > 88.8 returns +inf; x < -104 returns +0.
ROTE_HD inline float canonical_expf(float x) {
  if (x != x) return x + x;  // NaN (quietened)
  if (x > 88.8f) return float_from_bits(0x7f800000u);
  if (x < -104.0f) return 0.0f;
  const float kLog2e = 1.44269502925872802734375f;       // fp32(log2(e))
  const float kLn2Hi = 0.693145751953125f;               // 12 significant bits: k*kLn2Hi exact
  const float kLn2Lo = 1.428606765330187045e-06f;        // ln(2) - kLn2Hi
  const float k = floorf(x * kLog2e + 0.5f);
  float r = fmaf(-k, kLn2Hi, x);
  r = fmaf(-k, kLn2Lo, r);
  const float p = fmaf(canonical_expm1_poly(r), r, 1.0f);
  const int32_t ki = static_cast<int32_t>(k);  // in [-150, 129]
  const int32_t k1 = ki / 2;
  const int32_t k2 = ki - k1;
  const float s1 = float_from_bits(static_cast<uint32_t>(k1 + 127) << 23);
  const float s2 = float_from_bits(static_cast<uint32_t>(k2 + 127) << 23);
  return (p * s1) * s2;
}

// SiLU(x) = x / (1 + e^-x): one add and one correctly rounded divide after canonical_expf.
ROTE_HD inline float canonical_silu(float x) { return x / (1.0f + canonical_expf(-x)); }

// tanh(x) in fp32 from IEEE ops only, accurate to a few ulp everywhere (no cancellation near 0):
//   a = |x|
//   a < 0.17328679513998632f (ln 2 / 4, where canonical_expf's reduction has k = 0):
//     r = -2a; em = r * canonical_expm1_poly(r) (e^r - 1 without cancellation);
//     t = -em / (2 + em)
//   otherwise: e = canonical_expf(-2a); t = (1 - e) / (1 + e)
//   result = t with the sign bit of x.
// NaN returns NaN; |x| > 52 returns +-1 exactly (e^-104 is 0).
ROTE_HD inline float canonical_tanh(float x) {
  const float a = fabsf(x);
  float t;
  if (a < 0.17328679513998632f) {
    const float r = -2.0f * a;
    const float em = r * canonical_expm1_poly(r);
    t = -em / (2.0f + em);
  } else {
    const float e = canonical_expf(-2.0f * a);
    t = (1.0f - e) / (1.0f + e);
  }
  return float_from_bits(bits_from_float(t) | (bits_from_float(x) & 0x80000000u));
}

// Soft-capping (Gemma 2): cap * tanh(x / cap), evaluated as HF does: divide, tanh, multiply.
ROTE_HD inline float canonical_softcap(float x, float cap) { return canonical_tanh(x / cap) * cap; }

// HF "gelu_pytorch_tanh": 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), written with
// the identity 0.5 (1 + tanh(u)) = 1 / (1 + e^(-2u)):
//   x3 = (x * x) * x;  inner = x + 0.044715f * x3;  z = 1.5957691216057308f * inner  (2 sqrt(2/pi))
//   result = x / (1.0f + canonical_expf(-z))
ROTE_HD inline float canonical_gelu_tanh(float x) {
  const float x3 = (x * x) * x;
  const float inner = x + 0.044715f * x3;
  const float z = 1.5957691216057308f * inner;
  return x / (1.0f + canonical_expf(-z));
}

// Rotary embedding of one pair (x0 at index i, x1 at index i + head_dim/2), plain mul/sub/add:
//   x0' = (x0 * c) - (x1 * s)        x1' = (x0 * s) + (x1 * c)
ROTE_HD inline void canonical_rotate(float& x0, float& x1, float c, float s) {
  const float a = x0 * c;
  const float b = x1 * s;
  const float e = x0 * s;
  const float f = x1 * c;
  x0 = a - b;
  x1 = e + f;
}

// RMSNorm scale: r = 1 / sqrt(ss / n + eps) with ss = canonical_dot(x, x, n). The caller then
// writes y_i = (x_i * r) * w_i.
ROTE_HD inline float canonical_rms_scale(float sum_of_squares, int64_t n, float eps) {
  return 1.0f / sqrtf(sum_of_squares / static_cast<float>(n) + eps);
}

// LayerNorm with bias (StarCoder2), over x of length n:
//   mean = canonical_sum(x, n) / (float)n
//   d_i  = x_i - mean                      (kept in a scratch vector)
//   r    = canonical_rms_scale(canonical_dot(d, d, n), n, eps)   (biased variance, as torch)
//   y_i  = ((d_i * r) * w_i) + b_i
// This helper is the scalar reference; backends may compute the two reductions their own way as
// long as each is the canonical reduction of its length.
ROTE_HD inline float canonical_mean(float sum, int64_t n) { return sum / static_cast<float>(n); }

}  // namespace rote::numerics

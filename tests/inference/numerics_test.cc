// The exact profile's building blocks: exp accuracy and special values, exact conversions, the
// AVX2 kernels equal to the scalar reference bit for bit, rote's own double functions, sha256.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <iostream>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "inference/cpu/kernels.h"
#include "inference/util/thread_pool.h"
#include "inference/numerics/canonical.h"
#include "inference/numerics/rope.h"
#include "inference/numerics/routing.h"
#include "inference/util/sha256.h"

namespace rote::inference {
namespace {

using numerics::bits_from_float;

int64_t UlpDistance(float a, float b) {
  auto key = [](float f) {
    const int32_t i = static_cast<int32_t>(bits_from_float(f));
    return i < 0 ? static_cast<int64_t>(INT32_MIN) - i : static_cast<int64_t>(i);
  };
  return std::llabs(key(a) - key(b));
}

TEST(CanonicalExpTest, WithinTwoUlpOfCorrectlyRoundedExp) {
  int64_t worst = 0;
  for (float x = -103.0f; x < 88.7f; x += 0.0137f) {
    const float want = static_cast<float>(std::exp(static_cast<double>(x)));
    const float got = numerics::canonical_expf(x);
    if (want < 1.2e-38f) continue;  // subnormal results are checked below
    worst = std::max(worst, UlpDistance(got, want));
  }
  EXPECT_LE(worst, 2);
}

TEST(CanonicalExpTest, SpecialValues) {
  EXPECT_EQ(numerics::canonical_expf(0.0f), 1.0f);
  EXPECT_EQ(numerics::canonical_expf(-0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(numerics::canonical_expf(NAN)));
  EXPECT_EQ(numerics::canonical_expf(INFINITY), INFINITY);
  EXPECT_EQ(numerics::canonical_expf(89.0f), INFINITY);
  EXPECT_EQ(numerics::canonical_expf(-INFINITY), 0.0f);
  EXPECT_EQ(numerics::canonical_expf(-200.0f), 0.0f);
  // Subnormal range: close to the true value (absolute error below one subnormal step).
  const float sub = numerics::canonical_expf(-100.0f);
  EXPECT_GT(sub, 0.0f);
  EXPECT_NEAR(sub, std::exp(-100.0), 2e-45);
  EXPECT_FLOAT_EQ(numerics::canonical_silu(1.0f), static_cast<float>(1.0 / (1.0 + std::exp(-1.0))));
  EXPECT_EQ(numerics::canonical_silu(-200.0f), -0.0f);
}

TEST(ConversionTest, F16ToF32ExactForAllHalves) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint32_t s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    const float got = numerics::f16_to_f32(static_cast<uint16_t>(h));
    if (e == 31) {
      if (m == 0) {
        EXPECT_TRUE(std::isinf(got)) << h;
      } else {
        EXPECT_TRUE(std::isnan(got)) << h;
      }
      continue;
    }
    const double mag = e == 0 ? std::ldexp(static_cast<double>(m), -24) : std::ldexp(1024.0 + m, static_cast<int>(e) - 25);
    const double want = s ? -mag : mag;
    ASSERT_EQ(static_cast<double>(got), want) << h;
    ASSERT_EQ(std::signbit(got), s == 1) << h;
  }
}

TEST(ConversionTest, Bf16IsTheTopHalf) {
  EXPECT_EQ(numerics::bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(numerics::bf16_to_f32(0xc000), -2.0f);
  std::vector<uint16_t> src(37);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint16_t>(0x3c00 + 97 * i);
  std::vector<float> a(src.size()), b(src.size());
  for (DType dt : {DType::kBF16, DType::kF16}) {
    cpu::ConvertToF32(dt, src.data(), static_cast<int64_t>(src.size()), a.data(), false);
    if (cpu::CpuHasAvx2Fma()) {
      cpu::ConvertToF32(dt, src.data(), static_cast<int64_t>(src.size()), b.data(), true);
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
    }
  }
}

TEST(CanonicalDotTest, LaneAssignmentAndTreeAsDocumented) {
  // 64 terms: lane l gets terms l and l + 32. Build the documented order by hand.
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> a(70), b(70);
  for (auto& v : a) v = d(rng) * 1000.0f;
  for (auto& v : b) v = d(rng);
  float acc[32] = {};
  for (int i = 0; i < 70; ++i) acc[i % 32] = fmaf(a[i], b[i], acc[i % 32]);
  for (int off = 16; off >= 1; off >>= 1)
    for (int l = 0; l < off; ++l) acc[l] += acc[l + off];
  EXPECT_EQ(bits_from_float(numerics::canonical_dot(a.data(), b.data(), 70)), bits_from_float(acc[0]));
}

TEST(CanonicalDotTest, Avx2EqualsScalarBitwise) {
  if (!cpu::CpuHasAvx2Fma()) GTEST_SKIP() << "no AVX2/FMA on this CPU";
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  int differs_from_sequential = 0;
  for (int n = 0; n <= 300; ++n) {
    std::vector<float> a(n), b(n);
    for (auto& v : a) v = d(rng) * 100.0f;
    for (auto& v : b) v = d(rng);
    const float s = cpu::DotScalar(a.data(), b.data(), n);
    const float v = cpu::DotAvx2(a.data(), b.data(), n);
    ASSERT_EQ(bits_from_float(s), bits_from_float(v)) << "n=" << n;
    if (bits_from_float(s) != bits_from_float(cpu::DotSequential(a.data(), b.data(), n))) ++differs_from_sequential;
  }
  // The orders really differ: otherwise the kernels' equality would prove nothing.
  EXPECT_GT(differs_from_sequential, 100);
}

TEST(CanonicalDotTest, StoredAndMultiTokenKernelsEqualScalar) {
  if (!cpu::CpuHasAvx2Fma()) GTEST_SKIP() << "no AVX2/FMA on this CPU";
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (int n : {1, 16, 31, 32, 33, 64, 100, 896}) {
    std::vector<uint16_t> h(n);
    std::vector<float> x0(n), x1(n), x2(n);
    for (auto& v : h) v = static_cast<uint16_t>(rng() & 0x3fff) | 0x3000;  // moderate magnitudes
    for (auto* x : {&x0, &x1, &x2})
      for (auto& v : *x) v = d(rng);
    for (DType dt : {DType::kBF16, DType::kF16}) {
      std::vector<float> w(n);
      cpu::ConvertToF32(dt, h.data(), n, w.data(), false);
      const float want = cpu::DotScalar(w.data(), x0.data(), n);
      ASSERT_EQ(bits_from_float(cpu::DotStoredAvx2(dt, h.data(), x0.data(), n)), bits_from_float(want)) << n;
      const float* xs[3] = {x0.data(), x1.data(), x2.data()};
      for (int count = 1; count <= 3; ++count) {
        float out[3];
        cpu::DotMultiAvx2(w.data(), xs, count, n, out);
        for (int k = 0; k < count; ++k) {
          ASSERT_EQ(bits_from_float(out[k]), bits_from_float(cpu::DotScalar(w.data(), xs[k], n))) << n << " " << k;
        }
      }
    }
    std::vector<float> wf(n);
    for (auto& v : wf) v = d(rng);
    ASSERT_EQ(bits_from_float(cpu::DotStoredAvx2(DType::kF32, wf.data(), x1.data(), n)),
              bits_from_float(cpu::DotScalar(wf.data(), x1.data(), n)));
  }
}

TEST(CanonicalDotTest, WeightedRowSumAvx2EqualsScalar) {
  if (!cpu::CpuHasAvx2Fma()) GTEST_SKIP() << "no AVX2/FMA on this CPU";
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (int d_len : {8, 16, 64, 128, 12}) {
    for (int n : {1, 5, 31, 32, 33, 100, 257}) {
      std::vector<float> w(n), rows(static_cast<size_t>(n) * d_len), scratch(32 * d_len), o1(d_len), o2(d_len);
      std::vector<const float*> ptrs(n);
      for (auto& v : w) v = d(rng);
      for (auto& v : rows) v = d(rng);
      for (int j = 0; j < n; ++j) ptrs[j] = rows.data() + static_cast<size_t>(j) * d_len;
      cpu::WeightedRowSumScalar(w.data(), ptrs.data(), n, d_len, scratch.data(), o1.data());
      cpu::WeightedRowSumAvx2(w.data(), ptrs.data(), n, d_len, scratch.data(), o2.data());
      ASSERT_EQ(0, std::memcmp(o1.data(), o2.data(), o1.size() * 4)) << "d=" << d_len << " n=" << n;
      // And each output is the canonical dot of the weights with that column.
      for (int x = 0; x < d_len; ++x) {
        std::vector<float> col(n);
        for (int j = 0; j < n; ++j) col[j] = ptrs[j][x];
        ASSERT_EQ(bits_from_float(o1[x]), bits_from_float(numerics::canonical_dot(w.data(), col.data(), n)));
      }
    }
  }
}

TEST(HostMathTest, RoteDoubleFunctionsAreAccurate) {
  for (double x = -700; x < 700; x += 0.731) {
    EXPECT_NEAR(numerics::rote_exp(x) / std::exp(x), 1.0, 4e-16) << x;
  }
  for (double x = 1e-300; x < 1e300; x *= 3.7) {
    EXPECT_NEAR(numerics::rote_log(x), std::log(x), 4e-16 * std::max(1.0, std::fabs(std::log(x)))) << x;
  }
  for (double x = -2e5; x < 2e5; x += 97.3) {
    double s, c;
    numerics::rote_sincos(x, &s, &c);
    EXPECT_NEAR(s, std::sin(x), 1e-12) << x;
    EXPECT_NEAR(c, std::cos(x), 1e-12) << x;
  }
}

TEST(HostMathTest, RopeInvFreqDefaultAndLlama3) {
  ModelConfig c;
  c.head_dim = 64;
  c.rope_theta = 1000000.0;
  std::vector<float> inv = numerics::RopeInvFreq(c);
  ASSERT_EQ(inv.size(), 32u);
  for (int i = 0; i < 32; ++i) {
    const double want = std::pow(1000000.0, -(2.0 * i) / 64.0);
    EXPECT_NEAR(inv[i], want, want * 6e-8) << i;
  }
  c.rope_theta = 500000.0;
  c.rope_scaling.type = RopeScaling::Type::kLlama3;
  c.rope_scaling.factor = 32;
  inv = numerics::RopeInvFreq(c);
  const double pi = 3.141592653589793;
  for (int i = 0; i < 32; ++i) {
    const double base = std::pow(500000.0, -(2.0 * i) / 64.0);
    const double wavelen = 2 * pi / base;
    double want = base;
    if (wavelen > 8192.0) {
      want = base / 32;
    } else if (wavelen >= 2048.0) {
      const double smooth = (8192.0 / wavelen - 1.0) / 3.0;
      want = (1 - smooth) * base / 32 + smooth * base;
    }
    EXPECT_NEAR(inv[i], want, want * 1.2e-7) << i;
  }
  numerics::RopeTable t = numerics::BuildRopeTable(c, 100);
  EXPECT_EQ(t.cos[0], 1.0f);
  EXPECT_EQ(t.sin[0], 0.0f);
  EXPECT_NEAR(t.cos[99 * 32 + 0], std::cos(99.0), 1e-6);
}

TEST(CanonicalTest, TanhIsAccurateOddAndSaturates) {
  double worst = 0;
  for (float x = -30.0f; x < 30.0f; x += 0.00173f) {
    const float got = numerics::canonical_tanh(x);
    const double want = std::tanh(static_cast<double>(x));
    worst = std::max(worst, std::fabs(got - want) / std::max(std::fabs(want), 1e-30));
    EXPECT_EQ(numerics::canonical_tanh(-x), -got) << x;  // odd, bit for bit
  }
  for (float x = 1e-30f; x < 1.0f; x *= 1.37f) {  // tiny arguments keep full relative accuracy
    const double want = std::tanh(static_cast<double>(x));
    worst = std::max(worst, std::fabs(numerics::canonical_tanh(x) - want) / want);
  }
  std::cout << "canonical_tanh worst relative error " << worst << "\n";
  EXPECT_LT(worst, 6e-7);  // a few ulp
  EXPECT_EQ(numerics::canonical_tanh(60.0f), 1.0f);
  EXPECT_EQ(numerics::canonical_tanh(-1e30f), -1.0f);
  EXPECT_EQ(numerics::canonical_tanh(INFINITY), 1.0f);
  EXPECT_EQ(numerics::canonical_tanh(0.0f), 0.0f);
  EXPECT_TRUE(std::isnan(numerics::canonical_tanh(NAN)));
}

TEST(CanonicalTest, SoftcapCapsAndKeepsSmallValues) {
  EXPECT_EQ(numerics::canonical_softcap(1e9f, 30.0f), 30.0f);
  EXPECT_EQ(numerics::canonical_softcap(-1e9f, 30.0f), -30.0f);
  for (float x : {-100.0f, -3.0f, -0.01f, 0.0f, 0.5f, 29.0f, 1000.0f}) {
    EXPECT_EQ(numerics::canonical_softcap(x, 30.0f), numerics::canonical_tanh(x / 30.0f) * 30.0f);
    EXPECT_NEAR(numerics::canonical_softcap(x, 30.0f), 30.0 * std::tanh(x / 30.0), 3e-5) << x;
  }
}

TEST(CanonicalTest, GeluTanhMatchesTheFormula) {
  double worst = 0;
  for (float x = -8.0f; x < 12.0f; x += 0.0037f) {
    // 0.5 x (1 + tanh(u)) written as x / (1 + e^(-2u)), which double evaluates without the
    // cancellation of 1 + tanh(u) in the negative tail.
    const double xd = x;
    const double u = std::sqrt(2.0 / 3.141592653589793) * (xd + 0.044715 * xd * xd * xd);
    const double want = xd / (1.0 + std::exp(-2.0 * u));
    const double err = std::fabs(numerics::canonical_gelu_tanh(x) - want);
    worst = std::max(worst, err / std::max(std::fabs(want), 1e-30));
  }
  std::cout << "canonical_gelu_tanh worst relative error " << worst << "\n";
  EXPECT_LT(worst, 1e-5);  // relative, into the negative tail (gelu(-8) ~ 1e-21)
  EXPECT_EQ(numerics::canonical_gelu_tanh(0.0f), 0.0f);
  EXPECT_EQ(numerics::canonical_gelu_tanh(100.0f), 100.0f);
  EXPECT_EQ(numerics::canonical_gelu_tanh(-100.0f), 0.0f);
}

TEST(CanonicalTest, ExpIsUnchangedBySharingItsPolynomial) {
  // canonical_expf = fmaf(canonical_expm1_poly(r), r, 1) scaled: the same operations as the
  // degree-7 Horner form written out, so the bits of every earlier result stand.
  for (float x = -100.0f; x < 88.0f; x += 0.0371f) {
    const float k = floorf(x * 1.44269502925872802734375f + 0.5f);
    float r = fmaf(-k, 0.693145751953125f, x);
    r = fmaf(-k, 1.428606765330187045e-06f, r);
    float p = 1.0f / 5040.0f;
    for (float coef : {1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f}) p = fmaf(p, r, coef);
    const int32_t ki = static_cast<int32_t>(k), k1 = ki / 2, k2 = ki - k1;
    const float want = (p * numerics::float_from_bits(static_cast<uint32_t>(k1 + 127) << 23)) *
                       numerics::float_from_bits(static_cast<uint32_t>(k2 + 127) << 23);
    ASSERT_EQ(numerics::bits_from_float(numerics::canonical_expf(x)), numerics::bits_from_float(want)) << x;
  }
}

TEST(HostMathTest, RopeLinearPartialLocalAndLongrope) {
  ModelConfig c;
  c.head_dim = 16;
  c.rope_theta = 100000.0;
  const std::vector<float> plain = numerics::RopeInvFreq(c);
  c.rope_scaling.type = RopeScaling::Type::kLinear;
  c.rope_scaling.factor = 4.0;
  std::vector<float> inv = numerics::RopeInvFreq(c);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(inv[i], plain[i] / 4.0, plain[i] * 1e-7) << i;

  // Partial rotary: 12 of 16 dimensions, exponents over 12; the local table ignores scaling.
  c.rotary_dim = 12;
  c.rope_local_theta = 10000.0;
  inv = numerics::RopeInvFreq(c, /*local=*/true);
  ASSERT_EQ(inv.size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(inv[i], std::pow(10000.0, -(2.0 * i) / 12.0), inv[i] * 1e-7) << i;
  EXPECT_EQ(numerics::BuildRopeTable(c, 4, /*local=*/true).half_dim, 6);

  // Longrope: short factors below original_max_position_embeddings, long from there on, cos and
  // sin scaled by fp32(attention_factor).
  c.rope_scaling.type = RopeScaling::Type::kLongRope;
  c.rope_scaling.original_max_position_embeddings = 8;
  c.rope_scaling.short_factor = {1.0, 1.5, 2.0, 2.5, 3.0, 3.5};
  c.rope_scaling.long_factor = {4.0, 8.0, 16.0, 32.0, 64.0, 128.0};
  c.rope_scaling.attention_factor = 1.25;
  const std::vector<float> s = numerics::RopeInvFreq(c, false, false), l = numerics::RopeInvFreq(c, false, true);
  for (int i = 0; i < 6; ++i) {
    const double base = std::pow(100000.0, -(2.0 * i) / 12.0);
    EXPECT_NEAR(s[i], base / c.rope_scaling.short_factor[i], s[i] * 1e-7) << i;
    EXPECT_NEAR(l[i], base / c.rope_scaling.long_factor[i], l[i] * 1e-7) << i;
  }
  const numerics::RopeTable t = numerics::BuildRopeTable(c, 12);
  for (int p : {1, 7, 8, 11}) {
    const std::vector<float>& f = p < 8 ? s : l;
    for (int i = 0; i < 6; ++i) {
      const float angle = static_cast<float>(p) * f[i];
      EXPECT_NEAR(t.cos[p * 6 + i], 1.25 * std::cos(static_cast<double>(angle)), 2e-7) << p << " " << i;
      EXPECT_NEAR(t.sin[p * 6 + i], 1.25 * std::sin(static_cast<double>(angle)), 2e-7) << p << " " << i;
    }
  }
}

TEST(ThreadPoolTest, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 100, 1001}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      for (int rep = 0; rep < 20; ++rep) {
        pool.ParallelFor(n, [&](int64_t b, int64_t e) {
          ASSERT_LT(b, e);
          for (int64_t i = b; i < e; ++i) ++hits[i];
        });
      }
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 20) << threads << " threads, n=" << n << ", i=" << i;
    }
  }
}

TEST(Sha256Test, StandardVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 h;
  const std::string a(1000, 'a');
  for (int i = 0; i < 1000; ++i) h.Update(a.data(), 1000);
  EXPECT_EQ(h.FinishHex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // Split updates equal one update.
  Sha256 s1, s2;
  const std::string text = "The quick brown fox jumps over the lazy dog, many times over. 0123456789";
  s1.Update(text);
  for (char ch : text) s2.Update(&ch, 1);
  EXPECT_EQ(s1.FinishHex(), s2.FinishHex());
}

// The standard vectors through each path this CPU has, and the SHA extensions against the
// portable code over every length up to 300 bytes and a few MB (many blocks a call), bit for bit.
TEST(Sha256Test, ShaExtensionsEqualThePortableCode) {
  const bool hardware = Sha256::UsesShaExtensions();
  std::vector<uint8_t> data(3 << 20);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (uint8_t& b : data) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<uint8_t>(x >> 32);
  }
  auto digests = [&] {
    std::vector<std::string> out;
    out.push_back(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"));
    for (size_t n = 0; n <= 300; ++n) {
      Sha256 h;
      h.Update(data.data(), n);
      out.push_back(h.FinishHex());
    }
    Sha256 whole, pieces;
    whole.Update(data.data(), data.size());
    out.push_back(whole.FinishHex());
    for (size_t at = 0; at < data.size();) {  // uneven pieces: partial blocks on both sides
      const size_t n = std::min<size_t>(data.size() - at, 1 + (at * 7919) % 100000);
      pieces.Update(data.data() + at, n);
      at += n;
    }
    out.push_back(pieces.FinishHex());
    return out;
  };
  Sha256::SetShaExtensionsForTesting(false);
  ASSERT_FALSE(Sha256::UsesShaExtensions());
  const std::vector<std::string> portable = digests();
  Sha256::SetShaExtensionsForTesting(true);
  const std::vector<std::string> fast = digests();
  Sha256::SetShaExtensionsForTesting(hardware);
  EXPECT_EQ(portable.front(), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(portable[portable.size() - 1], portable[portable.size() - 2]);
  EXPECT_EQ(fast, portable);
  if (!hardware) GTEST_SKIP() << "this CPU has no SHA extensions: only the portable code ran";
}

// The router's choice (numerics::RouteToken): the k largest probabilities, ties to the lower
// index, returned in increasing expert index with their weights; renormalised over the chosen
// ones where asked; the probabilities themselves from the canonical softmax.
TEST(RoutingTest, ChoosesTheLargestInIndexOrderAndTiesGoLow) {
  const float logits[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.5f, 2.0f};
  float scratch[12];
  int32_t experts[3];
  float weights[3];
  numerics::RouteToken(logits, 6, 3, /*normalize=*/false, scratch, experts, weights);
  // Three tie at 2.0: all three chosen, in index order.
  EXPECT_EQ(std::vector<int32_t>(experts, experts + 3), (std::vector<int32_t>{1, 3, 5}));
  numerics::RouteToken(logits, 6, 2, false, scratch, experts, weights);
  EXPECT_EQ(std::vector<int32_t>(experts, experts + 2), (std::vector<int32_t>{1, 3}));  // 5 loses the tie
  // The weights are the softmax's probabilities, computed as the canonical order says.
  float e[6];
  for (int i = 0; i < 6; ++i) e[i] = numerics::canonical_expf(logits[i] - 2.0f);
  const float sum = numerics::canonical_sum(e, 6);
  EXPECT_EQ(weights[0], e[1] / sum);
  EXPECT_EQ(weights[1], e[3] / sum);
  // Renormalised: divided by the canonical sum of the chosen, largest first.
  const float uneven[5] = {0.1f, 3.0f, -2.0f, 1.0f, 2.5f};
  numerics::RouteToken(uneven, 5, 2, /*normalize=*/true, scratch, experts, weights);
  EXPECT_EQ(std::vector<int32_t>(experts, experts + 2), (std::vector<int32_t>{1, 4}));
  float f[5];
  for (int i = 0; i < 5; ++i) f[i] = numerics::canonical_expf(uneven[i] - 3.0f);
  const float s = numerics::canonical_sum(f, 5);
  const float chosen[2] = {f[1] / s, f[4] / s};
  const float denom = numerics::canonical_sum(chosen, 2);
  EXPECT_EQ(weights[0], chosen[0] / denom);
  EXPECT_EQ(weights[1], chosen[1] / denom);
  EXPECT_NEAR(weights[0] + weights[1], 1.0f, 1e-6f);
  EXPECT_GT(weights[0], weights[1]);
  // k = every expert: all of them, in order.
  int32_t all[5];
  float all_w[5];
  numerics::RouteToken(uneven, 5, 5, true, scratch, all, all_w);
  EXPECT_EQ(std::vector<int32_t>(all, all + 5), (std::vector<int32_t>{0, 1, 2, 3, 4}));
}

TEST(RoutingTest, NaNLogitsStillChooseDistinctExperts) {
  const float nan = std::nanf("");
  const float logits[4] = {nan, 1.0f, nan, 0.0f};
  float scratch[8];
  int32_t experts[3];
  float weights[3];
  numerics::RouteToken(logits, 4, 3, false, scratch, experts, weights);
  std::vector<int32_t> got(experts, experts + 3);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(std::adjacent_find(got.begin(), got.end()), got.end());  // no expert twice
  for (int32_t x : got) EXPECT_TRUE(x >= 0 && x < 4);
}

TEST(RoutingTest, RoutesOfManyTokensAreEachTokensOwn) {
  std::mt19937 rng(7);
  std::normal_distribution<float> g;
  std::vector<float> logits(40 * 16);
  for (float& v : logits) v = g(rng);
  const numerics::Routes all = numerics::RouteTokens(logits.data(), 40, 16, 4, true);
  for (int t = 0; t < 40; ++t) {
    const numerics::Routes one = numerics::RouteTokens(logits.data() + t * 16, 1, 16, 4, true);
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(all.experts[t * 4 + j], one.experts[j]);
      EXPECT_EQ(all.weights[t * 4 + j], one.weights[j]);
      if (j > 0) {
        EXPECT_LT(one.experts[j - 1], one.experts[j]);
      }
    }
  }
}

}  // namespace
}  // namespace rote::inference

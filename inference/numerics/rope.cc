#include "inference/numerics/rope.h"

#include <cmath>  // floor, fma: exact in any IEEE implementation
#include <cstring>

namespace rote::numerics {
namespace {

double DoubleFromBits(uint64_t b) {
  double d;
  std::memcpy(&d, &b, 8);
  return d;
}

uint64_t BitsFromDouble(double d) {
  uint64_t b;
  std::memcpy(&b, &d, 8);
  return b;
}

// 2^k for k in [-1022, 1023], from exponent bits.
double Pow2(int64_t k) { return DoubleFromBits(static_cast<uint64_t>(k + 1023) << 52); }

constexpr double kLn2Hi = 6.93147180369123816490e-01;  // ln 2, trailing 32 bits zero
constexpr double kLn2Lo = 1.90821492927058770002e-10;  // ln 2 - kLn2Hi
constexpr double kPi = 3.141592653589793115997963468544185161590576171875;  // fp64(pi)

}  // namespace

double rote_exp(double x) {
  if (x != x) return x + x;
  if (x > 709.8) return DoubleFromBits(0x7ff0000000000000ull);
  if (x < -745.2) return 0.0;
  const double k = std::floor(x * 1.4426950408889634 + 0.5);
  double r = std::fma(-k, kLn2Hi, x);
  r = std::fma(-k, kLn2Lo, r);
  // Taylor polynomial of degree 17; |r| <= 0.35 so the remainder is below 1e-24.
  double p = 1.0;
  for (int n = 17; n >= 1; --n) p = std::fma(p, r / static_cast<double>(n), 1.0);
  const int64_t ki = static_cast<int64_t>(k);
  const int64_t k1 = ki / 2;
  const int64_t k2 = ki - k1;
  return (p * Pow2(k1)) * Pow2(k2);
}

double rote_log(double x) {
  if (!(x > 0)) return DoubleFromBits(0x7ff8000000000000ull);
  if (x == DoubleFromBits(0x7ff0000000000000ull)) return x;
  int64_t e = 0;
  if (x < 2.2250738585072014e-308) {  // subnormal: scale into the normal range
    x = x * 18014398509481984.0;     // 2^54
    e = -54;
  }
  const uint64_t bits = BitsFromDouble(x);
  e += static_cast<int64_t>((bits >> 52) & 0x7ff) - 1023;
  double m = DoubleFromBits((bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull);  // [1, 2)
  if (m > 1.4142135623730951) {
    m = m * 0.5;
    e += 1;
  }
  // log(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.1716: odd series to s^29.
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  double p = 1.0 / 29.0;
  for (int n = 27; n >= 1; n -= 2) p = std::fma(p, s2, 1.0 / static_cast<double>(n));
  const double log_m = 2.0 * s * p;
  const double ed = static_cast<double>(e);
  return std::fma(ed, kLn2Hi, std::fma(ed, kLn2Lo, log_m));
}

void rote_sincos(double x, double* s, double* c) {
  // x = k * pi/2 + r, pi/2 split in three parts (fdlibm's pio2_1, pio2_2, pio2_2t).
  const double k = std::floor(x * 0.63661977236758134308 + 0.5);
  double r = std::fma(-k, 1.57079632673412561417e+00, x);
  r = std::fma(-k, 6.07710050630396597660e-11, r);
  r = std::fma(-k, 2.02226624879595063154e-21, r);
  const double r2 = r * r;
  // |r| <= pi/4: Taylor to r^23 (sin) and r^22 (cos), remainders below 1e-22.
  double ps = 1.0;
  for (int n = 23; n >= 3; n -= 2) ps = std::fma(ps, -r2 / static_cast<double>(n * (n - 1)), 1.0);
  const double sin_r = r * ps;
  double pc = 1.0;
  for (int n = 22; n >= 2; n -= 2) pc = std::fma(pc, -r2 / static_cast<double>(n * (n - 1)), 1.0);
  const double cos_r = pc;
  int64_t q = static_cast<int64_t>(k) % 4;
  if (q < 0) q += 4;
  switch (q) {
    case 0: *s = sin_r; *c = cos_r; break;
    case 1: *s = cos_r; *c = -sin_r; break;
    case 2: *s = -sin_r; *c = -cos_r; break;
    default: *s = -cos_r; *c = sin_r; break;
  }
}

std::vector<float> RopeInvFreq(const rote::inference::ModelConfig& config, bool local, bool long_regime) {
  using rote::inference::RopeScaling;
  const int32_t dim = config.rope_dim();
  const int32_t half = dim / 2;
  const double log_theta = rote_log(local ? config.rope_local_theta : config.rope_theta);
  std::vector<float> out(half);
  const RopeScaling& rs = config.rope_scaling;
  const RopeScaling::Type type = local ? RopeScaling::Type::kDefault : rs.type;
  for (int32_t i = 0; i < half; ++i) {
    const double exponent = static_cast<double>(2 * i) / static_cast<double>(dim);
    double inv = rote_exp(-(exponent * log_theta));
    if (type == RopeScaling::Type::kLlama3) {
      const double orig = static_cast<double>(rs.original_max_position_embeddings);
      const double low_wl = orig / rs.low_freq_factor;
      const double high_wl = orig / rs.high_freq_factor;
      const double wavelen = (2.0 * kPi) / inv;
      if (wavelen > low_wl) {
        inv = inv / rs.factor;
      } else if (!(wavelen < high_wl)) {
        const double smooth = (orig / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
        inv = (1.0 - smooth) * inv / rs.factor + smooth * inv;
      }
    } else if (type == RopeScaling::Type::kLinear) {
      inv = inv / rs.factor;
    } else if (type == RopeScaling::Type::kLongRope) {
      // HF holds the factors as an fp32 tensor: round them first.
      const double ext = static_cast<float>(long_regime ? rs.long_factor[static_cast<size_t>(i)]
                                                        : rs.short_factor[static_cast<size_t>(i)]);
      inv = 1.0 / (ext * rote_exp(exponent * log_theta));
    }
    out[i] = static_cast<float>(inv);
  }
  return out;
}

RopeTable BuildRopeTable(const rote::inference::ModelConfig& config, int32_t num_positions, bool local) {
  using rote::inference::RopeScaling;
  RopeTable t;
  t.half_dim = config.rope_dim() / 2;
  t.num_positions = num_positions;
  const bool longrope = !local && config.rope_scaling.type == RopeScaling::Type::kLongRope;
  const std::vector<float> inv_short = RopeInvFreq(config, local, false);
  const std::vector<float> inv_long = longrope ? RopeInvFreq(config, local, true) : inv_short;
  const int64_t switch_at = longrope ? config.rope_scaling.original_max_position_embeddings : INT64_MAX;
  const float mscale = longrope ? static_cast<float>(config.rope_scaling.attention_factor) : 1.0f;
  t.cos.resize(static_cast<size_t>(num_positions) * t.half_dim);
  t.sin.resize(t.cos.size());
  for (int32_t p = 0; p < num_positions; ++p) {
    const std::vector<float>& inv = p < switch_at ? inv_short : inv_long;
    for (int32_t i = 0; i < t.half_dim; ++i) {
      const float angle = static_cast<float>(p) * inv[i];
      double s, c;
      rote_sincos(static_cast<double>(angle), &s, &c);
      float cf = static_cast<float>(c), sf = static_cast<float>(s);
      if (longrope) {
        cf = cf * mscale;
        sf = sf * mscale;
      }
      t.cos[static_cast<size_t>(p) * t.half_dim + i] = cf;
      t.sin[static_cast<size_t>(p) * t.half_dim + i] = sf;
    }
  }
  return t;
}

}  // namespace rote::numerics

#include "inference/sampler.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "inference/numerics/canonical.h"

namespace rote::inference {
namespace {

uint64_t SplitMix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

void ApplyTokenMask(std::span<float> logits, std::span<const uint64_t> mask) {
  if (!AnyTokenAllowed(mask, logits.size())) return;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (size_t w = 0; w < mask.size() && w * 64 < logits.size(); ++w) {
    const uint64_t bits = mask[w];
    if (bits == ~uint64_t{0}) continue;
    const size_t end = std::min(logits.size(), w * 64 + 64);
    for (size_t t = w * 64; t < end; ++t)
      if (((bits >> (t % 64)) & 1) == 0) logits[t] = neg_inf;
  }
}

bool AnyTokenAllowed(std::span<const uint64_t> mask, size_t vocab) {
  for (size_t w = 0; w < mask.size() && w * 64 < vocab; ++w) {
    uint64_t bits = mask[w];
    if (vocab - w * 64 < 64) bits &= (uint64_t{1} << (vocab - w * 64)) - 1;
    if (bits != 0) return true;
  }
  return false;
}

int32_t ArgmaxLowestIndex(std::span<const float> logits) {
  int32_t best = 0;
  float best_v = 0.0f;
  bool have = false;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float v = logits[i];
    if (v != v) continue;
    if (!have || v > best_v) {
      best = static_cast<int32_t>(i);
      best_v = v;
      have = true;
    }
  }
  return best;
}

float SamplingUniform(uint64_t seed, uint64_t request_key, uint64_t position) {
  const uint64_t h = SplitMix64(SplitMix64(SplitMix64(seed) ^ request_key) ^ position);
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
}

namespace {

// Sort key of a scaled logit for the order (value descending, index ascending), NaN last:
// ascending keys of a stable sort. -0 and +0 compare equal in that order, so they share a key;
// every NaN takes the largest key (no number maps to it: only the bits 0xFFFFFFFF, a NaN, would).
uint32_t DescendingKey(float v) {
  if (v != v) return 0xFFFFFFFFu;
  if (v == 0.0f) v = 0.0f;
  uint32_t b;
  std::memcpy(&b, &v, 4);
  const uint32_t ascending = (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
  return ~ascending;
}

// The first `kept` of indices [0, n) in the order of their keys, ties in index order (`order`
// gets n entries; past `kept` their order is unspecified). Each (key, index) pair is one 64-bit
// value, so the order is that of the values: a few kept take a selection and a sort of those;
// otherwise a least-significant-digit radix sort, four passes of 8 bits. Where the comparison
// sort before it took most of 30 ms a row at a 152k vocabulary, these take well under one.
void SortByKey(const std::vector<uint32_t>& keys, size_t kept, std::vector<int32_t>* order) {
  const size_t n = keys.size();
  std::vector<uint64_t> a(n);
  for (size_t i = 0; i < n; ++i) a[i] = uint64_t{keys[i]} << 32 | static_cast<uint32_t>(i);
  if (kept <= n / 16) {
    std::nth_element(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(kept - 1), a.end());
    std::sort(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(kept));
  } else {
    std::vector<uint64_t> b(n);
    for (int shift = 32; shift < 64; shift += 8) {
      size_t count[257] = {};
      for (size_t i = 0; i < n; ++i) ++count[((a[i] >> shift) & 0xFF) + 1];
      // Every key with the same digit here: the pass would keep the order.
      if (std::any_of(count + 1, count + 257, [&](size_t c) { return c == n; })) continue;
      for (int d = 0; d < 256; ++d) count[d + 1] += count[d];
      for (size_t i = 0; i < n; ++i) b[count[(a[i] >> shift) & 0xFF]++] = a[i];
      a.swap(b);
    }
  }
  order->resize(n);
  for (size_t i = 0; i < n; ++i) (*order)[i] = static_cast<int32_t>(a[i] & 0xFFFFFFFFu);
}

// lane_sum[r] = lane r mod 32's running sum after e[r] = canonical_expf(z[order[r]] - m).
// canonical_expf is fmaf-based; compiled for FMA where the CPU has it, each fmaf is one
// instruction instead of a library call. fmaf rounds once either way: the same bits.
__attribute__((always_inline)) inline void LaneSumsBody(const float* z, const int32_t* order, size_t kept, float m, float* lane_sum) {
  constexpr size_t kLanes = numerics::kCanonicalLanes;
  for (size_t r = 0; r < kept; ++r) {
    const float e = numerics::canonical_expf(z[order[r]] - m);
    lane_sum[r] = (r >= kLanes ? lane_sum[r - kLanes] : 0.0f) + e;
  }
}
#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void LaneSumsFma(const float* z, const int32_t* order, size_t kept, float m,
                                                     float* lane_sum) {
  LaneSumsBody(z, order, kept, m, lane_sum);
}
#endif
void LaneSums(const float* z, const int32_t* order, size_t kept, float m, float* lane_sum) {
#if defined(__x86_64__)
  static const bool fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (fma) return LaneSumsFma(z, order, kept, m, lane_sum);
#endif
  LaneSumsBody(z, order, kept, m, lane_sum);
}

// First r in [0, n) with pred(r), for pred false then true over r; n when none.
template <typename Pred>
size_t FirstTrue(size_t n, Pred pred) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (pred(mid)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

}  // namespace

RowSampling RowSamplingFor(const SamplingParams& params, uint64_t request_key, uint64_t position) {
  RowSampling r;
  r.temperature = params.temperature;
  r.top_k = params.top_k;
  r.top_p = params.top_p;
  r.uniform = params.temperature > 0.0f ? SamplingUniform(params.seed, request_key, position) : 0.0f;
  return r;
}

int32_t SampleToken(std::span<const float> logits, const SamplingParams& params, uint64_t request_key,
                    uint64_t position) {
  return SampleTokenWithUniform(logits, RowSamplingFor(params, request_key, position));
}

int32_t SampleTokenWithUniform(std::span<const float> logits, const RowSampling& params) {
  if (!(params.temperature > 0.0f) || logits.empty()) return ArgmaxLowestIndex(logits);
  const size_t n = logits.size();
  std::vector<float> z(n);
  std::vector<uint32_t> keys(n);
  for (size_t i = 0; i < n; ++i) {
    z[i] = logits[i] / params.temperature;
    keys[i] = DescendingKey(z[i]);
  }
  // (value desc, index asc); NaN sorts last so it is never kept ahead of a number.
  const size_t kept = params.top_k > 0 && static_cast<size_t>(params.top_k) < n ? static_cast<size_t>(params.top_k) : n;
  std::vector<int32_t> order;
  SortByKey(keys, kept, &order);
  const float m = z[order[0]];
  // prefix(r) = the canonical sum of e[0..r], e[r] = canonical_expf(z[order[r]] - m): term r
  // goes to lane r mod 32, whose running sum after it is lane_sum[r]; prefix(r) is the tree over
  // every lane's running sum after r + 1 terms (0 for lanes not reached yet). It is monotone in r
  // (each term adds a non-negative number to one lane), so the searches below bisect it; where
  // a NaN enters the sums, the value compared against is NaN too and no comparison holds, as in
  // a scan. The same additions in the same order as summing term by term: the same bits.
  constexpr size_t kLanes = numerics::kCanonicalLanes;
  std::vector<float> lane_sum(kept);
  LaneSums(z.data(), order.data(), kept, m, lane_sum.data());
  auto prefix = [&](size_t r) {
    float acc[kLanes];
    for (size_t l = 0; l < kLanes; ++l) acc[l] = l <= r ? lane_sum[r - (r - l) % kLanes] : 0.0f;
    return numerics::canonical_tree32(acc);
  };
  size_t cut = kept;
  if (params.top_p > 0.0f && params.top_p < 1.0f) {
    const float target = params.top_p * prefix(kept - 1);
    const size_t r = FirstTrue(kept, [&](size_t i) { return prefix(i) >= target; });
    if (r < kept) cut = r + 1;
  }
  const float t = params.uniform * prefix(cut - 1);
  const size_t r = FirstTrue(cut, [&](size_t i) { return prefix(i) > t; });
  return order[r < cut ? r : cut - 1];
}

}  // namespace rote::inference

// Rotary tables, built once on the host with rote's own double-precision exp, log, sin and cos
// (IEEE ops only), so every host and device gets the same fp32 table bits (docs/numerics.md).
#pragma once

#include <cstdint>
#include <vector>

#include "inference/model/config.h"

namespace rote::numerics {

// IEEE-only double functions (no libm), exposed for tests.
double rote_exp(double x);
double rote_log(double x);  // x > 0
void rote_sincos(double x, double* s, double* c);

// inv_freq[i] for i in [0, rope_dim()/2), rounded to fp32, with the family's scaling rules.
// `local`: Gemma 3's local layers (rope_local_theta, no scaling). `long_regime`: longrope's long
// factors (positions from original_max_position_embeddings on); ignored for other types.
std::vector<float> RopeInvFreq(const rote::inference::ModelConfig& config, bool local = false,
                               bool long_regime = false);

struct RopeTable {
  int32_t half_dim = 0;       // rope_dim() / 2: pairs (i, i + half_dim) rotate, dims from 2 * half_dim pass
  int32_t num_positions = 0;
  std::vector<float> cos;     // (num_positions, half_dim)
  std::vector<float> sin;     // (num_positions, half_dim)
};

// angle = fp32(float(pos) * inv_freq[i]) (the fp32 product HF computes), then cos/sin of that
// angle in double with rote_sincos, rounded to fp32. Longrope: inv_freq of the position's regime,
// and cos/sin each multiplied in fp32 by fp32(attention_factor). `local`: the table of layers whose
// LayerPlan::local_rope is set (requires config.has_local_rope()).
RopeTable BuildRopeTable(const rote::inference::ModelConfig& config, int32_t num_positions, bool local = false);

}  // namespace rote::numerics

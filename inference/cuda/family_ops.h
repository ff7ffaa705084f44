// The kernels of the families beyond Qwen2/Qwen3/Llama 3 (Mistral, Gemma 2/3, Phi-3, StarCoder2,
// Granite, DeepSeek-Coder) in the exact profile: the operations their layers add to the forward
// pass of docs/numerics.md (LayerNorm with bias, scalar multipliers, norms of a product's output,
// GELU-tanh, partial rotary with a table per layer, sliding-window and soft-capped attention,
// soft-capped or scaled logits). Each is a plain kernel that computes its outputs in the CPU
// backend's order, term for term, from the scalar functions of inference/numerics/canonical.h:
// simple rather than fast, the matrix products around them being the backend's own kernels.
// Plain C++ signatures (no CUDA types but the stream), like kernels.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "inference/cuda/kernels.h"

namespace rote::inference::cuda {

// Normalisation of lane rows (kernels.h) of `cols`, one warp per row; row m of y normalises x row
// x_rows[m] (x_rows null: identity). kRms: (x * r) * w (r from the canonical sum of squares); kLayer:
// the mean, the centred canonical sum of squares, ((x - mean) * r) * w + b. The padding stays zero.
enum class FamilyNorm : int { kRms = 0, kLayer = 1 };
cudaError_t LaunchFamilyNorm(FamilyNorm kind, const float* x, int32_t stride, int32_t tokens, int32_t cols,
                             const float* weight, const float* bias, float eps, float* y, cudaStream_t stream,
                             const int32_t* x_rows = nullptr);

// x = x * m over `tokens` rows of `stride` floats (the embedding multiplier or Gemma's sqrt(dim)).
cudaError_t LaunchScaleRows(float* x, int32_t stride, int32_t tokens, float m, cudaStream_t stream);

// The residual add of a layer's o or down product y (lane rows, like x): x = x + t with
// t = y, then t = norm(t) where norm_weight is set (Gemma's post-attention and post-feedforward
// RMSNorm), then t = t * multiplier where has_multiplier (Granite's residual multiplier).
cudaError_t LaunchResidualAdd(float* x, const float* y, int32_t stride, int32_t tokens, int32_t cols,
                              const float* norm_weight, float norm_eps, bool has_multiplier, float multiplier,
                              cudaStream_t stream);

// The MLP's activation from the up product's plain rows `in` (tokens, in_stride) into lane rows
// `out` (tokens, out_stride) of n columns:
//   kSiluMul / kGeluMul: rows interleaved gate/up, out[n] = act(in[2n]) * in[2n + 1];
//   kGelu: out[n] = gelu_tanh(in[n]) (StarCoder2's c_fc, bias added by the product).
enum class FamilyActivation : int { kSiluMul = 0, kGeluMul = 1, kGelu = 2 };
cudaError_t LaunchFamilyActivation(FamilyActivation kind, const float* in, int32_t in_stride, int32_t tokens, int32_t n,
                                   float* out, int32_t out_stride, cudaStream_t stream);

// From the q|k|v product's plain rows (tokens, q_dim + 2 kv_dim) in natural row order: optional
// per-head RMSNorm of q and k, rotary on the first rotary_dim dims of each head (pairs (i, i +
// rotary_dim / 2); cos/sin: (positions, rotary_dim / 2), the layer's table), q to q_out (tokens,
// q_dim), k and v into the cache.
cudaError_t LaunchFamilyRopeStore(const float* qkv, const StepTokens& step, const AttentionShape& shape,
                                  const float* q_norm, const float* k_norm, float norm_eps, int32_t rotary_dim,
                                  const float* rope_cos, const float* rope_sin, float* q_out, LayerKv kv,
                                  cudaStream_t stream);

// Two-pass attention of every query head of every token over the positions lo .. pos, lo =
// max(0, pos + 1 - window) (window <= 0: lo = 0): s = dot * scale, soft-capped where softcap > 0
// (numerics::canonical_softcap), max, canonical_expf, the canonical sum and the canonical weighted
// sum of V over the window's index i = j - lo, one divide. out: (tokens, out_stride) lane rows of
// q_dim. max_context bounds pos + 1.
struct FamilyAttention {
  float scale = 0.0f;
  float softcap = 0.0f;  // 0: none
  int32_t window = 0;    // 0: every earlier position
};
cudaError_t LaunchFamilyAttention(const float* q, const StepTokens& step, const AttentionShape& shape, LayerKv kv,
                                  const FamilyAttention& attn, int32_t max_context, float* out, int32_t out_stride,
                                  cudaStream_t stream);
// Shared memory LaunchFamilyAttention needs for max_context positions; PrepareFamilyAttention
// raises the kernel's limit to it (once per device and size).
int64_t FamilyAttentionSharedBytes(int32_t max_context);
cudaError_t PrepareFamilyAttention(int32_t max_context);

// Mixture of experts (Qwen3-MoE). The route of each of `tokens` rows of router logits (rows
// num_experts apart) on the device, bit for bit numerics::RouteToken's: experts (tokens x k, each
// row in increasing index) and their weights. num_experts <= 1024, k <= 32.
cudaError_t LaunchRoute(const float* logits, int32_t tokens, int32_t num_experts, int32_t k, bool normalize,
                        int32_t* experts, float* weights, cudaStream_t stream);
// out row p (out_stride floats apart; lane order where out_lane_rows) = the canonical dots of the
// `rows` rows of expert experts[p] with input lane row p / pairs_per_input of x: the experts' rows
// stacked in one matrix (expert e's row r at e * rows + r, cols_padded elements each, lane order),
// each (token, expert) pair its own products, as the exact profile's kernels compute them.
struct ExpertRowsArgs {
  const void* weights = nullptr;
  WeightType type = WeightType::kBF16;
  int32_t rows = 0;
  int32_t cols_padded = 0;
  const int32_t* experts = nullptr;  // (pairs) expert ids
  int32_t pairs = 0;                 // at most 65535
  int32_t pairs_per_input = 1;       // k where x holds one row a token, 1 where one a pair
  const float* x = nullptr;
  int32_t x_stride = 0;
  float* out = nullptr;
  int32_t out_stride = 0;
  bool out_lane_rows = false;
};
cudaError_t LaunchExpertRows(const ExpertRowsArgs& a, cudaStream_t stream);

// The pairs (token t's k experts at t k .. t k + k - 1, as LaunchRoute writes them) grouped by
// expert, a stable counting sort: expert e's rows are [first[e], first[e + 1]), its pairs in pair
// order; row_token[row] is the row's token, pair_row[pair] the pair's row; tiles[e] the tiles of
// `tile` rows the experts below e take (first and tiles: num_experts + 1 entries). The lists
// LaunchGroupedLinear takes, computed on the device: no step waits on the host for its route.
cudaError_t LaunchExpertGroups(const int32_t* experts, int32_t tokens, int32_t k, int32_t num_experts, int32_t tile,
                               int32_t* row_token, int32_t* pair_row, int32_t* first, int32_t* tiles,
                               cudaStream_t stream);
// out row t = sum over j < k, in j order, of y row rows[t k + j] (rows null: t k + j) times
// weights[t k + j], from 0: each term rounded, then each add (the CPU backend's order; the route
// lists a token's experts in increasing index). `cols` floats a row, rows `stride` floats apart in y and out.
cudaError_t LaunchExpertsSum(const float* y, int32_t stride, const int32_t* rows, const float* weights, int32_t tokens,
                             int32_t k, int32_t cols, float* out, cudaStream_t stream);

// The logits' last step: l = canonical_softcap(l, softcap) where softcap > 0, then l = l / divisor
// where divisor != 1 (Granite's logits_scaling). rows x cols plain.
cudaError_t LaunchLogitsPost(float* logits, int32_t rows, int32_t cols, float softcap, float divisor,
                             cudaStream_t stream);

}  // namespace rote::inference::cuda

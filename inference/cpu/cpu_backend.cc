// The CPU backend: the oracle of the exact profile (docs/numerics.md). fp32 activations and KV
// cache; weights converted from their stored type row by row as they are used. Threads split
// output rows and (token, head) pairs; no reduction is ever split.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "inference/backend.h"
#include "inference/cpu/kernels.h"
#include "inference/util/thread_pool.h"
#include "inference/numerics/canonical.h"
#include "inference/numerics/rope.h"
#include "inference/numerics/routing.h"

namespace rote::inference {

int64_t KvBytesPerBlock(const ModelConfig& config) {
  return int64_t{2} * config.num_layers * kKvBlockSize * config.kv_dim() * 4;
}

namespace {

using numerics::canonical_rms_scale;

class CpuBackend final : public Backend {
 public:
  CpuBackend(std::shared_ptr<const Model> model, const CpuBackendOptions& options)
      : model_(std::move(model)),
        cfg_(model_->config()),
        w_(model_->weights()),
        options_(options),
        avx2_(options.use_avx2 && cpu::CpuHasAvx2Fma()),
        pool_(std::max(1, options.threads)) {
    int32_t positions = options.max_positions;
    if (positions <= 0) positions = std::min<int32_t>(cfg_.max_position_embeddings, 32768);
    rope_ = numerics::BuildRopeTable(cfg_, positions);
    if (cfg_.has_local_rope()) rope_local_ = numerics::BuildRopeTable(cfg_, positions, /*local=*/true);
  }

  std::string device() const override { return "cpu"; }
  int64_t KvBytesPerBlock() const override { return rote::inference::KvBytesPerBlock(cfg_); }

  Status AllocateKvCache(int32_t num_blocks) override {
    if (num_blocks <= 0) return InvalidArgument("KV cache needs at least one block");
    kv_.assign(static_cast<size_t>(num_blocks) * BlockFloats(), 0.0f);
    num_blocks_ = num_blocks;
    return OkStatus();
  }

  Status Forward(const BatchPlan& plan, std::vector<float>* logits) override;

 private:
  // KV layout: [block][layer][k|v][slot][kv_dim] fp32.
  int64_t BlockFloats() const { return int64_t{2} * cfg_.num_layers * kKvBlockSize * cfg_.kv_dim(); }
  float* KvAt(int32_t block, int layer, int kv, int slot) {
    return kv_.data() + static_cast<size_t>(block) * BlockFloats() +
           ((static_cast<int64_t>(layer) * 2 + kv) * kKvBlockSize + slot) * cfg_.kv_dim();
  }

  float Dot(const float* a, const float* b, int64_t n) const {
    return avx2_ ? cpu::DotAvx2(a, b, n) : cpu::DotScalar(a, b, n);
  }

  // A mixture-of-experts MLP (Qwen3-MoE) of T tokens' normed rows h into out (T x dim): router
  // logits W_r h, each token's experts and weights (numerics::RouteToken), each expert's gated MLP
  // on the tokens that chose it (every product a canonical reduction, so grouping the tokens
  // changes no bit), then out = sum over a token's experts, in increasing index, of weight *
  // expert output, from 0 (transformers' zeros and index_add_ in expert order).
  void Experts(const LayerWeights& L, const float* h, int64_t T, float* out, bool sequential) {
    const int64_t dim = cfg_.hidden_size, moe = cfg_.moe_intermediate_size;
    const int32_t E = cfg_.num_experts, K = cfg_.experts_per_token;
    std::vector<float> logits(static_cast<size_t>(T * E));
    MatMul(L.router, nullptr, h, T, logits.data(), sequential);
    const numerics::Routes routes = numerics::RouteTokens(logits.data(), T, E, K, cfg_.norm_topk_prob);
    // Per expert, the (token, slot) pairs that chose it, tokens in order.
    std::vector<std::vector<int64_t>> chosen_by(static_cast<size_t>(E));
    for (int64_t slot = 0; slot < T * K; ++slot) chosen_by[static_cast<size_t>(routes.experts[slot])].push_back(slot);
    std::vector<float> y(static_cast<size_t>(T * K * dim));  // slot t * K + j: expert j's output for token t
    std::vector<float> xe, gate, up;
    for (int32_t e = 0; e < E; ++e) {
      const std::vector<int64_t>& slots = chosen_by[static_cast<size_t>(e)];
      if (slots.empty()) continue;
      const int64_t n = static_cast<int64_t>(slots.size());
      xe.resize(static_cast<size_t>(n * dim));
      for (int64_t i = 0; i < n; ++i) std::memcpy(xe.data() + i * dim, h + slots[i] / K * dim, dim * sizeof(float));
      gate.resize(static_cast<size_t>(n * moe));
      up.resize(static_cast<size_t>(n * moe));
      const LayerWeights::Expert& x = L.experts[static_cast<size_t>(e)];
      MatMul(x.w_gate, nullptr, xe.data(), n, gate.data(), sequential);
      MatMul(x.w_up, nullptr, xe.data(), n, up.data(), sequential);
      for (int64_t i = 0; i < n * moe; ++i) gate[i] = Activate(gate[i]) * up[i];
      std::vector<float> down(static_cast<size_t>(n * dim));
      MatMul(x.w_down, nullptr, gate.data(), n, down.data(), sequential);
      for (int64_t i = 0; i < n; ++i) std::memcpy(y.data() + slots[i] * dim, down.data() + i * dim, dim * sizeof(float));
    }
    for (int64_t t = 0; t < T; ++t) {
      float* o = out + t * dim;
      for (int64_t d = 0; d < dim; ++d) o[d] = 0.0f;
      for (int32_t j = 0; j < K; ++j) {
        const float w = routes.weights[static_cast<size_t>(t * K + j)];
        const float* yj = y.data() + (t * K + j) * dim;
        for (int64_t d = 0; d < dim; ++d) o[d] = o[d] + yj[d] * w;
      }
    }
  }

  // y[t, o] = W[o, :] . x[t, :] (+ bias[o]) for t < n_tokens: rows split across threads; each
  // dot product is one canonical reduction whichever kernel computes it.
  void MatMul(const TensorView& wt, const TensorView* bias, const float* x, int64_t n_tokens, float* y,
              bool sequential) {
    const int64_t rows = wt.shape[0], cols = wt.shape[1];
    const int64_t elem = DTypeSize(wt.dtype);
    const auto* base = static_cast<const uint8_t*>(wt.data);
    const bool has_bias = bias != nullptr && bias->present();
    if (avx2_ && !sequential && n_tokens == 1) {
      // Decode at batch 1: stream each stored row once, converting as it loads.
      pool_.ParallelFor(rows, [&](int64_t begin, int64_t end) {
        for (int64_t o = begin; o < end; ++o) {
          float v = cpu::DotStoredAvx2(wt.dtype, base + o * cols * elem, x, cols);
          if (has_bias) v = v + bias->At(o);
          y[o] = v;
        }
      });
      return;
    }
    if (avx2_ && !sequential) {
      // Batches: a tile of rows converted to fp32 once, then every token against it, three
      // tokens per pass over a row.
      constexpr int64_t kRowTile = 8;
      pool_.ParallelFor((rows + kRowTile - 1) / kRowTile, [&](int64_t begin, int64_t end) {
        std::vector<float> tile(static_cast<size_t>(kRowTile * cols));
        for (int64_t rt = begin; rt < end; ++rt) {
          const int64_t r0 = rt * kRowTile, r1 = std::min(rows, r0 + kRowTile);
          for (int64_t o = r0; o < r1; ++o) {
            cpu::ConvertToF32(wt.dtype, base + o * cols * elem, cols, tile.data() + (o - r0) * cols, true);
          }
          for (int64_t t = 0; t < n_tokens; t += 3) {
            const int count = static_cast<int>(std::min<int64_t>(3, n_tokens - t));
            const float* xs[3] = {x + t * cols, x + std::min(t + 1, n_tokens - 1) * cols,
                                  x + std::min(t + 2, n_tokens - 1) * cols};
            for (int64_t o = r0; o < r1; ++o) {
              float out[3];
              cpu::DotMultiAvx2(tile.data() + (o - r0) * cols, xs, count, cols, out);
              const float b = has_bias ? bias->At(o) : 0.0f;
              for (int k = 0; k < count; ++k) y[(t + k) * rows + o] = has_bias ? out[k] + b : out[k];
            }
          }
        }
      });
      return;
    }
    pool_.ParallelFor(rows, [&](int64_t begin, int64_t end) {
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t o = begin; o < end; ++o) {
        cpu::ConvertToF32(wt.dtype, base + o * cols * elem, cols, row.data(), avx2_);
        const float b = has_bias ? bias->At(o) : 0.0f;
        for (int64_t t = 0; t < n_tokens; ++t) {
          float v = sequential ? cpu::DotSequential(row.data(), x + t * cols, cols) : Dot(row.data(), x + t * cols, cols);
          if (has_bias) v = v + b;
          y[t * rows + o] = v;
        }
      }
    });
  }

  // The model's norm (numerics.md section 3) of x[0, n) into y (y may be x). `bias` only for
  // LayerNorm.
  void Norm(const float* x, const TensorView& weight, const TensorView* bias, int64_t n, float* y) const {
    switch (cfg_.norm) {
      case NormKind::kRms: {
        const float r = canonical_rms_scale(Dot(x, x, n), n, cfg_.rms_norm_eps);
        for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * r) * weight.At(i);
        return;
      }
      case NormKind::kRmsOffset: {
        const float r = canonical_rms_scale(Dot(x, x, n), n, cfg_.rms_norm_eps);
        for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * r) * (1.0f + weight.At(i));
        return;
      }
      case NormKind::kLayerNorm: {
        const float mean = numerics::canonical_mean(numerics::canonical_sum(x, n), n);
        for (int64_t i = 0; i < n; ++i) y[i] = x[i] - mean;
        const float r = canonical_rms_scale(Dot(y, y, n), n, cfg_.rms_norm_eps);
        for (int64_t i = 0; i < n; ++i) y[i] = ((y[i] * r) * weight.At(i)) + bias->At(i);
        return;
      }
    }
  }

  float Activate(float v) const {
    return cfg_.activation == Activation::kGeluTanh ? numerics::canonical_gelu_tanh(v) : numerics::canonical_silu(v);
  }

  // Rotates the first 2 * half_dim dimensions of a head (pairs (i, i + half_dim)); the rest pass.
  static void Rotate(const numerics::RopeTable& rope, float* head, int32_t pos) {
    const int32_t half = rope.half_dim;
    const float* c = rope.cos.data() + static_cast<size_t>(pos) * half;
    const float* s = rope.sin.data() + static_cast<size_t>(pos) * half;
    for (int32_t i = 0; i < half; ++i) numerics::canonical_rotate(head[i], head[i + half], c[i], s[i]);
  }

  std::shared_ptr<const Model> model_;
  const ModelConfig& cfg_;
  const ModelWeights& w_;
  CpuBackendOptions options_;
  bool avx2_;
  ThreadPool pool_;
  numerics::RopeTable rope_;
  numerics::RopeTable rope_local_;  // Gemma 3's local layers (LayerPlan::local_rope)
  std::vector<float> kv_;
  int32_t num_blocks_ = 0;
};

Status CpuBackend::Forward(const BatchPlan& plan, std::vector<float>* logits) {
  if (num_blocks_ == 0) return FailedPrecondition("Forward before AllocateKvCache");
  // Flatten the batch: one entry per new token.
  struct TokenRef {
    int32_t token;
    int32_t pos;
    const SequenceStep* seq;
  };
  std::vector<TokenRef> toks;
  std::vector<int64_t> logit_rows;  // indices into toks, in output order
  for (const SequenceStep& s : plan.sequences) {
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    if (n == 0) return InvalidArgument("a sequence step has no tokens");
    if (s.start_pos < 0 || s.start_pos + n > rope_.num_positions) {
      return Status(StatusCode::kOutOfRange, "positions up to " + std::to_string(s.start_pos + n) +
                                                 " exceed the rotary table (" + std::to_string(rope_.num_positions) +
                                                 " positions)");
    }
    const int64_t blocks_needed = (s.start_pos + n + kKvBlockSize - 1) / kKvBlockSize;
    if (static_cast<int64_t>(s.block_table.size()) < blocks_needed) {
      return InvalidArgument("block table covers " + std::to_string(s.block_table.size()) + " blocks, need " +
                             std::to_string(blocks_needed));
    }
    // Blocks before the first key any layer reads may have been released (kNoKvBlock).
    const int64_t first_read_block = cfg_.first_read_key(s.start_pos) / kKvBlockSize;
    for (int64_t i = 0; i < static_cast<int64_t>(s.block_table.size()); ++i) {
      const int32_t b = s.block_table[i];
      if (b == kNoKvBlock && i < first_read_block) continue;
      if (b < 0 || b >= num_blocks_) return InvalidArgument("block id " + std::to_string(b) + " out of range");
    }
    if (s.num_logits < 0 || s.num_logits > n) return InvalidArgument("num_logits out of range");
    for (int64_t i = 0; i < n; ++i) {
      const int32_t id = s.tokens[i];
      if (id < 0 || id >= cfg_.vocab_size) {
        return InvalidArgument("token id " + std::to_string(id) + " outside the vocabulary of " +
                               std::to_string(cfg_.vocab_size));
      }
      if (i >= n - s.num_logits) logit_rows.push_back(static_cast<int64_t>(toks.size()));
      toks.push_back({id, static_cast<int32_t>(s.start_pos + i), &s});
    }
  }
  const int64_t T = static_cast<int64_t>(toks.size());
  // The test-only non-canonical mode engages exactly when several tokens share the step.
  const bool sequential = options_.debug_noncanonical_when_batched && T > 1;
  const int64_t dim = cfg_.hidden_size, qd = cfg_.q_dim(), kvd = cfg_.kv_dim(), hd = cfg_.head_dim,
                hid = cfg_.intermediate_size;
  const int32_t group = cfg_.num_heads / cfg_.num_kv_heads;

  std::vector<float> x(T * dim), h(T * dim), q(T * qd), k(T * kvd), v(T * kvd), att(T * qd), o(T * dim),
      gate(T * hid), up(T * hid);
  for (int64_t t = 0; t < T; ++t) w_.embed.RowToF32(toks[t].token, x.data() + t * dim);
  if (cfg_.embedding_multiplier != 1.0f) {
    for (int64_t i = 0; i < T * dim; ++i) x[i] = x[i] * cfg_.embedding_multiplier;
  }
  const float scale = cfg_.scale();
  const float attn_cap = cfg_.attn_logit_softcap;
  const float residual_mult = cfg_.residual_multiplier;
  // x += branch (* residual_multiplier), the branch first through its post-norm when the model has one.
  auto add_branch = [&](float* branch, const TensorView& post_norm) {
    if (cfg_.sandwich_norms) {
      for (int64_t t = 0; t < T; ++t) Norm(branch + t * dim, post_norm, nullptr, dim, branch + t * dim);
    }
    if (residual_mult != 1.0f) {
      for (int64_t i = 0; i < T * dim; ++i) x[i] = x[i] + branch[i] * residual_mult;
    } else {
      for (int64_t i = 0; i < T * dim; ++i) x[i] = x[i] + branch[i];
    }
  };

  for (int layer = 0; layer < cfg_.num_layers; ++layer) {
    const LayerWeights& L = w_.layers[layer];
    const LayerPlan lp = cfg_.plan(layer);
    const numerics::RopeTable& rope = lp.local_rope ? rope_local_ : rope_;
    for (int64_t t = 0; t < T; ++t) Norm(x.data() + t * dim, L.attn_norm, &L.attn_norm_bias, dim, h.data() + t * dim);
    MatMul(L.wq, &L.bq, h.data(), T, q.data(), sequential);
    MatMul(L.wk, &L.bk, h.data(), T, k.data(), sequential);
    MatMul(L.wv, &L.bv, h.data(), T, v.data(), sequential);
    for (int64_t t = 0; t < T; ++t) {
      for (int32_t hh = 0; hh < cfg_.num_heads; ++hh) {
        float* head = q.data() + t * qd + hh * hd;
        if (cfg_.qk_norm) Norm(head, L.q_norm, nullptr, hd, head);
        Rotate(rope, head, toks[t].pos);
      }
      for (int32_t g = 0; g < cfg_.num_kv_heads; ++g) {
        float* head = k.data() + t * kvd + g * hd;
        if (cfg_.qk_norm) Norm(head, L.k_norm, nullptr, hd, head);
        Rotate(rope, head, toks[t].pos);
      }
      const int32_t pos = toks[t].pos;
      const int32_t block = toks[t].seq->block_table[pos / kKvBlockSize];
      std::memcpy(KvAt(block, layer, 0, pos % kKvBlockSize), k.data() + t * kvd, kvd * 4);
      std::memcpy(KvAt(block, layer, 1, pos % kKvBlockSize), v.data() + t * kvd, kvd * 4);
    }
    // Attention: every (token, head) pair is independent; two passes, no online rescaling. The
    // reductions run over the visible keys, term i being key first + i.
    pool_.ParallelFor(T * cfg_.num_heads, [&](int64_t begin, int64_t end) {
      std::vector<float> scores, scratch(static_cast<size_t>(numerics::kCanonicalLanes * hd));
      std::vector<const float*> vrows;
      for (int64_t item = begin; item < end; ++item) {
        const int64_t t = item / cfg_.num_heads;
        const int32_t hh = static_cast<int32_t>(item % cfg_.num_heads);
        const int32_t g = hh / group;
        const int32_t first = FirstVisibleKey(lp, toks[t].pos);
        const int32_t n = toks[t].pos + 1 - first;
        const auto& table = toks[t].seq->block_table;
        const float* qh = q.data() + t * qd + hh * hd;
        scores.resize(n);
        vrows.resize(n);
        float m = -INFINITY;
        for (int32_t i = 0; i < n; ++i) {
          const int32_t j = first + i;
          const int32_t block = table[j / kKvBlockSize];
          const float* kj = KvAt(block, layer, 0, j % kKvBlockSize) + g * hd;
          vrows[i] = KvAt(block, layer, 1, j % kKvBlockSize) + g * hd;
          scores[i] = Dot(qh, kj, hd) * scale;
          if (attn_cap > 0.0f) scores[i] = numerics::canonical_softcap(scores[i], attn_cap);
          m = std::max(m, scores[i]);
        }
        for (int32_t i = 0; i < n; ++i) scores[i] = numerics::canonical_expf(scores[i] - m);
        const float denom = numerics::canonical_sum(scores.data(), n);
        float* out = att.data() + t * qd + hh * hd;
        if (avx2_) {
          cpu::WeightedRowSumAvx2(scores.data(), vrows.data(), n, hd, scratch.data(), out);
        } else {
          cpu::WeightedRowSumScalar(scores.data(), vrows.data(), n, hd, scratch.data(), out);
        }
        for (int64_t d = 0; d < hd; ++d) out[d] = out[d] / denom;
      }
    });
    MatMul(L.wo, &L.bo, att.data(), T, o.data(), sequential);
    add_branch(o.data(), L.attn_post_norm);
    for (int64_t t = 0; t < T; ++t) Norm(x.data() + t * dim, L.mlp_norm, &L.mlp_norm_bias, dim, h.data() + t * dim);
    if (cfg_.is_moe_layer(layer)) {
      Experts(L, h.data(), T, o.data(), sequential);
      add_branch(o.data(), L.mlp_post_norm);
      continue;
    }
    if (cfg_.mlp == MlpKind::kPlain) {
      MatMul(L.w_up, &L.b_up, h.data(), T, gate.data(), sequential);
      for (int64_t i = 0; i < T * hid; ++i) gate[i] = Activate(gate[i]);
    } else {
      MatMul(L.w_gate, &L.b_gate, h.data(), T, gate.data(), sequential);
      MatMul(L.w_up, &L.b_up, h.data(), T, up.data(), sequential);
      for (int64_t i = 0; i < T * hid; ++i) gate[i] = Activate(gate[i]) * up[i];
    }
    MatMul(L.w_down, &L.b_down, gate.data(), T, o.data(), sequential);
    add_branch(o.data(), L.mlp_post_norm);
  }

  const int64_t R = static_cast<int64_t>(logit_rows.size());
  std::vector<float> final_h(R * dim);
  for (int64_t r = 0; r < R; ++r) {
    Norm(x.data() + logit_rows[r] * dim, w_.final_norm, &w_.final_norm_bias, dim, final_h.data() + r * dim);
  }
  logits->resize(static_cast<size_t>(R) * cfg_.vocab_size);
  if (R > 0) MatMul(w_.lm_head, nullptr, final_h.data(), R, logits->data(), sequential);
  if (cfg_.final_logit_softcap > 0.0f) {
    for (float& l : *logits) l = numerics::canonical_softcap(l, cfg_.final_logit_softcap);
  }
  if (cfg_.logits_divisor != 1.0f) {
    for (float& l : *logits) l = l / cfg_.logits_divisor;
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(std::shared_ptr<const Model> model,
                                                    const CpuBackendOptions& options) {
  if (model == nullptr) return InvalidArgument("CreateCpuBackend: no model");
  if (options.threads < 1 || options.threads > 256) return InvalidArgument("CPU backend threads must be in [1, 256]");
  return std::unique_ptr<Backend>(new CpuBackend(std::move(model), options));
}

}  // namespace rote::inference

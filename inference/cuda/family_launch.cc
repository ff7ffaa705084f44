// The family path of the CUDA backend (backend_impl.h, NeedsFamilyPath): the weights of models
// whose layers go beyond the Qwen2/Llama 3/Qwen3 forward pass, and their steps. Per layer:
//   norm(x) -> h; q|k|v = W h (+ b); per-head q/k norms, rotary on the first rotary_dim dims
//   (the layer's table), k and v into the cache; attention (the layer's window, the soft cap,
//   the family's scale); o = Wo att (+ bo); x = x + [norm](o) [* residual multiplier];
//   norm(x) -> h; gate|up (or up) = W h (+ b); act; o = Wdown act (+ b); x = x + [norm](o) [* m];
// then the final norm of the logits rows, the lm_head, and the logits' soft cap or divisor. The
// products are the profile's own kernels (exact: the canonical dot product of every output), the
// rest the plain kernels of family_ops.h, each in the CPU backend's order: the exact profile's
// logits are the CPU's, bit for bit (tests/inference/cuda_family_test.cc).
#include "inference/cuda/backend_impl.h"
#include "inference/cuda/family_ops.h"

namespace rote::inference::cuda_impl {

bool CudaBackendImpl::NeedsFamilyPath(const ModelConfig& c, int32_t max_positions) {
  // A window of at least max_positions keys never hides one (FirstVisibleKey is 0 below it).
  bool local = false;
  for (int32_t l = 0; l < c.num_layers; ++l) {
    const LayerPlan p = c.plan(l);
    local = local || (p.sliding_window > 0 && p.sliding_window < max_positions) || p.local_rope;
  }
  return local || c.norm != NormKind::kRms || c.activation != Activation::kSilu || c.mlp != MlpKind::kGated ||
         c.attention_out_bias || c.mlp_bias || c.sandwich_norms || c.embedding_multiplier != 1.0f ||
         c.residual_multiplier != 1.0f || c.attn_logit_softcap > 0.0f || c.final_logit_softcap > 0.0f ||
         c.logits_divisor != 1.0f || c.rope_dim() != c.head_dim ||
         c.scale() != 1.0f / std::sqrt(static_cast<float>(c.head_dim)) || c.has_moe();
}

Status CudaBackendImpl::InitFamilyLayers() {
  const ModelConfig& c = config_;
  const ModelWeights& w = model_->weights();
  const int64_t dim = c.hidden_size, q_dim = c.q_dim(), kv_dim = c.kv_dim(), hidden = c.intermediate_size;
  const bool gated = c.mlp == MlpKind::kGated;
  const float offset = c.norm == NormKind::kRmsOffset ? 1.0f : 0.0f;
  const bool layer_norm = c.norm == NormKind::kLayerNorm;
  if (c.rope_dim() > c.head_dim || c.rope_dim() % 2 != 0)
    return InvalidArgument("CUDA backend: rotary_dim " + std::to_string(c.rope_dim()) + " does not fit head_dim " +
                           std::to_string(c.head_dim));
  // Rotary tables: the global one, and the local one of Gemma 3's sliding layers.
  if (c.has_moe() && (c.experts_per_token > 32 || c.num_experts > 1024))
    return InvalidArgument("CUDA backend: " + std::to_string(c.experts_per_token) + " of " +
                           std::to_string(c.num_experts) + " experts a token (the CUDA route takes at most 32 of 1,024)");
  if (c.qk_norm && c.norm == NormKind::kLayerNorm)
    return InvalidArgument("CUDA backend: per-head LayerNorm of q and k is not supported");
  const numerics::RopeTable global = numerics::BuildRopeTable(c, max_positions_);
  ROTE_ASSIGN_OR_RETURN(const float* global_cos, UploadFloats(global.cos));
  ROTE_ASSIGN_OR_RETURN(const float* global_sin, UploadFloats(global.sin));
  const float* local_cos = global_cos;
  const float* local_sin = global_sin;
  if (c.has_local_rope()) {
    const numerics::RopeTable local = numerics::BuildRopeTable(c, max_positions_, /*local=*/true);
    ROTE_ASSIGN_OR_RETURN(local_cos, UploadFloats(local.cos));
    ROTE_ASSIGN_OR_RETURN(local_sin, UploadFloats(local.sin));
  }
  for (int32_t i = 0; i < c.num_layers; ++i) {
    const LayerWeights& lw = w.layers[i];
    DeviceLayer& dl = layers_[i];
    // q|k|v in their own row order (the family's rotary kernel reads heads as they are).
    ROTE_ASSIGN_OR_RETURN(dl.wqkv, UploadMatrix({{&lw.wq, 0, 1}, {&lw.wk, q_dim, 1}, {&lw.wv, q_dim + kv_dim, 1}},
                                                q_dim + 2 * kv_dim, dim));
    ROTE_ASSIGN_OR_RETURN(dl.wo, UploadMatrix({{&lw.wo, 0, 1}}, dim, q_dim));
    if (c.is_moe_layer(i)) {
      const int64_t moe = c.moe_intermediate_size;
      ROTE_ASSIGN_OR_RETURN(dl.router, UploadMatrix({{&lw.router, 0, 1}}, c.num_experts, dim));
      std::vector<MatrixPart> gu, down;
      for (size_t e = 0; e < lw.experts.size(); ++e) {
        const LayerWeights::Expert& x = lw.experts[e];
        const int64_t first = static_cast<int64_t>(e) * 2 * moe;
        gu.push_back({&x.w_gate, first, 2});
        gu.push_back({&x.w_up, first + 1, 2});
        down.push_back({&x.w_down, static_cast<int64_t>(e) * dim, 1});
      }
      const int64_t experts = c.num_experts;
      ROTE_ASSIGN_OR_RETURN(dl.experts_gu, UploadMatrix(gu, experts * 2 * moe, dim, nullptr, false, /*tiles=*/false));
      ROTE_ASSIGN_OR_RETURN(dl.experts_down, UploadMatrix(down, experts * dim, moe, nullptr, false, /*tiles=*/false));
    } else if (gated) {
      // gate row n -> 2n, up row n -> 2n + 1 (the activation kernel reads them in pairs).
      ROTE_ASSIGN_OR_RETURN(dl.wgu, UploadMatrix({{&lw.w_gate, 0, 2}, {&lw.w_up, 1, 2}}, 2 * hidden, dim));
    } else {
      ROTE_ASSIGN_OR_RETURN(dl.wgu, UploadMatrix({{&lw.w_up, 0, 1}}, hidden, dim));
    }
    if (!c.is_moe_layer(i)) {
      ROTE_ASSIGN_OR_RETURN(dl.wdown, UploadMatrix({{&lw.w_down, 0, 1}}, dim, hidden));
    }
    if (lw.bq.present()) {
      ROTE_ASSIGN_OR_RETURN(dl.bqkv, UploadVector({&lw.bq, &lw.bk, &lw.bv}));
    }
    if (lw.bo.present()) {
      ROTE_ASSIGN_OR_RETURN(dl.bo, UploadVector({&lw.bo}));
    }
    if (gated && lw.b_gate.present()) {
      std::vector<int64_t> order(static_cast<size_t>(2 * hidden));
      for (int64_t n = 0; n < 2 * hidden; ++n) order[n] = n < hidden ? 2 * n : 2 * (n - hidden) + 1;
      ROTE_ASSIGN_OR_RETURN(dl.bgu, UploadVector({&lw.b_gate, &lw.b_up}, &order));
    } else if (!gated && lw.b_up.present()) {
      ROTE_ASSIGN_OR_RETURN(dl.bgu, UploadVector({&lw.b_up}));
    }
    if (lw.b_down.present()) {
      ROTE_ASSIGN_OR_RETURN(dl.bdown, UploadVector({&lw.b_down}));
    }
    ROTE_ASSIGN_OR_RETURN(dl.attn_norm, UploadLaneRow(lw.attn_norm, offset));
    ROTE_ASSIGN_OR_RETURN(dl.mlp_norm, UploadLaneRow(lw.mlp_norm, offset));
    if (layer_norm) {
      ROTE_ASSIGN_OR_RETURN(dl.attn_norm_bias, UploadLaneRow(lw.attn_norm_bias));
      ROTE_ASSIGN_OR_RETURN(dl.mlp_norm_bias, UploadLaneRow(lw.mlp_norm_bias));
    }
    if (c.sandwich_norms) {
      ROTE_ASSIGN_OR_RETURN(dl.post_attn_norm, UploadLaneRow(lw.attn_post_norm, offset));
      ROTE_ASSIGN_OR_RETURN(dl.post_mlp_norm, UploadLaneRow(lw.mlp_post_norm, offset));
    }
    if (c.qk_norm) {
      // Per-head norms read plain vectors; Gemma 3's are (1 + w) like its other norms.
      std::vector<float> qn(static_cast<size_t>(c.head_dim)), kn(static_cast<size_t>(c.head_dim));
      for (int32_t d = 0; d < c.head_dim; ++d) {
        qn[d] = offset != 0.0f ? offset + lw.q_norm.At(d) : lw.q_norm.At(d);
        kn[d] = offset != 0.0f ? offset + lw.k_norm.At(d) : lw.k_norm.At(d);
      }
      ROTE_ASSIGN_OR_RETURN(dl.q_norm, UploadFloats(qn));
      ROTE_ASSIGN_OR_RETURN(dl.k_norm, UploadFloats(kn));
    }
    const LayerPlan plan = c.plan(i);
    dl.window = plan.sliding_window;
    dl.rope_cos = plan.local_rope ? local_cos : global_cos;
    dl.rope_sin = plan.local_rope ? local_sin : global_sin;
  }
  ROTE_ASSIGN_OR_RETURN(final_norm_, UploadLaneRow(w.final_norm, offset));
  if (layer_norm) {
    ROTE_ASSIGN_OR_RETURN(final_norm_bias_, UploadLaneRow(w.final_norm_bias));
  }
  int device = 0, optin = 0;
  ROTE_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  ROTE_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (cuda::FamilyAttentionSharedBytes(max_positions_) > optin - 4096)
    return InvalidArgument("CUDA backend: max_positions " + std::to_string(max_positions_) +
                           " exceeds what the family attention holds in shared memory");
  ROTE_CUDA_RETURN_IF_ERROR(cuda::PrepareFamilyAttention(max_positions_));
  return OkStatus();
}

Status CudaBackendImpl::FamilyNormInto(const float* x, int32_t rows, const float* weight, const float* bias, float* y,
                                       const int32_t* x_rows) {
  const cuda::FamilyNorm kind = config_.norm == NormKind::kLayerNorm ? cuda::FamilyNorm::kLayer : cuda::FamilyNorm::kRms;
  ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchFamilyNorm(kind, x, HiddenStride(), rows, config_.hidden_size, weight, bias,
                                                   config_.rms_norm_eps, y, stream_, x_rows));
  return OkStatus();
}

Status CudaBackendImpl::LaunchFamily(const StepLayout& lay, bool greedy) {
  const ModelConfig& c = config_;
  const int32_t* meta = meta_.as<int32_t>();
  const StepTokens step = StepOf(lay);
  const AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim, kKvBlockSize, c.attn_logit_softcap};
  float* x = x_.as<float>();
  float* h = h_.as<float>();
  float* o = o_.as<float>();
  const int32_t xs = HiddenStride();
  const int64_t layer_floats = static_cast<int64_t>(num_blocks_) * kKvBlockSize * c.kv_dim();
  ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchEmbed(embed_, meta + lay.tokens_off, lay.tokens, x, xs, stream_));
  if (c.embedding_multiplier != 1.0f)
    ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchScaleRows(x, xs, lay.tokens, c.embedding_multiplier, stream_));
  auto product = [&](const DeviceMatrix& w, const float* in, int32_t in_stride, const float* bias, float* out,
                     int32_t out_stride, bool lane_rows) {
    LinearArgs a;
    a.w = w;
    a.x = in;
    a.x_stride = in_stride;
    a.tokens = lay.tokens;
    a.epilogue = bias != nullptr ? LinearEpilogue::kAddBias : LinearEpilogue::kStore;
    a.bias = bias;
    a.out = out;
    a.out_stride = out_stride;
    a.out_lane_rows = lane_rows;
    WithSplitScratch(&a);
    return Product(a);
  };
  const bool has_mult = c.residual_multiplier != 1.0f;
  const cuda::FamilyActivation act = c.mlp == MlpKind::kPlain ? cuda::FamilyActivation::kGelu
                                     : c.activation == Activation::kGeluTanh ? cuda::FamilyActivation::kGeluMul
                                                                             : cuda::FamilyActivation::kSiluMul;
  float* kv_base = kv_.as<float>();
  for (int32_t l = 0; l < c.num_layers; ++l) {
    const DeviceLayer& dl = layers_[l];
    const LayerKv kv{kv_base + (2 * l) * layer_floats, kv_base + (2 * l + 1) * layer_floats};
    ROTE_RETURN_IF_ERROR(FamilyNormInto(x, lay.tokens, dl.attn_norm, dl.attn_norm_bias, h));
    ROTE_RETURN_IF_ERROR(product(dl.wqkv, h, xs, dl.bqkv, qkv_.as<float>(), dl.wqkv.rows, false));
    ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchFamilyRopeStore(qkv_.as<float>(), step, shape, dl.q_norm, dl.k_norm,
                                                          c.rms_norm_eps, c.rope_dim(), dl.rope_cos, dl.rope_sin,
                                                          q_.as<float>(), kv, stream_));
    // Attention over a window that hides no position of this step's context bucket (so of any
    // step a graph of it replays) is the ordinary path's attention, with the soft cap where the
    // model has one (AttentionShape::softcap): the same canonical order (docs/numerics.md), the
    // same bits, and kernels built for long prefills and long decode contexts. The family kernel
    // (a block per head and token, one position or dimension a thread) took 10.6 of a 30B-A3B
    // layer's 15 ms in a prefill of 1,000 tokens. A window that acts keeps the family kernel: its
    // weighted sum's classes count from the window's first key, which differs row by row.
    if (dl.window == 0 || dl.window >= lay.context) {
      ROTE_RETURN_IF_ERROR(LaunchPlainAttention(lay, step, shape, kv));
    } else {
      cuda::FamilyAttention fa;
      fa.scale = scale_;
      fa.softcap = c.attn_logit_softcap;
      fa.window = dl.window;
      ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchFamilyAttention(q_.as<float>(), step, shape, kv, fa, lay.context,
                                                            att_.as<float>(), AttStride(), stream_));
    }
    ROTE_RETURN_IF_ERROR(product(dl.wo, att_.as<float>(), AttStride(), dl.bo, o, xs, true));
    ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchResidualAdd(x, o, xs, lay.tokens, c.hidden_size, dl.post_attn_norm,
                                                      c.rms_norm_eps, has_mult, c.residual_multiplier, stream_));
    ROTE_RETURN_IF_ERROR(FamilyNormInto(x, lay.tokens, dl.mlp_norm, dl.mlp_norm_bias, h));
    if (c.is_moe_layer(l)) {
      ROTE_RETURN_IF_ERROR(LaunchExperts(dl, lay.tokens, h, o));
      ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchResidualAdd(x, o, xs, lay.tokens, c.hidden_size, dl.post_mlp_norm,
                                                        c.rms_norm_eps, has_mult, c.residual_multiplier, stream_));
      continue;
    }
    ROTE_RETURN_IF_ERROR(product(dl.wgu, h, xs, dl.bgu, mlp_tmp_.as<float>(), dl.wgu.rows, false));
    ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchFamilyActivation(act, mlp_tmp_.as<float>(), dl.wgu.rows, lay.tokens,
                                                           c.intermediate_size, act_.as<float>(), ActStride(),
                                                           stream_));
    ROTE_RETURN_IF_ERROR(product(dl.wdown, act_.as<float>(), ActStride(), dl.bdown, o, xs, true));
    ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchResidualAdd(x, o, xs, lay.tokens, c.hidden_size, dl.post_mlp_norm,
                                                      c.rms_norm_eps, has_mult, c.residual_multiplier, stream_));
  }
  if (lay.logit_rows > 0) {
    ROTE_RETURN_IF_ERROR(FamilyNormInto(x, lay.logit_rows, final_norm_, final_norm_bias_, h, meta + lay.logit_rows_off));
    LinearArgs a;
    a.w = lm_head_;
    a.x = h;
    a.x_stride = xs;
    a.tokens = lay.logit_rows;
    a.epilogue = LinearEpilogue::kStore;
    a.out = logits_.as<float>();
    a.out_stride = c.vocab_size;
    WithSplitScratch(&a);
    ROTE_RETURN_IF_ERROR(Product(a));
    if (c.final_logit_softcap > 0.0f || c.logits_divisor != 1.0f)
      ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchLogitsPost(logits_.as<float>(), lay.logit_rows, c.vocab_size,
                                                       c.final_logit_softcap, c.logits_divisor, stream_));
    if (greedy)
      ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchArgmax(logits_.as<float>(), lay.logit_rows, c.vocab_size,
                                                   greedy_.as<int32_t>(), argmax_scratch_.as<void>(), logit_capacity_,
                                                   stream_));
  }
  return OkStatus();
}

Status CudaBackendImpl::EnsureExpertCapacity(int32_t tokens) {
  if (tokens <= expert_capacity_) return OkStatus();
  const ModelConfig& c = config_;
  const size_t rows = static_cast<size_t>(tokens) * c.experts_per_token;
  ROTE_RETURN_IF_ERROR(router_logits_.Allocate(static_cast<size_t>(tokens) * c.num_experts * 4));
  // Lane-row buffers start zeroed: their padding is read (times zero weights, or summed as zero).
  ROTE_RETURN_IF_ERROR(expert_gu_.Allocate(rows * 2 * c.moe_intermediate_size * 4));
  ROTE_RETURN_IF_ERROR(AllocateZeroed(&expert_act_, rows * ExpertActStride() * 4));
  ROTE_RETURN_IF_ERROR(AllocateZeroed(&expert_out_, rows * HiddenStride() * 4));
  // The route and its lists: each pair's expert and weight, each expert row's token, each pair's
  // row; each expert's first row and first tile.
  ROTE_RETURN_IF_ERROR(expert_meta_.Allocate((rows * 4 + 2 * (static_cast<size_t>(c.num_experts) + 1)) * 4));
  expert_capacity_ = tokens;
  return OkStatus();
}

Status CudaBackendImpl::LaunchExperts(const DeviceLayer& dl, int32_t tokens, const float* h, float* o) {
  const ModelConfig& c = config_;
  const int32_t E = c.num_experts, K = c.experts_per_token, moe = c.moe_intermediate_size, dim = c.hidden_size;
  const int32_t xs = HiddenStride(), as = ExpertActStride();
  if (tokens > expert_capacity_) return Internal("LaunchExperts: " + std::to_string(tokens) + " rows, room for " +
                                                 std::to_string(expert_capacity_));
  LinearArgs r;
  r.w = dl.router;
  r.x = h;
  r.x_stride = xs;
  r.tokens = tokens;
  r.epilogue = LinearEpilogue::kStore;
  r.out = router_logits_.as<float>();
  r.out_stride = E;
  WithSplitScratch(&r);
  ROTE_RETURN_IF_ERROR(Product(r));
  const int32_t pairs = tokens * K;
  float* gu = expert_gu_.as<float>();
  float* act = expert_act_.as<float>();
  float* out = expert_out_.as<float>();
  int32_t* meta = expert_meta_.as<int32_t>();
  int32_t* d_experts = meta;
  float* d_weights = reinterpret_cast<float*>(meta + pairs);
  ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchRoute(router_logits_.as<float>(), tokens, E, K, c.norm_topk_prob, d_experts,
                                              d_weights, stream_));
  if (pairs <= kExpertPairsByRow) {
    cuda::ExpertRowsArgs a;
    a.weights = dl.experts_gu.data;
    a.type = dl.experts_gu.type;
    a.rows = 2 * moe;
    a.cols_padded = dl.experts_gu.cols_padded;
    a.experts = d_experts;
    a.pairs = pairs;
    a.pairs_per_input = K;
    a.x = h;
    a.x_stride = xs;
    a.out = gu;
    a.out_stride = 2 * moe;
    ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchExpertRows(a, stream_));
    ROTE_CUDA_RETURN_IF_ERROR(
        cuda::LaunchFamilyActivation(cuda::FamilyActivation::kSiluMul, gu, 2 * moe, pairs, moe, act, as, stream_));
    a.weights = dl.experts_down.data;
    a.type = dl.experts_down.type;
    a.rows = dim;
    a.cols_padded = dl.experts_down.cols_padded;
    a.pairs_per_input = 1;
    a.x = act;
    a.x_stride = as;
    a.out = out;
    a.out_stride = xs;
    a.out_lane_rows = true;
    ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchExpertRows(a, stream_));
    ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchExpertsSum(out, xs, nullptr, d_weights, tokens, K, xs, o, stream_));
    return OkStatus();
  }
  // Larger steps (prefill, large batches): the same route, the pairs grouped by expert on the
  // device, and each product over all experts' rows in one launch, each expert's weights read
  // once per tile of its rows. No synchronize: these steps replay as graphs too.
  int32_t* d_row_token = meta + 2 * pairs;
  int32_t* d_pair_row = meta + 3 * pairs;
  int32_t* d_first = meta + 4 * pairs;
  int32_t* d_tiles = d_first + E + 1;
  const int32_t tile = cuda::GroupedTileTokens(pairs, E);
  ROTE_CUDA_RETURN_IF_ERROR(
      cuda::LaunchExpertGroups(d_experts, tokens, K, E, tile, d_row_token, d_pair_row, d_first, d_tiles, stream_));
  auto grouped = [&](const DeviceMatrix& all, int32_t rows, const float* x, int32_t x_stride, const int32_t* x_rows,
                     float* y, int32_t y_stride, bool lane_rows) -> Status {
    LinearArgs a;
    a.w = all;
    a.w.rows = rows;
    a.w.fast_tiles = nullptr;
    a.x = x;
    a.x_stride = x_stride;
    a.x_rows = x_rows;
    a.tokens = pairs;
    a.epilogue = LinearEpilogue::kStore;
    a.out = y;
    a.out_stride = y_stride;
    a.out_lane_rows = lane_rows;
    a.group_first = d_first;
    a.group_tiles = d_tiles;
    a.groups = E;
    ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchGroupedLinear(a, Ctx(), stream_));  // the exact kernels, in both profiles
    return OkStatus();
  };
  ROTE_RETURN_IF_ERROR(grouped(dl.experts_gu, 2 * moe, h, xs, d_row_token, gu, 2 * moe, false));
  ROTE_CUDA_RETURN_IF_ERROR(
      cuda::LaunchFamilyActivation(cuda::FamilyActivation::kSiluMul, gu, 2 * moe, pairs, moe, act, as, stream_));
  ROTE_RETURN_IF_ERROR(grouped(dl.experts_down, dim, act, as, nullptr, out, xs, true));
  ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchExpertsSum(out, xs, d_pair_row, d_weights, tokens, K, xs, o, stream_));
  return OkStatus();
}

}  // namespace rote::inference::cuda_impl

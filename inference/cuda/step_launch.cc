// The kernels a step launches and their arguments: per layer the q|k|v product (rotary and the
// KV store in its epilogue or a kernel of their own), attention, the o, gate|up and down products,
// then the lm_head; for one token, all of it as one DecodeStepKernel where it runs.
#include "inference/cuda/backend_impl.h"

namespace rote::inference::cuda_impl {

Status CudaBackendImpl::Product(const LinearArgs& a) {
  if (fast_) {
    if (!cuda::CanRunFastLinear(a))
      return Internal("CUDA backend: a fast-profile product of " + std::to_string(a.w.rows) + " x " +
                      std::to_string(a.w.cols) + " for " + std::to_string(a.tokens) + " tokens cannot run");
    ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchFastLinear(a, Ctx(), stream_));
    return OkStatus();
  }
  ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchLinear(a, Ctx(), stream_));
  return OkStatus();
}

StepTokens CudaBackendImpl::StepOf(const StepLayout& lay) const {
  const int32_t* meta = meta_.as<int32_t>();
  StepTokens step;
  step.pos = meta + lay.pos_off;
  step.block_table = meta + lay.table_off;
  step.max_blocks = lay.max_blocks;
  step.tokens = lay.tokens;
  return step;
}

CudaBackendImpl::LayerLaunch CudaBackendImpl::LayerArgs(const StepLayout& lay, const StepTokens& step, int32_t l) const {
  const ModelConfig& c = config_;
  const DeviceLayer& dl = layers_[l];
  const bool fused_norm = FusedNorm(lay);
  const bool skip_weights = Skip(CudaKernelKind::kLayerWeightReads);
  float* x = x_.as<float>();
  const int32_t xs = HiddenStride();
  const int64_t layer_floats = static_cast<int64_t>(num_blocks_) * kKvBlockSize * c.kv_dim();
  float* kv_base = kv_.as<float>();
  LayerLaunch r;
  r.args.kv = LayerKv{kv_base + (2 * l) * layer_floats, kv_base + (2 * l + 1) * layer_floats};

  LinearArgs a;
  a.w = dl.wqkv;
  a.tokens = lay.tokens;
  a.x_stride = xs;
  a.x = fused_norm ? x : h_.as<float>();
  if (fused_norm) {
    a.norm_weight = dl.attn_norm;
    a.norm_eps = c.rms_norm_eps;
  }
  a.epilogue = dl.bqkv != nullptr ? LinearEpilogue::kAddBias : LinearEpilogue::kStore;
  a.bias = dl.bqkv;
  a.out = qkv_.as<float>();
  a.out_stride = c.q_dim() + 2 * c.kv_dim();
  a.bench_skip_weight_reads = skip_weights;
  // The fast profile fuses it at every token count (FastLinearKernel's epilogue, the same bits
  // as the rotary kernel).
  if ((fast_ ? tuning_.fast_rope_fused : lay.tokens == 1) && dl.q_norm == nullptr) {
    LinearArgs f = a;
    f.epilogue = LinearEpilogue::kRopeStore;
    f.rope.pos = step.pos;
    f.rope.block_table = step.block_table;
    f.rope.max_blocks = step.max_blocks;
    f.rope.block_size = kKvBlockSize;
    f.rope.num_heads = c.num_heads;
    f.rope.num_kv_heads = c.num_kv_heads;
    f.rope.head_dim = c.head_dim;
    f.rope.cos = rope_cos_;
    f.rope.sin = rope_sin_;
    f.rope.q_out = q_.as<float>();
    f.rope.k_cache = r.args.kv.k;
    f.rope.v_cache = r.args.kv.v;
    if (fast_ ? cuda::CanRunFastLinear(f) : cuda::CanFuseRope(f, tuning_)) {
      a = f;
      r.rope_fused = true;
    }
  }
  r.args.qkv = a;

  // The o and down products add into the residual stream x.
  auto residual_product = [&](const DeviceMatrix& w, const float* in, int32_t in_stride) {
    LinearArgs p;
    p.w = w;
    p.x = in;
    p.x_stride = in_stride;
    p.tokens = lay.tokens;
    p.epilogue = LinearEpilogue::kAddResidual;
    p.out = x;
    p.out_stride = xs;
    p.out_lane_rows = true;
    p.bench_skip_weight_reads = skip_weights;
    return p;
  };
  r.args.out = residual_product(dl.wo, att_.as<float>(), AttStride());

  a = LinearArgs{};
  a.w = dl.wgu;
  a.tokens = lay.tokens;
  a.x_stride = xs;
  a.x = fused_norm ? x : h_.as<float>();
  if (fused_norm) {
    a.norm_weight = dl.mlp_norm;
    a.norm_eps = c.rms_norm_eps;
  }
  a.epilogue = LinearEpilogue::kSiluMul;
  a.out = act_.as<float>();
  a.out_stride = ActStride();
  a.out_lane_rows = true;
  a.bench_skip_weight_reads = skip_weights;
  r.args.gate_up = a;

  r.args.down = residual_product(dl.wdown, act_.as<float>(), ActStride());
  for (LinearArgs* p : {&r.args.qkv, &r.args.out, &r.args.gate_up, &r.args.down}) WithSplitScratch(p);
  return r;
}

LinearArgs CudaBackendImpl::LmHeadArgs(const StepLayout& lay) const {
  LinearArgs a;
  a.w = lm_head_;
  a.x_stride = HiddenStride();
  a.tokens = lay.logit_rows;
  if (LmHeadNormFused(lay)) {
    a.x = x_.as<float>();
    a.x_rows = meta_.as<int32_t>() + lay.logit_rows_off;
    a.norm_weight = final_norm_;
    a.norm_eps = config_.rms_norm_eps;
  } else {
    a.x = h_.as<float>();
  }
  WithSplitScratch(&a);
  a.epilogue = LinearEpilogue::kStore;
  a.out = logits_.as<float>();
  a.out_stride = config_.vocab_size;
  return a;
}

StatusOr<bool> CudaBackendImpl::PrepareDecodeStep(const StepLayout& lay, cuda::DecodeStepArgs* f) {
  if (fast_) return false;  // the one-launch step runs the exact profile's products
  if (family_path_) return false;  // (LaunchFamily's kernels)
  if (lay.tokens != 1 || lay.logit_rows != 1 || options_.instruments.skip_kernels != 0) return false;
  const ModelConfig& c = config_;
  const StepTokens step = StepOf(lay);
  std::vector<cuda::StepLayerArgs> host;
  host.reserve(c.num_layers);
  for (int32_t l = 0; l < c.num_layers; ++l) {
    LayerLaunch ll = LayerArgs(lay, step, l);
    if (!ll.rope_fused) return false;
    host.push_back(ll.args);
  }
  f->num_layers = c.num_layers;
  f->lm_head = LmHeadArgs(lay);
  f->step = step;
  f->shape = AttentionShape{c.num_heads, c.num_kv_heads, c.head_dim, kKvBlockSize};
  f->scale = scale_;
  f->max_context = lay.context;
  f->q = q_.as<float>();
  f->att = att_.as<float>();
  f->barrier = step_barrier_.as<unsigned long long>();
  // Attention over parts of long contexts (EnsureAttentionParts sized the scratch), only where
  // this step reaches them: the other steps run the kernel without that code (decided per step,
  // so one context bucket may hold a graph of each).
  const int32_t split = tuning_.step_attention_split;
  if (split > 0 && attn_sync_.as<void>() != nullptr && lay.longest >= split) {
    const cuda::AttentionParts parts = AttentionPartsScratch();
    f->attn_split_min_context = split;
    f->attn_scores = parts.scores;
    f->attn_maxes = parts.maxes;
    f->attn_vpart = parts.vpart;
    f->attn_sync = parts.sync;
    f->attn_parts = parts.parts;
  }
  if (step_layers_.as<void>() == nullptr)
    ROTE_RETURN_IF_ERROR(step_layers_.Allocate(host.size() * sizeof(cuda::StepLayerArgs)));
  f->layers = reinterpret_cast<const cuda::StepLayerArgs*>(step_layers_.as<void>());
  if (!cuda::CanRunDecodeStep(*f, host[0], tuning_)) return false;
  if (options_.instruments.step_trace) {
    int device = 0, sms = 0;
    ROTE_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
    ROTE_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    const int32_t slots = cuda::DecodeStepTraceSlots(c.num_layers);
    const size_t trace_bytes = static_cast<size_t>(sms) * slots * 2 * sizeof(unsigned long long);
    if (step_trace_.bytes() < trace_bytes) ROTE_RETURN_IF_ERROR(AllocateZeroed(&step_trace_, trace_bytes));
    f->trace = step_trace_.as<unsigned long long>();
    step_trace_blocks_ = sms;
    step_trace_slots_ = slots;
  }
  // The arguments depend on these addresses only (compared as addresses: the structs' padding
  // bytes are indeterminate).
  const std::vector<const void*> key = {x_.as<void>(),   h_.as<void>(),     qkv_.as<void>(), q_.as<void>(),
                                        att_.as<void>(), act_.as<void>(),   logits_.as<void>(),
                                        meta_.as<void>(), kv_.as<void>(),
                                        reinterpret_cast<const void*>(static_cast<uintptr_t>(num_blocks_))};
  const size_t bytes = host.size() * sizeof(cuda::StepLayerArgs);
  if (step_layers_key_ != key) {
    ROTE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpy(step_layers_.as<void>(), host.data(), bytes, cudaMemcpyHostToDevice));
    step_layers_key_ = key;
  }
  step_layer0_ = host[0];
  return true;
}

Status CudaBackendImpl::EnsureAttentionParts(const StepLayout& lay) {
  const ModelConfig& c = config_;
  const size_t heads = static_cast<size_t>(c.num_heads);
  const size_t scores = heads * static_cast<size_t>(lay.context);
  if (attn_scores_.bytes() < scores * sizeof(float)) {
    ROTE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    DropGraphs();
    ROTE_RETURN_IF_ERROR(attn_scores_.Allocate(scores * sizeof(float)));
  }
  if (attn_sync_.as<void>() == nullptr) {
    ROTE_RETURN_IF_ERROR(attn_maxes_.Allocate(heads * 8 * sizeof(float)));
    ROTE_RETURN_IF_ERROR(attn_vpart_.Allocate(heads * 8 * static_cast<size_t>(c.head_dim) * sizeof(float)));
    ROTE_RETURN_IF_ERROR(AllocateZeroed(&attn_sync_, heads * sizeof(unsigned long long)));
  }
  return OkStatus();
}

cuda::AttentionParts CudaBackendImpl::AttentionPartsScratch() {
  return {attn_scores_.as<float>(), attn_maxes_.as<float>(), attn_vpart_.as<float>(),
          attn_sync_.as<unsigned long long>(), tuning_.attention_parts, tuning_.attention_parts_v_loads};
}

Status CudaBackendImpl::LaunchPlainAttention(const StepLayout& lay, const StepTokens& step, const AttentionShape& shape,
                                             LayerKv kv) {
  // One token over a context bucket whose every position count reaches the split's threshold
  // (a bucket holds contexts over half its size): each head in 8 (4, 2) blocks over parts of it.
  const int32_t parts_from = tuning_.attention_parts_min_context;
  const bool parts = lay.tokens == 1 && tuning_.attention_variant < 0 && parts_from > 0 &&
                     lay.context / 2 >= parts_from && attn_sync_.as<void>() != nullptr &&
                     cuda::CanRunAttentionParts(step, shape, lay.context, tuning_.attention_parts);
  if (lay.attention_tiles > 0)
    ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchTileAttention(q_.as<float>(), step, shape, kv, scale_, lay.context,
                                                        att_.as<float>(), AttStride(),
                                                        meta_.as<int32_t>() + lay.tiles_off, lay.attention_tiles,
                                                        Ctx(), stream_));
  else if (parts)
    ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchAttentionParts(q_.as<float>(), step, shape, kv, scale_, lay.context,
                                                         att_.as<float>(), AttentionPartsScratch(), Ctx(), stream_));
  else
    ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchAttention(q_.as<float>(), step, shape, kv, scale_, lay.context,
                                                    att_.as<float>(), AttStride(), Ctx(), stream_));
  return OkStatus();
}

Status CudaBackendImpl::Launch(const StepLayout& lay, bool greedy, const cuda::DecodeStepArgs* decode_step) {
  if (family_path_) return LaunchFamily(lay, greedy);
  const ModelConfig& c = config_;
  const int32_t* meta = meta_.as<int32_t>();
  const StepTokens step = StepOf(lay);
  AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim, kKvBlockSize};
  float* x = x_.as<float>();
  float* h = h_.as<float>();
  const int32_t xs = HiddenStride();
  if (!Skip(CudaKernelKind::kEmbed))
    ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchEmbed(embed_, meta + lay.tokens_off, lay.tokens, x, xs, stream_));
  if (decode_step != nullptr) {
    ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchDecodeStep(*decode_step, step_layer0_, tuning_, stream_));
  } else {
    const bool fused_norm = FusedNorm(lay);
    for (int32_t l = 0; l < c.num_layers; ++l) {
      const DeviceLayer& dl = layers_[l];
      const LayerLaunch ll = LayerArgs(lay, step, l);
      const cuda::StepLayerArgs& la = ll.args;
      if (!fused_norm)
        ROTE_CUDA_RETURN_IF_ERROR(
            cuda::LaunchRmsNorm(x, xs, lay.tokens, c.hidden_size, dl.attn_norm, c.rms_norm_eps, h, stream_));
      if (!Skip(CudaKernelKind::kQkv)) ROTE_RETURN_IF_ERROR(Product(la.qkv));
      if (!ll.rope_fused && !Skip(CudaKernelKind::kRope))
        ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchRopeStore(qkv_.as<float>(), step, shape, dl.q_norm, dl.k_norm,
                                                        c.rms_norm_eps, rope_cos_, rope_sin_, q_.as<float>(), la.kv,
                                                        stream_));
      if (!Skip(CudaKernelKind::kAttention)) ROTE_RETURN_IF_ERROR(LaunchPlainAttention(lay, step, shape, la.kv));
      // One token: the o, gate|up and down products may run as one persistent launch with grid
      // barriers between them (kernels.h, MlpBlockArgs), unless the benchmark leaves one out.
      const uint32_t mlp_kinds = static_cast<uint32_t>(CudaKernelKind::kOut) |
                                 static_cast<uint32_t>(CudaKernelKind::kGateUp) |
                                 static_cast<uint32_t>(CudaKernelKind::kDown) |
                                 static_cast<uint32_t>(CudaKernelKind::kLayerWeightReads);
      const cuda::MlpBlockArgs mlp{la.out, la.gate_up, la.down, mlp_barrier_.as<uint32_t>()};
      if (!fast_ && lay.tokens == 1 && fused_norm && (options_.instruments.skip_kernels & mlp_kinds) == 0 &&
          cuda::CanRunMlpBlock(mlp, tuning_)) {
        ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchMlpBlock(mlp, tuning_, stream_));
        continue;
      }
      if (!Skip(CudaKernelKind::kOut)) ROTE_RETURN_IF_ERROR(Product(la.out));
      if (!fused_norm)
        ROTE_CUDA_RETURN_IF_ERROR(
            cuda::LaunchRmsNorm(x, xs, lay.tokens, c.hidden_size, dl.mlp_norm, c.rms_norm_eps, h, stream_));
      if (!Skip(CudaKernelKind::kGateUp)) ROTE_RETURN_IF_ERROR(Product(la.gate_up));
      if (!Skip(CudaKernelKind::kDown)) ROTE_RETURN_IF_ERROR(Product(la.down));
    }
    if (lay.logit_rows > 0 && !Skip(CudaKernelKind::kLmHead)) {
      if (!LmHeadNormFused(lay))
        ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchRmsNorm(x, xs, lay.logit_rows, c.hidden_size, final_norm_,
                                                      c.rms_norm_eps, h, stream_,
                                                      meta + lay.logit_rows_off));
      ROTE_RETURN_IF_ERROR(Product(LmHeadArgs(lay)));
    }
  }
  if (lay.logit_rows > 0 && greedy && !Skip(CudaKernelKind::kArgmax))
    ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchArgmax(logits_.as<float>(), lay.logit_rows, c.vocab_size,
                                                 greedy_.as<int32_t>(), argmax_scratch_.as<void>(),
                                                 logit_capacity_, stream_));
  return OkStatus();
}

}  // namespace rote::inference::cuda_impl

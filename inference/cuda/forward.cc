// A step of the CUDA backend: its metadata uploaded in one copy, its kernels launched (graphs.cc,
// step_launch.cc), and the logits, greedy tokens or sampled tokens copied back.
#include "inference/cuda/backend_impl.h"

#include <vector>

#include "inference/cuda/attention_tiles.h"

namespace rote::inference::cuda_impl {

int32_t CudaBackendImpl::KvBlocksForFreeMemory(int64_t max_kv_bytes, int64_t reserve_bytes) const {
  DeviceScope scope(options_.device);  // free memory of this backend's device
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return 0;
  int64_t usable = static_cast<int64_t>(free_bytes) + static_cast<int64_t>(kv_.bytes()) - reserve_bytes;
  if (max_kv_bytes > 0) usable = std::min(usable, max_kv_bytes);
  if (usable <= 0) return 0;
  return static_cast<int32_t>(std::min<int64_t>(usable / KvBytesPerBlock(), 1 << 30));
}

Status CudaBackendImpl::AllocateKvCache(int32_t num_blocks) {
  DeviceScope scope(options_.device);
  if (num_blocks <= 0) return InvalidArgument("AllocateKvCache: num_blocks must be positive");
  DropGraphs();
  kv_.Reset();
  ROTE_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  Status s = kv_.Allocate(static_cast<size_t>(num_blocks) * KvBytesPerBlock());
  if (!s.ok())
    return ResourceExhausted("CUDA backend: no room for " + std::to_string(num_blocks) + " KV blocks (" +
                             std::to_string(static_cast<int64_t>(num_blocks) * KvBytesPerBlock()) +
                             " bytes): " + s.message());
  num_blocks_ = num_blocks;
  return OkStatus();
}

Status CudaBackendImpl::Forward(const BatchPlan& plan, std::vector<float>* logits) {
  DeviceScope scope(options_.device);
  Status s = Step(plan, /*greedy=*/false);
  if (!s.ok()) return s;
  const size_t n = static_cast<size_t>(num_logit_rows_) * config_.vocab_size;
  logits->resize(n);
  if (n > 0) std::memcpy(logits->data(), host_out_, n * sizeof(float));
  return OkStatus();
}

Status CudaBackendImpl::ForwardGreedy(const BatchPlan& plan, std::vector<int32_t>* tokens) {
  DeviceScope scope(options_.device);
  Status s = Step(plan, /*greedy=*/true);
  if (!s.ok()) return s;
  tokens->assign(static_cast<const int32_t*>(host_out_), static_cast<const int32_t*>(host_out_) + num_logit_rows_);
  return OkStatus();
}

Status CudaBackendImpl::ForwardSampled(const BatchPlan& plan, std::span<const RowSampling> rules,
                                       std::vector<int32_t>* tokens) {
  return SampledStep(plan, rules, nullptr, tokens);
}

Status CudaBackendImpl::ForwardMasked(const BatchPlan& plan, std::span<const RowSampling> rules,
                                      const StepMasks& masks, std::vector<int32_t>* tokens) {
  return SampledStep(plan, rules, &masks, tokens);
}

Status CudaBackendImpl::SampledStep(const BatchPlan& plan, std::span<const RowSampling> rules, const StepMasks* masks,
                                    std::vector<int32_t>* tokens) {
  DeviceScope scope(options_.device);
  // Where the device sampler cannot take the step (more rows than its keys hold, or no memory
  // left for its scratch once the KV cache took the rest), the host samples Forward's logits:
  // the same tokens, more slowly.
  int32_t rows = 0;
  for (const SequenceStep& st : plan.sequences) rows += st.num_logits;
  if (!cuda::CanSampleRows(rows, config_.vocab_size) || !EnsureSampleScratch(rows).ok())
    return masks != nullptr ? Backend::ForwardMasked(plan, rules, *masks, tokens)
                            : Backend::ForwardSampled(plan, rules, tokens);
  sample_rules_ = rules;
  step_masks_ = masks;
  sampling_ = true;
  sampled_by_candidates_ = false;  // set by SampleAndCopy, which a step without rows never reaches
  Status s = Step(plan, /*greedy=*/false);
  // A row with more candidates than the candidate path holds (ties, NaN): every column sorted,
  // from the logits still on the device.
  if (s.ok() && sampled_by_candidates_ &&
      (static_cast<const int32_t*>(host_out_)[num_logit_rows_] != 0 || tuning_.sample_candidates == 2))
    s = SampleAndCopy(num_logit_rows_, /*by_candidates=*/false, /*synchronize=*/true);
  sampling_ = false;
  sample_rules_ = {};
  step_masks_ = nullptr;
  if (!s.ok()) return s;
  tokens->assign(static_cast<const int32_t*>(host_out_), static_cast<const int32_t*>(host_out_) + num_logit_rows_);
  return OkStatus();
}

Status CudaBackendImpl::EnsureCapacity(int32_t tokens, int32_t logit_rows, int32_t meta_ints) {
  const ModelConfig& c = config_;
  if (tokens > token_capacity_) {
    DropGraphs();
    int32_t cap = std::max<int32_t>(tokens, 64);
    ROTE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    // Lane-row buffers start zeroed: their padding is read (times zero weights) and never written.
    ROTE_RETURN_IF_ERROR(AllocateZeroed(&x_, static_cast<size_t>(cap) * HiddenStride() * 4));
    ROTE_RETURN_IF_ERROR(AllocateZeroed(&h_, static_cast<size_t>(cap) * HiddenStride() * 4));
    ROTE_RETURN_IF_ERROR(qkv_.Allocate(static_cast<size_t>(cap) * (c.q_dim() + 2 * c.kv_dim()) * 4));
    ROTE_RETURN_IF_ERROR(q_.Allocate(static_cast<size_t>(cap) * c.q_dim() * 4));
    ROTE_RETURN_IF_ERROR(AllocateZeroed(&att_, static_cast<size_t>(cap) * AttStride() * 4));
    ROTE_RETURN_IF_ERROR(AllocateZeroed(&act_, static_cast<size_t>(cap) * ActStride() * 4));
    if (family_path_) {
      ROTE_RETURN_IF_ERROR(AllocateZeroed(&o_, static_cast<size_t>(cap) * HiddenStride() * 4));
      ROTE_RETURN_IF_ERROR(mlp_tmp_.Allocate(static_cast<size_t>(cap) * 2 * c.intermediate_size * 4));
      if (c.has_moe()) ROTE_RETURN_IF_ERROR(EnsureExpertCapacity(cap));
    }
    if (fast_) {
      // Optional: without it the prefill products keep FastLinearKernel (same bits), so a device
      // too full for it runs on. The failed allocation's error is taken off the error state, or
      // the next launch's check would report it.
      const int32_t widest = std::max({HiddenStride(), AttStride(), ActStride()});
      if (!fast_scratch_.Allocate(static_cast<size_t>(cuda::FastWgmmaScratchBytesFor(cap, widest))).ok()) {
        fast_scratch_.Reset();
        (void)cudaGetLastError();
      }
    }
    token_capacity_ = cap;
  }
  if (logit_rows > logit_capacity_) {
    DropGraphs();
    int32_t cap = std::max<int32_t>(logit_rows, 64);
    ROTE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    ROTE_RETURN_IF_ERROR(logits_.Allocate(static_cast<size_t>(cap) * c.vocab_size * 4));
    ROTE_RETURN_IF_ERROR(greedy_.Allocate(static_cast<size_t>(cap) * 4));
    ROTE_RETURN_IF_ERROR(AllocateZeroed(&argmax_scratch_, static_cast<size_t>(cuda::ArgmaxScratchBytes(cap))));
    if (host_out_ != nullptr) cudaFreeHost(host_out_);
    host_out_ = nullptr;
    ROTE_CUDA_RETURN_IF_ERROR(cudaMallocHost(&host_out_, static_cast<size_t>(cap) * c.vocab_size * 4));
    logit_capacity_ = cap;
  }
  if (meta_ints > meta_capacity_) {
    DropGraphs();
    int32_t cap = std::max<int32_t>(meta_ints, 1 << 16);
    ROTE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    ROTE_RETURN_IF_ERROR(meta_.Allocate(static_cast<size_t>(cap) * 4));
    if (host_meta_ != nullptr) cudaFreeHost(host_meta_);
    host_meta_ = nullptr;
    ROTE_CUDA_RETURN_IF_ERROR(cudaMallocHost(&host_meta_, static_cast<size_t>(cap) * 4));
    meta_capacity_ = cap;
  }
  return OkStatus();
}

Status CudaBackendImpl::Step(const BatchPlan& plan, bool greedy) {
  if (num_blocks_ == 0) return FailedPrecondition("CUDA backend: AllocateKvCache was not called");
  const ModelConfig& c = config_;
  StepLayout lay;
  int32_t max_len = 0;
  bool decode_only = true;
  // Before anything is launched or allocated: a step larger than the kernels' grids and offsets
  // take is refused whole (CudaMaxStepTokens), not failed half way through its layers.
  int64_t step_tokens = 0;
  for (const SequenceStep& s : plan.sequences) step_tokens += static_cast<int64_t>(s.tokens.size());
  if (step_tokens > max_step_tokens())
    return InvalidArgument("Forward: a step of " + std::to_string(step_tokens) + " tokens exceeds the " +
                           std::to_string(max_step_tokens()) + " one step of this model carries under the " +
                           profile_name_ + " profile");
  for (const SequenceStep& s : plan.sequences) {
    const int32_t n = static_cast<int32_t>(s.tokens.size());
    if (n < 1) return InvalidArgument("Forward: a sequence step has no tokens");
    if (s.num_logits < 0 || s.num_logits > n) return InvalidArgument("Forward: num_logits out of range");
    const int32_t end = s.start_pos + n;
    if (s.start_pos < 0 || end > max_positions_)
      return InvalidArgument("Forward: positions up to " + std::to_string(end) + " exceed max_positions " +
                             std::to_string(max_positions_));
    const int64_t need_blocks = (end + kKvBlockSize - 1) / kKvBlockSize;
    if (static_cast<int64_t>(s.block_table.size()) < need_blocks)
      return InvalidArgument("Forward: block table too short for position " + std::to_string(end - 1));
    // Blocks before the first key any layer reads may have been released (kNoKvBlock): the
    // attention kernels start at the window (family_ops.cu), so they never read those entries.
    const int64_t first_read_block = config_.first_read_key(s.start_pos) / kKvBlockSize;
    for (int64_t b = 0; b < need_blocks; ++b)
      if (!(s.block_table[b] == kNoKvBlock && b < first_read_block) &&
          (s.block_table[b] < 0 || s.block_table[b] >= num_blocks_))
        return InvalidArgument("Forward: block id " + std::to_string(s.block_table[b]) + " out of range");
    lay.tokens += n;
    lay.logit_rows += s.num_logits;
    max_len = std::max(max_len, end);
    if (n != 1 || s.num_logits != 1) decode_only = false;
  }
  if (lay.tokens == 0) {
    num_logit_rows_ = 0;
    return OkStatus();
  }
  // Decode steps bucket the context so that one graph serves many steps: the attention
  // kernel's shared memory and the block-table width are fixed per bucket.
  const bool use_graph = options_.use_graphs && decode_only;
  lay.context = max_len;
  lay.longest = max_len;
  if (use_graph) {
    int32_t bucket = 256;
    while (bucket < max_len) bucket *= 2;
    lay.context = std::min(bucket, max_positions_);
  }
  lay.max_blocks = (lay.context + kKvBlockSize - 1) / kKvBlockSize;
  lay.tokens_off = 0;
  lay.pos_off = lay.tokens_off + lay.tokens;
  lay.logit_rows_off = lay.pos_off + lay.tokens;
  lay.table_off = lay.logit_rows_off + lay.logit_rows;
  // Steps of many tokens: attention in query tiles (runs of a sequence's consecutive tokens) where
  // the kernel takes the shape, the tiles are mostly full (CudaTuning::attention_tile_min_tokens)
  // and the measured rule says they pay (AttentionTilesPay).
  const AttentionShape tile_shape{c.num_heads, c.num_kv_heads, c.head_dim, kKvBlockSize};
  const int32_t tile_tokens = cuda::AttentionTileTokens(tile_shape);
  std::vector<cuda::AttentionTile> tiles;
  if (!use_graph && tile_tokens > 0 && tuning_.attention_tile_min_tokens > 0 &&
      lay.tokens >= tuning_.attention_tile_min_tokens && cuda::AttentionTileFits(tile_shape, lay.context)) {
    std::vector<cuda::StepSequence> sequences;
    sequences.reserve(plan.sequences.size());
    for (const SequenceStep& s : plan.sequences)
      sequences.push_back({static_cast<int32_t>(s.tokens.size()), s.start_pos});
    tiles = cuda::AttentionTilesFor(sequences, tile_tokens);
    const int64_t n = static_cast<int64_t>(tiles.size());
    if (cuda::AttentionTilesMostlyFull(n, tile_tokens, lay.tokens) && cuda::AttentionTilesPay(tile_shape, n, tuning_))
      lay.attention_tiles = static_cast<int32_t>(n);
  }
  lay.tiles_off = lay.table_off + static_cast<int64_t>(lay.tokens) * lay.max_blocks;
  lay.total = lay.tiles_off + 2 * int64_t{lay.attention_tiles};
  if (lay.total > (1 << 30)) return InvalidArgument("Forward: step too large");
  ROTE_RETURN_IF_ERROR(EnsureCapacity(lay.tokens, lay.logit_rows, static_cast<int32_t>(lay.total)));

  // Per token: id, position, its sequence's block table (padded with block 0, never read).
  int32_t* h = host_meta_;
  int32_t t = 0, lr = 0;
  for (const SequenceStep& s : plan.sequences) {
    const int32_t n = static_cast<int32_t>(s.tokens.size());
    const int64_t nb = std::min<int64_t>(static_cast<int64_t>(s.block_table.size()), lay.max_blocks);
    for (int32_t i = 0; i < n; ++i, ++t) {
      h[lay.tokens_off + t] = s.tokens[i];
      h[lay.pos_off + t] = s.start_pos + i;
      int32_t* row = h + lay.table_off + static_cast<int64_t>(t) * lay.max_blocks;
      std::memcpy(row, s.block_table.data(), nb * sizeof(int32_t));
      std::fill(row + nb, row + lay.max_blocks, 0);
      if (i >= n - s.num_logits) h[lay.logit_rows_off + lr++] = t;
    }
  }
  if (lay.attention_tiles > 0) {  // (first token, tokens) pairs, the longest contexts first
    int32_t* out = h + lay.tiles_off;
    for (const cuda::AttentionTile& tile : tiles) {
      *out++ = tile.first_token;
      *out++ = tile.tokens;
    }
  }
  for (int32_t i = 0; i < lay.tokens; ++i)
    if (h[lay.tokens_off + i] < 0 || h[lay.tokens_off + i] >= c.vocab_size)
      return InvalidArgument("Forward: token id " + std::to_string(h[lay.tokens_off + i]) + " out of range");
  ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(meta_.as<int32_t>(), host_meta_, lay.total * sizeof(int32_t),
                                            cudaMemcpyHostToDevice, stream_));

  if (lay.tokens == 1 && (tuning_.step_attention_split > 0 || tuning_.attention_parts_min_context > 0))
    ROTE_RETURN_IF_ERROR(EnsureAttentionParts(lay));
  cuda::DecodeStepArgs decode_step_args;
  ROTE_ASSIGN_OR_RETURN(const bool one_launch, PrepareDecodeStep(lay, &decode_step_args));
  const cuda::DecodeStepArgs* decode_step = one_launch ? &decode_step_args : nullptr;
  const bool step_in_parts = one_launch && decode_step_args.attn_sync != nullptr;
  if (one_launch) ++stats_.decode_steps;
  if (step_in_parts) ++stats_.decode_steps_in_parts;
  if (options_.instruments.kernel_timeline) {  // benchmarks only (CudaInstruments::kernel_timeline)
    if (timeline_.bytes() == 0) ROTE_RETURN_IF_ERROR(AllocateZeroed(&timeline_, sizeof(cuda::KernelTimeline)));
    ROTE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(timeline_.as<void>(), 0, offsetof(cuda::KernelTimeline, log), stream_));
    ROTE_CUDA_RETURN_IF_ERROR(
        cuda::SetKernelTimeline(static_cast<cuda::KernelTimeline*>(timeline_.as<void>()), stream_));
    timeline_set_ = true;
    timeline_recorded_ = true;
  }
  ROTE_RETURN_IF_ERROR(LaunchStep(lay, greedy, decode_step, use_graph, step_in_parts));
  if (sampling_) {
    ROTE_RETURN_IF_ERROR(LaunchSampling(lay));
  } else if (greedy && chain_steps_ > 1) {  // ForwardGreedySteps: the rest of the run, then its tokens
    if (!use_graph) return Internal("ForwardGreedySteps: a chained run without its graph");
    int32_t* history = chain_tokens_.as<int32_t>();
    int32_t* next_tokens = meta_.as<int32_t>() + lay.tokens_off;
    int32_t* next_pos = meta_.as<int32_t>() + lay.pos_off;
    for (int32_t i = 1; i < chain_steps_; ++i) {
      ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchAdvanceGreedy(greedy_.as<int32_t>(), lay.logit_rows,
                                                          history + static_cast<int64_t>(i - 1) * lay.logit_rows,
                                                          next_tokens, next_pos, stream_));
      ROTE_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(last_graph_, stream_));
    }
    ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchAdvanceGreedy(
        greedy_.as<int32_t>(), lay.logit_rows, history + static_cast<int64_t>(chain_steps_ - 1) * lay.logit_rows,
        nullptr, nullptr, stream_));
    ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_out_, history,
                                              static_cast<size_t>(chain_steps_) * lay.logit_rows * sizeof(int32_t),
                                              cudaMemcpyDeviceToHost, stream_));
  } else if (greedy) {
    ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_out_, greedy_.as<int32_t>(), lay.logit_rows * sizeof(int32_t),
                                              cudaMemcpyDeviceToHost, stream_));
  } else {
    ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_out_, logits_.as<float>(),
                                              static_cast<size_t>(lay.logit_rows) * c.vocab_size * sizeof(float),
                                              cudaMemcpyDeviceToHost, stream_));
  }
  ROTE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  num_logit_rows_ = lay.logit_rows;
  return OkStatus();
}

Status CudaBackendImpl::EnsureSampleScratch(int32_t rows) {
  const int64_t need = cuda::SampleRowsScratchBytes(rows, config_.vocab_size);
  if (static_cast<int64_t>(sample_scratch_.bytes()) >= need) return OkStatus();
  ROTE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  Status s = sample_scratch_.Allocate(static_cast<size_t>(need));
  if (!s.ok()) {
    cudaGetLastError();
    return s;
  }
  ROTE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(sample_scratch_.as<void>(), 0, sample_scratch_.bytes(), stream_));
  return OkStatus();
}

Status CudaBackendImpl::LaunchSampling(const StepLayout& lay) {
  const int32_t rows = lay.logit_rows, cols = config_.vocab_size;
  if (static_cast<int64_t>(sample_rules_.size()) != rows)
    return InvalidArgument("ForwardSampled: " + std::to_string(sample_rules_.size()) + " rules for " +
                           std::to_string(rows) + " logits rows");
  if (rows == 0) return OkStatus();
  if (!cuda::CanSampleRows(rows, cols))
    return InvalidArgument("ForwardSampled: " + std::to_string(rows) + " rows of " + std::to_string(cols) +
                           " logits are more than the device sampler takes (256 rows of 262,144)");
  ROTE_RETURN_IF_ERROR(EnsureSampleScratch(rows));
  if (static_cast<int64_t>(sample_rules_dev_.bytes()) < static_cast<int64_t>(rows) * static_cast<int64_t>(sizeof(cuda::RowRule)))
    ROTE_RETURN_IF_ERROR(sample_rules_dev_.Allocate(std::max<size_t>(64, rows) * sizeof(cuda::RowRule)));
  sample_rules_host_.resize(static_cast<size_t>(rows));
  for (int32_t r = 0; r < rows; ++r) {
    const RowSampling& in = sample_rules_[static_cast<size_t>(r)];
    sample_rules_host_[static_cast<size_t>(r)] = {in.temperature, in.top_k, in.top_p, in.uniform};
  }
  ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(sample_rules_dev_.as<void>(), sample_rules_host_.data(),
                                            static_cast<size_t>(rows) * sizeof(cuda::RowRule), cudaMemcpyHostToDevice,
                                            stream_));
  if (step_masks_ != nullptr) {
    ROTE_RETURN_IF_ERROR(LaunchMasks(rows));
    // Every row greedy (constrained requests decode greedily on a first attempt): the masked
    // rows' argmax, the decode step's own kernel, is the sampler's greedy token and far cheaper.
    bool all_greedy = true;
    for (const cuda::RowRule& r : sample_rules_host_) all_greedy = all_greedy && !(r.temperature > 0.0f);
    if (all_greedy) {
      sampled_by_candidates_ = false;
      ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchArgmax(logits_.as<float>(), rows, cols, greedy_.as<int32_t>(),
                                                   argmax_scratch_.as<void>(), logit_capacity_, stream_));
      ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_out_, greedy_.as<int32_t>(), rows * sizeof(int32_t),
                                                cudaMemcpyDeviceToHost, stream_));
      return OkStatus();
    }
  }
  return SampleAndCopy(rows,
                       tuning_.sample_candidates != 0 && cuda::SampleByCandidates(sample_rules_host_.data(), rows, cols),
                       /*synchronize=*/false);
}

Status CudaBackendImpl::LaunchMasks(int32_t rows) {
  const size_t words = step_masks_->words;
  if (words * 64 < static_cast<size_t>(config_.vocab_size))
    return InvalidArgument("ForwardMasked: " + std::to_string(words) + " mask words for a vocabulary of " +
                           std::to_string(config_.vocab_size));
  const size_t need = static_cast<size_t>(rows) * words;
  if (need > mask_host_words_) {
    // The copy before still reads the old buffer until the stream passes it.
    ROTE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    if (mask_host_ != nullptr) cudaFreeHost(mask_host_);
    mask_host_ = nullptr;
    mask_host_words_ = 0;
    const size_t cap = std::max<size_t>(need, 64 * words);
    ROTE_CUDA_RETURN_IF_ERROR(cudaMallocHost(reinterpret_cast<void**>(&mask_host_), cap * sizeof(uint64_t)));
    mask_host_words_ = cap;
    // The words, then one int a row for LaunchApplyTokenMask's flags (a row holds >= 1 word).
    ROTE_RETURN_IF_ERROR(mask_dev_.Allocate(cap * sizeof(uint64_t) + cap * sizeof(int32_t)));
  }
  // The forward pass of this step is in flight on the stream; the host writes the masks now.
  // The stream's previous step copied out of mask_host_ long before (every step synchronizes).
  step_masks_->fill(mask_host_);
  ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(mask_dev_.as<void>(), mask_host_, need * sizeof(uint64_t),
                                            cudaMemcpyHostToDevice, stream_));
  ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchApplyTokenMask(logits_.as<float>(), rows, config_.vocab_size,
                                                       mask_dev_.as<uint64_t>(), static_cast<int64_t>(words),
                                                       reinterpret_cast<int32_t*>(mask_dev_.as<uint64_t>() + mask_host_words_),
                                                       stream_));
  return OkStatus();
}

Status CudaBackendImpl::SampleAndCopy(int32_t rows, bool by_candidates, bool synchronize) {
  sampled_by_candidates_ = by_candidates;
  ROTE_CUDA_RETURN_IF_ERROR(cuda::SampleRows(logits_.as<float>(), rows, config_.vocab_size,
                                             sample_rules_dev_.as<cuda::RowRule>(), greedy_.as<int32_t>(),
                                             sample_scratch_.as<void>(), static_cast<int64_t>(sample_scratch_.bytes()),
                                             stream_, by_candidates));
  ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_out_, greedy_.as<int32_t>(), static_cast<size_t>(rows) * sizeof(int32_t),
                                            cudaMemcpyDeviceToHost, stream_));
  if (by_candidates)
    ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(static_cast<int32_t*>(host_out_) + rows,
                                              cuda::SampleRowsOverflow(sample_scratch_.as<void>()), sizeof(int32_t),
                                              cudaMemcpyDeviceToHost, stream_));
  if (synchronize) ROTE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return OkStatus();
}

}  // namespace rote::inference::cuda_impl

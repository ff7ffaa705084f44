// The CUDA backend's weights on the device: each matrix's rows permuted into lane order and
// zero-padded (kernels.h), q|k|v in rotary pair order, gate|up interleaved; the fast profile's
// tile copies (fast_tiles.h); norms, biases and the rotary tables.
#include "inference/cuda/backend_impl.h"

namespace rote::inference::cuda_impl {

Status CudaBackendImpl::Init() {
  DeviceScope scope(options_.device);
  ROTE_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  cudaDeviceProp prop{};
  ROTE_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, options_.device));
  device_name_ = "cuda:" + std::to_string(options_.device) + " " + prop.name;
  // The fast profile's sums are the tensor cores' accumulation, which is the architecture's:
  // its name carries the compute capability, so provenance tells runs that may differ apart.
  if (fast_) profile_name_ = "fast5-sm" + std::to_string(prop.major) + std::to_string(prop.minor);
  ROTE_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));

  const ModelConfig& c = config_;
  if (c.head_dim > 256 || c.head_dim % 8 != 0)
    return InvalidArgument("CUDA backend: head_dim " + std::to_string(c.head_dim) +
                           " unsupported (needs a multiple of 8, at most 256)");
  max_positions_ = options_.max_positions > 0 ? options_.max_positions
                                              : std::min<int32_t>(c.max_position_embeddings, 32768);
  if (max_positions_ <= 0) max_positions_ = 32768;
  if (cuda::AttentionSharedBytes(max_positions_) > static_cast<int64_t>(prop.sharedMemPerBlockOptin) - 4096)
    return InvalidArgument("CUDA backend: max_positions " + std::to_string(max_positions_) +
                           " exceeds what attention holds in shared memory on " + prop.name);
  ROTE_CUDA_RETURN_IF_ERROR(cuda::PrepareAttention(max_positions_));

  const ModelWeights& w = model_->weights();
  // The weights' host-side layout runs on every core (rows are independent; the same bytes
  // whatever the threads): the 1.5B shape's upload took 4.7-7.6 s element by element on one.
  upload_pool_ = std::make_unique<ThreadPool>(
      static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1u, 32u)));
  const int64_t dim = c.hidden_size, q_dim = c.q_dim(), kv_dim = c.kv_dim(), hidden = c.intermediate_size;
  layers_.resize(c.num_layers);
  family_path_ = NeedsFamilyPath(c, max_positions_);
  if (family_path_) ROTE_RETURN_IF_ERROR(InitFamilyLayers());
  for (int32_t i = 0; i < (family_path_ ? 0 : c.num_layers); ++i) {
    const LayerWeights& lw = w.layers[i];
    DeviceLayer& dl = layers_[i];
    // q|k|v in rotary pair order (kernels.h, RopePairRow), biases likewise.
    std::vector<int64_t> qkv_rows(static_cast<size_t>(q_dim + 2 * kv_dim));
    for (int64_t row = 0; row < q_dim + 2 * kv_dim; ++row)
      qkv_rows[row] = row < q_dim + kv_dim ? row / c.head_dim * c.head_dim +
                                                 cuda::RopePairRow(static_cast<int32_t>(row % c.head_dim), c.head_dim)
                                           : row;
    auto r = UploadMatrix({{&lw.wq, 0, 1}, {&lw.wk, q_dim, 1}, {&lw.wv, q_dim + kv_dim, 1}}, q_dim + 2 * kv_dim,
                          dim, &qkv_rows);
    if (!r.ok()) return r.status();
    dl.wqkv = *r;
    r = UploadMatrix({{&lw.wo, 0, 1}}, dim, q_dim);
    if (!r.ok()) return r.status();
    dl.wo = *r;
    // gate row n -> 2n, up row n -> 2n + 1: one warp holds both for the SiLU epilogue.
    r = UploadMatrix({{&lw.w_gate, 0, 2}, {&lw.w_up, 1, 2}}, 2 * hidden, dim);
    if (!r.ok()) return r.status();
    dl.wgu = *r;
    r = UploadMatrix({{&lw.w_down, 0, 1}}, dim, hidden);
    if (!r.ok()) return r.status();
    dl.wdown = *r;
    if (lw.bq.present()) {
      auto b = UploadVector({&lw.bq, &lw.bk, &lw.bv}, &qkv_rows);
      if (!b.ok()) return b.status();
      dl.bqkv = *b;
    }
    auto v = UploadLaneRow(lw.attn_norm);
    if (!v.ok()) return v.status();
    dl.attn_norm = *v;
    v = UploadLaneRow(lw.mlp_norm);
    if (!v.ok()) return v.status();
    dl.mlp_norm = *v;
    if (lw.q_norm.present()) {
      v = UploadVector({&lw.q_norm});
      if (!v.ok()) return v.status();
      dl.q_norm = *v;
      v = UploadVector({&lw.k_norm});
      if (!v.ok()) return v.status();
      dl.k_norm = *v;
    }
  }
  auto e = UploadMatrix({{&w.embed, 0, 1}}, c.vocab_size, dim, nullptr, /*keep_rows=*/true);
  if (!e.ok()) return e.status();
  embed_ = *e;
  if (w.lm_head.data == w.embed.data) {
    lm_head_ = embed_;
  } else {
    auto l = UploadMatrix({{&w.lm_head, 0, 1}}, c.vocab_size, dim);
    if (!l.ok()) return l.status();
    lm_head_ = *l;
  }
  upload_pool_.reset();
  if (!family_path_) {  // (InitFamilyLayers uploaded the family's)
    auto fn = UploadLaneRow(w.final_norm);
    if (!fn.ok()) return fn.status();
    final_norm_ = *fn;
  }
  if (fast_) {
    bool bf16 = lm_head_.type == cuda::WeightType::kBF16;
    for (const DeviceLayer& dl : layers_)
      for (const DeviceMatrix* m : {&dl.wqkv, &dl.wo, &dl.wgu, &dl.wdown}) bf16 = bf16 && m->type == cuda::WeightType::kBF16;
    if (!bf16)
      return InvalidArgument("CUDA backend: the fast numerics profile needs bf16 weights (the tensor cores' products "
                             "are exact only for them); this model's are not: use the exact profile");
  }

  const numerics::RopeTable rope = numerics::BuildRopeTable(c, max_positions_);
  auto rc = UploadFloats(rope.cos);
  if (!rc.ok()) return rc.status();
  rope_cos_ = *rc;
  auto rs = UploadFloats(rope.sin);
  if (!rs.ok()) return rs.status();
  rope_sin_ = *rs;
  scale_ = family_path_ ? c.scale() : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  ROTE_RETURN_IF_ERROR(AllocateZeroed(&mlp_barrier_, 2 * sizeof(uint32_t)));
  ROTE_RETURN_IF_ERROR(AllocateZeroed(&step_barrier_, sizeof(unsigned long long)));
  ROTE_RETURN_IF_ERROR(split_scratch_.Allocate(static_cast<size_t>(kSplitScratchFloats) * sizeof(float)));
  ROTE_RETURN_IF_ERROR(AllocateZeroed(&split_tickets_, static_cast<size_t>(kSplitTickets) * sizeof(uint32_t)));
  return OkStatus();
}

int64_t CudaBackendImpl::WeightBytesPerStep() const {
  auto bytes = [&](const DeviceMatrix& m) {
    const int64_t rows = fast_ ? cuda::FastTileRowsPadded(m.rows) : m.rows;
    return rows * m.cols_padded * WeightTypeSize(m.type);
  };
  int64_t total = bytes(lm_head_);
  for (const DeviceLayer& dl : layers_) {
    total += bytes(dl.wqkv) + bytes(dl.wo) + bytes(dl.wgu) + bytes(dl.wdown);
    // A mixture of experts: the router and one token's experts (rows only: no tile padding).
    if (dl.router.rows > 0) {
      const int64_t experts = config_.num_experts, k = config_.experts_per_token;
      auto rows_bytes = [](const DeviceMatrix& m) { return int64_t{m.rows} * m.cols_padded * WeightTypeSize(m.type); };
      total += bytes(dl.router) + (rows_bytes(dl.experts_gu) + rows_bytes(dl.experts_down)) / experts * k;
    }
  }
  return total;
}

StatusOr<DeviceMatrix> CudaBackendImpl::UploadMatrix(std::vector<MatrixPart> parts, int64_t rows, int64_t cols,
                                                     const std::vector<int64_t>* row_order, bool keep_rows,
                                                     bool with_tiles) {
  DType dtype = parts[0].view->dtype;
  for (const MatrixPart& p : parts) {
    if (!p.view->present()) return InvalidArgument("CUDA backend: missing tensor for a fused matrix");
    if (p.view->shape.size() != 2 || p.view->shape[1] != cols)
      return InvalidArgument("CUDA backend: tensor " + p.view->name + " has an unexpected shape");
    if (p.view->dtype != dtype) dtype = DType::kF32;
  }
  const WeightType wt = ToWeightType(dtype);
  const int esize = WeightTypeSize(wt);
  const int64_t padded = cuda::PaddedCols(cols);
  std::vector<uint8_t> host(static_cast<size_t>(rows * padded * esize), 0);
  // Rows are independent: split over the upload's pool (each writes only its own device row).
  for (const MatrixPart& p : parts) {
    const int64_t src_rows = p.view->shape[0];
    const int src_size = DTypeSize(p.view->dtype);
    upload_pool_->ParallelFor(src_rows, [&](int64_t begin, int64_t end) {
      std::vector<float> row_f32;
      for (int64_t r = begin; r < end; ++r) {
        const int64_t logical = p.first_row + r * p.row_step;
        const int64_t row = row_order != nullptr ? (*row_order)[logical] : logical;
        uint8_t* dst = host.data() + row * padded * esize;
        if (p.view->dtype == dtype) {
          cuda::RowToLaneOrder(static_cast<const uint8_t*>(p.view->data) + r * cols * src_size, cols, esize, dst);
        } else {
          row_f32.resize(static_cast<size_t>(cols));
          p.view->RowToF32(r, row_f32.data());
          cuda::RowToLaneOrder(reinterpret_cast<const uint8_t*>(row_f32.data()), cols, 4, dst);
        }
      }
    });
  }
  DeviceMatrix m;
  if (!fast_ || keep_rows || !with_tiles) {
    auto& buf = buffers_.emplace_back(std::make_unique<DeviceBuffer>());
    ROTE_RETURN_IF_ERROR(buf->Allocate(host.size()));
    ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpy(buf->as<void>(), host.data(), host.size(), cudaMemcpyHostToDevice));
    weight_bytes_ += static_cast<int64_t>(host.size());
    m.data = buf->as<void>();
  }
  if (fast_ && with_tiles && wt == cuda::WeightType::kBF16) {
    // The fast profile's products read only the tile copy (fast_tiles.h).
    const std::vector<uint16_t> tiles =
        cuda::FastTilesOnPool(reinterpret_cast<const uint16_t*>(host.data()), rows, padded, upload_pool_.get());
    auto& tbuf = buffers_.emplace_back(std::make_unique<DeviceBuffer>());
    ROTE_RETURN_IF_ERROR(tbuf->Allocate(tiles.size() * sizeof(uint16_t)));
    ROTE_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(tbuf->as<void>(), tiles.data(), tiles.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
    weight_bytes_ += static_cast<int64_t>(tiles.size() * sizeof(uint16_t));
    m.fast_tiles = tbuf->as<void>();
  }
  m.type = wt;
  m.rows = static_cast<int32_t>(rows);
  m.cols = static_cast<int32_t>(cols);
  m.cols_padded = static_cast<int32_t>(padded);
  return m;
}

StatusOr<const float*> CudaBackendImpl::UploadVector(std::vector<const TensorView*> views,
                                                     const std::vector<int64_t>* order) {
  std::vector<float> host;
  for (const TensorView* v : views) {
    if (!v->present()) return InvalidArgument("CUDA backend: missing vector tensor");
    for (int64_t i = 0; i < v->numel(); ++i) host.push_back(v->At(i));
  }
  if (order != nullptr) {
    if (order->size() != host.size()) return InvalidArgument("CUDA backend: bias length does not match its matrix");
    std::vector<float> moved(host.size());
    for (size_t i = 0; i < host.size(); ++i) moved[(*order)[i]] = host[i];
    host.swap(moved);
  }
  return UploadFloats(host);
}

StatusOr<const float*> CudaBackendImpl::UploadLaneRow(const TensorView& view, float offset) {
  if (!view.present()) return InvalidArgument("CUDA backend: missing norm weight");
  std::vector<float> host(static_cast<size_t>(cuda::PaddedCols(view.numel())), 0.0f);
  for (int64_t i = 0; i < view.numel(); ++i)
    host[cuda::PermutedIndex(i)] = offset != 0.0f ? offset + view.At(i) : view.At(i);
  return UploadFloats(host);
}

StatusOr<const float*> CudaBackendImpl::UploadFloats(const std::vector<float>& host) {
  auto& buf = buffers_.emplace_back(std::make_unique<DeviceBuffer>());
  ROTE_RETURN_IF_ERROR(buf->Allocate(host.size() * sizeof(float)));
  ROTE_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(buf->as<void>(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  return static_cast<const float*>(buf->as<float>());
}

}  // namespace rote::inference::cuda_impl

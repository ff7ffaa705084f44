// Device entry points outside a backend: the argmax and the sampler alone (tests compare them
// with the host's rules), and the reading of a step's kernel timeline.
#include "inference/cuda/backend_impl.h"

namespace rote::inference {
namespace cuda_impl {

// A step's kernel timeline (cuda::KernelTimeline in device memory) as launches ordered by their
// first wait (CudaBackend::KernelTimeline).
std::vector<CudaKernelTime> ReadKernelTimeline(const void* device) {
  if (device == nullptr) return {};
  auto host = std::make_unique<cuda::KernelTimeline>();
  if (cudaMemcpy(host.get(), device, sizeof(cuda::KernelTimeline), cudaMemcpyDeviceToHost) != cudaSuccess) return {};
  std::map<unsigned long long, CudaKernelTime> by_grid;  // one launch per grid id
  for (int sm = 0; sm < cuda::kTimelineMaxSms; ++sm) {
    const uint32_t n = std::min<uint32_t>(host->cursor[sm], cuda::kTimelineRecordsPerSm);
    for (uint32_t i = 0; i < n; ++i) {
      const cuda::KernelTimelineRecord& r = host->log[sm][i];
      auto [it, fresh] = by_grid.try_emplace(r.grid, CudaKernelTime{r.kind, r.blocks, INT64_MAX, INT64_MAX, 0, 0, 0, {}, {}});
      CudaKernelTime& k = it->second;
      k.start_ns = std::min(k.start_ns, static_cast<int64_t>(r.start));
      k.first_wait_ns = std::min(k.first_wait_ns, static_cast<int64_t>(r.waited));
      k.last_wait_ns = std::max(k.last_wait_ns, static_cast<int64_t>(r.waited));
      k.end_ns = std::max(k.end_ns, static_cast<int64_t>(r.end));
      ++k.blocks_recorded;
      if (fresh)
        for (int p = 0; p < cuda::kTimelinePoints; ++p) {
          const int g = static_cast<int>(r.grid % cuda::kTimelinePointGrids);
          k.point_first_ns[p] = host->point_last[g][p] == 0 ? 0 : static_cast<int64_t>(~host->point_not_first[g][p]);
          k.point_last_ns[p] = static_cast<int64_t>(host->point_last[g][p]);
        }
    }
  }
  std::vector<std::pair<unsigned long long, CudaKernelTime>> order(by_grid.begin(), by_grid.end());
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::tie(a.second.first_wait_ns, a.second.start_ns) < std::tie(b.second.first_wait_ns, b.second.start_ns);
  });
  // The late blocks (CudaKernelTime): a second pass, once the kernels' order and ends are known.
  std::map<unsigned long long, int64_t> previous_end;  // by grid: the end of the kernel before it
  for (size_t i = 1; i < order.size(); ++i) previous_end[order[i].first] = order[i - 1].second.end_ns;
  std::map<unsigned long long, int64_t> late_sum;
  for (int sm = 0; sm < cuda::kTimelineMaxSms; ++sm) {
    const uint32_t n = std::min<uint32_t>(host->cursor[sm], cuda::kTimelineRecordsPerSm);
    for (uint32_t i = 0; i < n; ++i) {
      const cuda::KernelTimelineRecord& r = host->log[sm][i];
      const auto prev = previous_end.find(r.grid);
      if (prev == previous_end.end() || static_cast<int64_t>(r.start) <= prev->second) continue;
      CudaKernelTime& k = by_grid.at(r.grid);
      const int64_t prologue = static_cast<int64_t>(r.waited) - static_cast<int64_t>(r.start);
      ++k.late_blocks;
      k.late_prologue_max_ns = std::max(k.late_prologue_max_ns, prologue);
      late_sum[r.grid] += prologue;
    }
  }
  std::vector<CudaKernelTime> out;
  for (const auto& [grid, unused] : order) {
    CudaKernelTime& k = by_grid.at(grid);
    if (k.late_blocks > 0) k.late_prologue_mean_ns = late_sum[grid] / k.late_blocks;
    out.push_back(k);
  }
  return out;
}
}  // namespace cuda_impl

using cuda_impl::DeviceBuffer;

StatusOr<std::vector<int32_t>> CudaArgmax(const std::vector<float>& logits, int32_t rows, int32_t cols) {
  if (rows <= 0 || cols <= 0 || logits.size() != static_cast<size_t>(rows) * cols)
    return InvalidArgument("CudaArgmax: logits must hold rows x cols values");
  DeviceBuffer d_logits, d_out, d_scratch;
  ROTE_RETURN_IF_ERROR(d_logits.Allocate(logits.size() * sizeof(float)));
  ROTE_RETURN_IF_ERROR(d_out.Allocate(static_cast<size_t>(rows) * sizeof(int32_t)));
  ROTE_RETURN_IF_ERROR(d_scratch.Allocate(static_cast<size_t>(cuda::ArgmaxScratchBytes(rows))));
  ROTE_CUDA_RETURN_IF_ERROR(cudaMemset(d_scratch.as<void>(), 0, d_scratch.bytes()));
  ROTE_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(d_logits.as<void>(), logits.data(), logits.size() * sizeof(float), cudaMemcpyHostToDevice));
  for (int round = 0; round < 2; ++round)  // twice: the tickets must be ready again after a launch
    ROTE_CUDA_RETURN_IF_ERROR(
        cuda::LaunchArgmax(d_logits.as<float>(), rows, cols, d_out.as<int32_t>(), d_scratch.as<void>(), rows, nullptr));
  ROTE_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  std::vector<int32_t> out(static_cast<size_t>(rows));
  ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpy(out.data(), d_out.as<void>(), out.size() * sizeof(int32_t), cudaMemcpyDeviceToHost));
  return out;
}
StatusOr<std::vector<int32_t>> CudaSampleRows(const std::vector<float>& logits, int32_t rows, int32_t cols,
                                              const std::vector<RowSampling>& rules, int candidates, int* path) {
  if (rows <= 0 || cols <= 0 || logits.size() != static_cast<size_t>(rows) * cols || rules.size() != static_cast<size_t>(rows))
    return InvalidArgument("CudaSampleRows: logits must hold rows x cols values and rules one per row");
  if (!cuda::CanSampleRows(rows, cols)) return InvalidArgument("CudaSampleRows: too many rows or columns");
  DeviceBuffer d_logits, d_rules, d_out, d_scratch;
  ROTE_RETURN_IF_ERROR(d_logits.Allocate(logits.size() * sizeof(float)));
  ROTE_RETURN_IF_ERROR(d_rules.Allocate(rules.size() * sizeof(cuda::RowRule)));
  ROTE_RETURN_IF_ERROR(d_out.Allocate(static_cast<size_t>(rows) * sizeof(int32_t)));
  ROTE_RETURN_IF_ERROR(d_scratch.Allocate(static_cast<size_t>(cuda::SampleRowsScratchBytes(rows, cols))));
  ROTE_CUDA_RETURN_IF_ERROR(cudaMemset(d_scratch.as<void>(), 0, d_scratch.bytes()));
  std::vector<cuda::RowRule> host_rules;
  for (const RowSampling& r : rules) host_rules.push_back({r.temperature, r.top_k, r.top_p, r.uniform});
  ROTE_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(d_logits.as<void>(), logits.data(), logits.size() * sizeof(float), cudaMemcpyHostToDevice));
  ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpy(d_rules.as<void>(), host_rules.data(), host_rules.size() * sizeof(cuda::RowRule),
                                       cudaMemcpyHostToDevice));
  const bool by_candidates = candidates != 0 && cuda::SampleByCandidates(host_rules.data(), rows, cols);
  int taken = by_candidates ? 1 : 0;
  ROTE_CUDA_RETURN_IF_ERROR(cuda::SampleRows(d_logits.as<float>(), rows, cols, d_rules.as<cuda::RowRule>(),
                                             d_out.as<int32_t>(), d_scratch.as<void>(),
                                             static_cast<int64_t>(d_scratch.bytes()), nullptr, by_candidates));
  ROTE_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  if (by_candidates) {
    int32_t overflow = 0;
    ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpy(&overflow, cuda::SampleRowsOverflow(d_scratch.as<void>()), sizeof(overflow),
                                         cudaMemcpyDeviceToHost));
    if (overflow != 0) {
      taken = 2;
      ROTE_CUDA_RETURN_IF_ERROR(cuda::SampleRows(d_logits.as<float>(), rows, cols, d_rules.as<cuda::RowRule>(),
                                                 d_out.as<int32_t>(), d_scratch.as<void>(),
                                                 static_cast<int64_t>(d_scratch.bytes()), nullptr, false));
      ROTE_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
    }
  }
  if (path != nullptr) *path = taken;
  std::vector<int32_t> out(static_cast<size_t>(rows));
  ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpy(out.data(), d_out.as<void>(), out.size() * sizeof(int32_t), cudaMemcpyDeviceToHost));
  return out;
}
}  // namespace rote::inference

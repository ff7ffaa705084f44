// Decode steps replay one captured CUDA graph per step shape (GraphKey); greedy runs chain
// graph replays on the device; benchmarks replay the last graph back to back.
#include "inference/cuda/backend_impl.h"

namespace rote::inference::cuda_impl {

StatusOr<double> CudaBackendImpl::TimeLastGraph(int32_t replays) {
  DeviceScope scope(options_.device);
  if (last_graph_ == nullptr) return FailedPrecondition("the last step ran without a CUDA graph");
  if (replays < 1) return InvalidArgument("replays must be at least 1");
  cudaEvent_t start = nullptr, end = nullptr;
  ROTE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
  ROTE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&end));
  cudaError_t e = cudaEventRecord(start, stream_);
  for (int32_t i = 0; e == cudaSuccess && i < replays; ++i) e = cudaGraphLaunch(last_graph_, stream_);
  if (e == cudaSuccess) e = cudaEventRecord(end, stream_);
  if (e == cudaSuccess) e = cudaEventSynchronize(end);
  float ms = 0.0f;
  if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, start, end);
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  ROTE_CUDA_RETURN_IF_ERROR(e);
  return 1e-3 * ms / replays;
}

Status CudaBackendImpl::ForwardGreedySteps(const BatchPlan& plan, int32_t steps, std::vector<int32_t>* tokens) {
  DeviceScope scope(options_.device);
  if (steps < 1) return InvalidArgument("ForwardGreedySteps: steps must be positive, got " + std::to_string(steps));
  for (const SequenceStep& st : plan.sequences)
    if (st.num_logits != 1) return InvalidArgument("ForwardGreedySteps: every sequence needs num_logits 1");
  tokens->clear();
  const size_t rows = plan.sequences.size();
  BatchPlan cur = plan;
  std::vector<int32_t> fed(rows);
  for (int32_t done = 0; done < steps;) {
    const int32_t run = ChainableSteps(cur, steps - done);
    if (run > 1) {
      const size_t need = static_cast<size_t>(run) * rows * sizeof(int32_t);
      if (chain_tokens_.bytes() < need) {
        ROTE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
        ROTE_RETURN_IF_ERROR(chain_tokens_.Allocate(need));
      }
    }
    chain_steps_ = run;
    Status s = Step(cur, /*greedy=*/true);
    chain_steps_ = 1;
    if (!s.ok()) return s;
    const int32_t* out = static_cast<const int32_t*>(host_out_);
    tokens->insert(tokens->end(), out, out + static_cast<size_t>(run) * rows);
    done += run;
    for (size_t r = 0; r < rows; ++r) {
      SequenceStep& st = cur.sequences[r];
      st.start_pos += static_cast<int32_t>(st.tokens.size()) + run - 1;
      fed[r] = tokens->at(tokens->size() - rows + r);
      st.tokens = std::span<const int32_t>(&fed[r], 1);
    }
  }
  return OkStatus();
}

int32_t CudaBackendImpl::ChainableSteps(const BatchPlan& plan, int32_t want) const {
  if (want <= 1 || !options_.use_graphs || plan.sequences.empty()) return 1;
  int32_t first_len = 0;
  int64_t run = std::min<int64_t>(want, config_.vocab_size);  // host_out_ holds a row of logits per row
  for (const SequenceStep& s : plan.sequences) {
    if (s.tokens.size() != 1 || s.num_logits != 1 || s.start_pos < 0) return 1;
    first_len = std::max(first_len, s.start_pos + 1);
  }
  int32_t bucket = 256;
  while (bucket < first_len) bucket *= 2;
  bucket = std::min(bucket, max_positions_);
  // A one-token step's graph holds the attention-in-parts code or not by its first step's length
  // (PrepareDecodeStep): a run stays on one side of that length, as separate steps would.
  const int32_t split = tuning_.step_attention_split;
  if (plan.sequences.size() == 1 && split > 0 && first_len < split) run = std::min<int64_t>(run, split - first_len);
  for (const SequenceStep& s : plan.sequences) {
    const int64_t covered = static_cast<int64_t>(s.block_table.size()) * kKvBlockSize;
    run = std::min<int64_t>(run, std::min<int64_t>(bucket, covered) - s.start_pos);
    for (int64_t b = s.start_pos / kKvBlockSize; b < static_cast<int64_t>(s.block_table.size()) &&
                                                 b * kKvBlockSize < s.start_pos + run; ++b)
      if (s.block_table[b] < 0 || s.block_table[b] >= num_blocks_) run = std::min<int64_t>(run, b * kKvBlockSize - s.start_pos);
  }
  return static_cast<int32_t>(std::max<int64_t>(run, 1));
}

void CudaBackendImpl::DropGraphs() {
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
  last_graph_ = nullptr;
}

Status CudaBackendImpl::LaunchStep(const StepLayout& lay, bool greedy, const cuda::DecodeStepArgs* decode_step, bool use_graph,
                                   bool step_in_parts) {
  if (!use_graph) {
    ROTE_RETURN_IF_ERROR(Launch(lay, greedy, decode_step));
    last_graph_ = nullptr;
    return OkStatus();
  }
  const GraphKey key{lay.tokens, lay.context, greedy, step_in_parts};
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    cudaGraph_t graph = nullptr;
    ROTE_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    Status s = Launch(lay, greedy, decode_step);
    cudaError_t end = cudaStreamEndCapture(stream_, &graph);
    if (!s.ok()) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      return s;
    }
    ROTE_CUDA_RETURN_IF_ERROR(end);
    cudaGraphExec_t exec = nullptr;
    cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    ROTE_CUDA_RETURN_IF_ERROR(inst);
    it = graphs_.emplace(key, exec).first;
  }
  ROTE_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(it->second, stream_));
  last_graph_ = it->second;
  return OkStatus();
}

}  // namespace rote::inference::cuda_impl

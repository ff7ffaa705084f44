// Several engines over one model, one per device (`--device cuda:all`, `cuda:0,1`), behind the
// Engine's request interface. Each request runs whole on one engine, the one with the fewest
// requests outstanding when it is submitted. With the exact profile every device computes the
// same bits as the CPU, so where a request runs never changes its tokens (docs/inference.md,
// "Several GPUs"); what the group changes is how many requests run at once.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "inference/engine.h"

namespace rote::inference {

// Where a model runs: the CPU, or a set of CUDA devices.
struct DeviceSet {
  Device device = Device::kCpu;
  std::vector<int> cuda_devices;  // ordinals, in the order given; empty with all_cuda
  bool all_cuda = false;          // every CUDA device the machine has (resolved at Load)
};

// "cpu", "cuda" (device 0), "cuda:N", "cuda:N,M,..." (distinct ordinals) or "cuda:all".
// Anything else is INVALID_ARGUMENT naming the forms.
Status ParseDeviceSet(std::string_view name, DeviceSet* out);

// The canonical name of a set: "cpu", "cuda:0", "cuda:0,1".
std::string DeviceSetName(const DeviceSet& set);

class EngineGroup {
 public:
  // Reads the model directory once and starts an engine on each device of `devices` (the
  // backends upload the one host copy of the weights in parallel). `options.device` and
  // `options.cuda_device` are set per engine; the rest applies to each (kv_cache_bytes is per
  // device). "cuda:all" on a machine without CUDA devices is FAILED_PRECONDITION.
  static StatusOr<std::unique_ptr<EngineGroup>> Load(const std::string& model_dir, const DeviceSet& devices,
                                                     const EngineOptions& options);
  // Over engines made by the caller (tests use several CPU engines). At least one; all over
  // models with the same digest.
  static StatusOr<std::unique_ptr<EngineGroup>> Create(std::vector<std::unique_ptr<Engine>> engines);
  ~EngineGroup();
  EngineGroup(const EngineGroup&) = delete;
  EngineGroup& operator=(const EngineGroup&) = delete;

  // Engine's contract, with ids of the group's own.
  StatusOr<RequestId> Submit(GenerationRequest request);
  // All or nothing, as Engine::SubmitAll: the requests are spread over the engines (each engine
  // takes its share together); when one is refused none runs and the error starts with
  // "request i: ", i its index in `requests`.
  StatusOr<std::vector<RequestId>> SubmitAll(std::vector<GenerationRequest> requests);
  void Cancel(RequestId id);
  StatusOr<GenerationResult> Wait(RequestId id);

  // The first engine (all share the model, tokenizer and profile).
  Engine& primary() const { return *engines_.front(); }
  int size() const { return static_cast<int>(engines_.size()); }
  Engine& engine(int i) const { return *engines_[static_cast<size_t>(i)]; }
  // The engines' devices joined with ',' ("cuda:0,cuda:1"); a result's Provenance::device says
  // which one ran it.
  std::string device() const;
  int32_t kv_blocks() const;       // summed over the engines
  int64_t kv_cache_bytes() const;  // summed
  EngineStats stats() const;       // summed (steps, tokens, seconds, batch sizes, blocks, queues)

 private:
  explicit EngineGroup(std::vector<std::unique_ptr<Engine>> engines);
  struct Routed {
    int engine = 0;
    RequestId id = 0;
  };
  // The engine with the fewest outstanding requests (the lowest index among equals).
  int LeastLoaded() const;  // mu_ held

  std::vector<std::unique_ptr<Engine>> engines_;
  mutable std::mutex mu_;
  std::vector<int64_t> outstanding_;  // per engine: submitted, not yet waited for
  std::unordered_map<RequestId, Routed> routes_;
  RequestId next_id_ = 1;
};

}  // namespace rote::inference

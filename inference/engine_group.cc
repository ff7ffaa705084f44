#include "inference/engine_group.h"

#include <algorithm>
#include <charconv>
#include <thread>

#include "inference/cuda/cuda_backend.h"

namespace rote::inference {

Status ParseDeviceSet(std::string_view name, DeviceSet* out) {
  const auto bad = [&] {
    return InvalidArgument("unknown device '" + std::string(name) +
                           "': use cpu, cuda, cuda:N, cuda:N,M,... (distinct device ordinals) or cuda:all");
  };
  DeviceSet set;
  if (name == "cpu") {
    *out = set;
    return OkStatus();
  }
  if (name.substr(0, 4) != "cuda") return bad();
  set.device = Device::kCuda;
  std::string_view rest = name.substr(4);
  if (rest.empty()) {
    set.cuda_devices = {0};
    *out = set;
    return OkStatus();
  }
  if (rest[0] != ':' || rest.size() < 2) return bad();
  rest.remove_prefix(1);
  if (rest == "all") {
    set.all_cuda = true;
    *out = set;
    return OkStatus();
  }
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    // Decimal digits without a sign, at most 4 of them (ordinals are small).
    if (item.empty() || item.size() > 4) return bad();
    for (char ch : item)
      if (ch < '0' || ch > '9') return bad();
    int ordinal = 0;
    std::from_chars(item.data(), item.data() + item.size(), ordinal);
    if (std::find(set.cuda_devices.begin(), set.cuda_devices.end(), ordinal) != set.cuda_devices.end())
      return InvalidArgument("device '" + std::string(name) + "' names cuda:" + std::to_string(ordinal) + " twice");
    set.cuda_devices.push_back(ordinal);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  *out = set;
  return OkStatus();
}

std::string DeviceSetName(const DeviceSet& set) {
  if (set.device == Device::kCpu) return "cpu";
  if (set.all_cuda) return "cuda:all";
  std::string s = "cuda:";
  for (size_t i = 0; i < set.cuda_devices.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(set.cuda_devices[i]);
  }
  return s;
}

EngineGroup::EngineGroup(std::vector<std::unique_ptr<Engine>> engines)
    : engines_(std::move(engines)), outstanding_(engines_.size(), 0) {}

EngineGroup::~EngineGroup() = default;

StatusOr<std::unique_ptr<EngineGroup>> EngineGroup::Create(std::vector<std::unique_ptr<Engine>> engines) {
  if (engines.empty()) return InvalidArgument("an engine group needs at least one engine");
  for (const std::unique_ptr<Engine>& e : engines) {
    if (e == nullptr) return InvalidArgument("an engine group cannot hold a null engine");
    if (e->model().digest() != engines.front()->model().digest())
      return InvalidArgument("the engines of a group must serve the same model (digests " +
                             engines.front()->model().digest() + " and " + e->model().digest() + ")");
    if (e->numerics_profile() != engines.front()->numerics_profile())
      return InvalidArgument("the engines of a group must share a numerics profile");
  }
  return std::unique_ptr<EngineGroup>(new EngineGroup(std::move(engines)));
}

StatusOr<std::unique_ptr<EngineGroup>> EngineGroup::Load(const std::string& model_dir, const DeviceSet& devices,
                                                         const EngineOptions& options) {
  std::vector<int> ordinals = devices.cuda_devices;
  if (devices.device == Device::kCuda && devices.all_cuda) {
    const int count = CudaDeviceCount();
    if (count < 1) return FailedPrecondition("--device cuda:all: this machine has no CUDA device");
    for (int i = 0; i < count; ++i) ordinals.push_back(i);
  }
  if (devices.device == Device::kCuda && ordinals.empty()) return InvalidArgument("an empty CUDA device list");
  ROTE_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, Model::Load(model_dir, options.known_model_digest));
  ROTE_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::Load(model_dir));
  std::vector<std::unique_ptr<Engine>> engines;
  if (devices.device == Device::kCpu) {
    EngineOptions o = options;
    o.device = Device::kCpu;
    ROTE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, Engine::Open(model, tokenizer, o));
    engines.push_back(std::move(e));
    return Create(std::move(engines));
  }
  // One thread per device: each backend uploads the weights and sizes its KV cache on its own
  // device, so loading several takes about as long as loading one.
  std::vector<StatusOr<std::unique_ptr<Engine>>> opened;
  for (size_t i = 0; i < ordinals.size(); ++i) opened.emplace_back(Internal("not opened"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ordinals.size(); ++i) {
    threads.emplace_back([&, i] {
      EngineOptions o = options;
      o.device = Device::kCuda;
      o.cuda_device = ordinals[i];
      opened[i] = Engine::Open(model, tokenizer, o);
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < ordinals.size(); ++i) {
    if (!opened[i].ok()) {
      return Status(opened[i].status().code(),
                    "cuda:" + std::to_string(ordinals[i]) + ": " + std::string(opened[i].status().message()));
    }
    engines.push_back(std::move(*opened[i]));
  }
  return Create(std::move(engines));
}

int EngineGroup::LeastLoaded() const {
  int best = 0;
  for (int i = 1; i < static_cast<int>(outstanding_.size()); ++i) {
    if (outstanding_[static_cast<size_t>(i)] < outstanding_[static_cast<size_t>(best)]) best = i;
  }
  return best;
}

StatusOr<RequestId> EngineGroup::Submit(GenerationRequest request) {
  int e = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    e = LeastLoaded();
    ++outstanding_[static_cast<size_t>(e)];
  }
  StatusOr<RequestId> id = engines_[static_cast<size_t>(e)]->Submit(std::move(request));
  std::lock_guard<std::mutex> lock(mu_);
  if (!id.ok()) {
    --outstanding_[static_cast<size_t>(e)];
    return id.status();
  }
  const RequestId mine = next_id_++;
  routes_[mine] = Routed{e, *id};
  return mine;
}

StatusOr<std::vector<RequestId>> EngineGroup::SubmitAll(std::vector<GenerationRequest> requests) {
  const size_t n = requests.size();
  std::vector<int> engine_of(n, 0);
  std::vector<std::vector<size_t>> share(engines_.size());  // indexes into `requests`, in order
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < n; ++i) {
      engine_of[i] = LeastLoaded();
      ++outstanding_[static_cast<size_t>(engine_of[i])];
      share[static_cast<size_t>(engine_of[i])].push_back(i);
    }
  }
  std::vector<std::vector<RequestId>> local(engines_.size());
  Status failure = OkStatus();
  for (size_t e = 0; e < engines_.size() && failure.ok(); ++e) {
    if (share[e].empty()) continue;
    std::vector<GenerationRequest> part;
    part.reserve(share[e].size());
    for (size_t i : share[e]) part.push_back(std::move(requests[i]));
    StatusOr<std::vector<RequestId>> ids = engines_[e]->SubmitAll(std::move(part));
    if (ids.ok()) {
      local[e] = std::move(*ids);
      continue;
    }
    // The engine names its own index ("request j: ..."); say the caller's.
    std::string message(ids.status().message());
    size_t j = 0;
    const std::string_view prefix = "request ";
    if (message.compare(0, prefix.size(), prefix) == 0) {
      const char* begin = message.data() + prefix.size();
      const char* end = message.data() + message.size();
      auto [ptr, ec] = std::from_chars(begin, end, j);
      if (ec == std::errc() && j < share[e].size() && ptr != begin) {
        message = "request " + std::to_string(share[e][j]) + std::string(ptr, end);
      }
    }
    failure = Status(ids.status().code(), message);
  }
  if (!failure.ok()) {
    // All or nothing: what other engines queued is cancelled and collected before returning.
    for (size_t e = 0; e < engines_.size(); ++e) {
      for (RequestId id : local[e]) engines_[e]->Cancel(id);
      for (RequestId id : local[e]) (void)engines_[e]->Wait(id);
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < n; ++i) --outstanding_[static_cast<size_t>(engine_of[i])];
    return failure;
  }
  std::vector<RequestId> out(n);
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t e = 0; e < engines_.size(); ++e) {
    for (size_t k = 0; k < share[e].size(); ++k) {
      const RequestId mine = next_id_++;
      routes_[mine] = Routed{static_cast<int>(e), local[e][k]};
      out[share[e][k]] = mine;
    }
  }
  return out;
}

void EngineGroup::Cancel(RequestId id) {
  Routed r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = routes_.find(id);
    if (it == routes_.end()) return;
    r = it->second;
  }
  engines_[static_cast<size_t>(r.engine)]->Cancel(r.id);
}

StatusOr<GenerationResult> EngineGroup::Wait(RequestId id) {
  Routed r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = routes_.find(id);
    if (it == routes_.end()) return NotFound("no request " + std::to_string(id) + " (unknown or already waited for)");
    r = it->second;
    routes_.erase(it);
  }
  StatusOr<GenerationResult> result = engines_[static_cast<size_t>(r.engine)]->Wait(r.id);
  std::lock_guard<std::mutex> lock(mu_);
  --outstanding_[static_cast<size_t>(r.engine)];
  return result;
}

std::string EngineGroup::device() const {
  std::string s;
  for (const std::unique_ptr<Engine>& e : engines_) {
    if (!s.empty()) s += ',';
    s += e->device();
  }
  return s;
}

int32_t EngineGroup::kv_blocks() const {
  int32_t n = 0;
  for (const std::unique_ptr<Engine>& e : engines_) n += e->kv_blocks();
  return n;
}

int64_t EngineGroup::kv_cache_bytes() const {
  int64_t n = 0;
  for (const std::unique_ptr<Engine>& e : engines_) n += e->kv_cache_bytes();
  return n;
}

EngineStats EngineGroup::stats() const {
  EngineStats sum;
  for (const std::unique_ptr<Engine>& e : engines_) {
    const EngineStats s = e->stats();
    sum.steps += s.steps;
    sum.prefill_steps += s.prefill_steps;
    sum.prefill_tokens += s.prefill_tokens;
    sum.generated_tokens += s.generated_tokens;
    sum.prefill_seconds += s.prefill_seconds;
    sum.decode_seconds += s.decode_seconds;
    if (sum.batch_size_steps.size() < s.batch_size_steps.size()) sum.batch_size_steps.resize(s.batch_size_steps.size());
    for (size_t b = 0; b < s.batch_size_steps.size(); ++b) sum.batch_size_steps[b] += s.batch_size_steps[b];
    sum.batch_size_sum += s.batch_size_sum;
    sum.kv_blocks_in_use += s.kv_blocks_in_use;
    sum.waiting += s.waiting;
    sum.running += s.running;
  }
  return sum;
}

}  // namespace rote::inference

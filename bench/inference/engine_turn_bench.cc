// The engine's own time per step, without a model: what the scheduler thread spends between two
// backend calls (planning, KV blocks, prefix bookkeeping, stream decoding, stop checks, the
// callbacks, waking up), at several batch sizes, with and without captured logits. One JSON object
// per line.
//
//   bench_engine_turn [--batches 1,8,32,64] [--steps 256] [--warm 8] [--shape 0.5b|small]
//                     [--dir /tmp/rote_engine_turn_0.5b]
//
// The backend here answers at once: ForwardGreedy returns a token derived from each row's
// position, and Forward writes logits rows whose largest entry is that token. It stands in for a
// GPU, whose step the engine waits on; the engine's code and data paths are the real ones, so this
// measures the host's share of every step ("turn_us" is the window's time outside backend calls,
// per call). A GPU step of the 0.5B shape at batch 32 takes about 880 us (docs/performance.md), so
// each microsecond here is about 0.1% of that step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "bench/inference/call_times.h"
#include "inference/backend.h"
#include "inference/engine.h"
#include "inference/model/synth.h"
#include "inference/model/weights.h"
#include "inference/tokenizer/tokenizer.h"

namespace rote::inference {
namespace {

using Clock = std::chrono::steady_clock;

std::string Arg(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == name) return argv[i + 1];
  return fallback;
}

std::vector<int32_t> IntList(const std::string& s) {
  std::vector<int32_t> out;
  size_t at = 0;
  while (at < s.size()) {
    const size_t comma = s.find(',', at);
    out.push_back(std::stoi(s.substr(at, comma == std::string::npos ? std::string::npos : comma - at)));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// A row's token: a byte token (ids below 256 in the synthesized tokenizer) from the row's position
// and its sequence's first block, so streams differ and the decoder has text to assemble.
int32_t TokenFor(const SequenceStep& st) {
  const uint32_t pos = static_cast<uint32_t>(st.start_pos + st.tokens.size());
  const uint32_t seq = st.block_table.empty() ? 0u : static_cast<uint32_t>(st.block_table[0]);
  return static_cast<int32_t>(((pos * 2654435761u) ^ (seq * 40503u)) >> 24);  // 0..255
}

class InstantBackend final : public Backend {
 public:
  explicit InstantBackend(int32_t vocab) : vocab_(vocab) {}
  std::string device() const override { return "instant"; }
  int64_t KvBytesPerBlock() const override { return 1; }
  Status AllocateKvCache(int32_t) override { return OkStatus(); }
  Status Forward(const BatchPlan& plan, std::vector<float>* logits) override {
    const Clock::time_point t0 = Clock::now();
    size_t rows = 0;
    for (const SequenceStep& st : plan.sequences) rows += static_cast<size_t>(st.num_logits);
    logits->assign(rows * static_cast<size_t>(vocab_), 0.0f);
    size_t r = 0;
    for (const SequenceStep& st : plan.sequences)
      if (st.num_logits > 0) (*logits)[r++ * static_cast<size_t>(vocab_) + static_cast<size_t>(TokenFor(st))] = 1.0f;
    Record(t0);
    return OkStatus();
  }
  Status ForwardGreedy(const BatchPlan& plan, std::vector<int32_t>* tokens) override {
    const Clock::time_point t0 = Clock::now();
    tokens->clear();
    for (const SequenceStep& st : plan.sequences)
      if (st.num_logits > 0) tokens->push_back(TokenFor(st));
    Record(t0);
    return OkStatus();
  }
  rote::bench::CallTimes& calls() { return calls_; }

 private:
  void Record(Clock::time_point t0) { calls_.Record(t0); }
  int32_t vocab_;
  rote::bench::CallTimes calls_;
};

int Main(int argc, char** argv) {
  const std::string shape = Arg(argc, argv, "--shape", "0.5b");
  const std::string dir = Arg(argc, argv, "--dir", "/tmp/rote_engine_turn_" + shape);
  const std::vector<int32_t> batches = IntList(Arg(argc, argv, "--batches", "1,8,32,64"));
  const int32_t steps = std::stoi(Arg(argc, argv, "--steps", "256"));
  const int32_t warm = std::stoi(Arg(argc, argv, "--warm", "8"));
  const int32_t prompt = 64;
  if (batches.empty() || steps <= 0 || warm < 0) {
    std::printf("{\"what\":\"error\",\"message\":\"--batches, --steps and --warm must be positive\"}\n");
    return 1;
  }
  SynthOptions so;
  so.shape = shape;
  if (!std::filesystem::exists(dir + "/model.safetensors")) {
    std::fprintf(stderr, "synthesizing a %s model into %s\n", shape.c_str(), dir.c_str());
    if (Status s = SynthesizeModel(so, dir); !s.ok()) {
      std::printf("{\"what\":\"error\",\"message\":\"%s\"}\n", s.ToString().c_str());
      return 1;
    }
  }
  auto model = Model::Load(dir);
  auto tokenizer = Tokenizer::Load(dir);
  if (!model.ok() || !tokenizer.ok()) {
    std::printf("{\"what\":\"error\",\"message\":\"%s\"}\n",
                (!model.ok() ? model.status() : tokenizer.status()).ToString().c_str());
    return 1;
  }
  const int32_t vocab = (*model)->config().vocab_size;
  const int32_t max_batch = *std::max_element(batches.begin(), batches.end());
  std::printf("{\"what\":\"setup\",\"shape\":\"%s\",\"vocab\":%d,\"steps\":%d,\"warm\":%d,\"prompt\":%d}\n",
              shape.c_str(), vocab, steps, warm, prompt);
  for (const bool capture : {false, true}) {
    EngineOptions eo;
    eo.max_batch = max_batch;
    eo.max_context = prompt + warm + steps + 64;
    eo.kv_cache_bytes = static_cast<int64_t>(max_batch) * (eo.max_context / 16 + 2);  // 1 byte a block
    eo.prefill_chunk = prompt;
    eo.max_step_tokens = max_batch * prompt;
    eo.capture_logits = capture;
    auto backend = std::make_unique<InstantBackend>(vocab);
    InstantBackend* timed = backend.get();
    auto engine = Engine::Create(*model, *tokenizer, std::move(backend), eo);
    if (!engine.ok()) {
      std::printf("{\"what\":\"error\",\"message\":\"%s\"}\n", engine.status().ToString().c_str());
      return 1;
    }
    for (int32_t batch : batches) {
      if (capture && batch * static_cast<int64_t>(vocab) * (warm + steps + 1) * 4 > (int64_t{8} << 30)) {
        std::printf("{\"what\":\"skipped\",\"batch\":%d,\"capture_logits\":true,\"why\":\"over 8 GiB of logits\"}\n",
                    batch);
        continue;
      }
      timed->calls().Clear();
      rote::bench::StepWindow window(batch, warm, steps);
      std::vector<GenerationRequest> requests;
      for (int32_t i = 0; i < batch; ++i) {
        GenerationRequest r;
        for (int32_t k = 0; k < prompt; ++k) r.prompt_tokens.push_back((i * 131 + k * 17) % 256);
        r.sampling.max_tokens = warm + steps + 1;
        r.sampling.ignore_eos = true;
        r.on_token = window.Callback<TokenEvent>();
        requests.push_back(std::move(r));
      }
      auto ids = (*engine)->SubmitAll(std::move(requests));
      if (!ids.ok()) {
        std::printf("{\"what\":\"error\",\"message\":\"%s\"}\n", ids.status().ToString().c_str());
        return 1;
      }
      size_t text_bytes = 0;
      for (RequestId id : *ids) {
        auto res = (*engine)->Wait(id);
        if (!res.ok()) {
          std::printf("{\"what\":\"error\",\"message\":\"%s\"}\n", res.status().ToString().c_str());
          return 1;
        }
        text_bytes += res->text.size();
      }
      const auto [inside_s, calls] = timed->calls().SecondsWithin(window.begin(), window.end());
      const double window_s = Seconds(window.begin(), window.end());
      std::printf(
          "{\"what\":\"engine_turn\",\"batch\":%d,\"capture_logits\":%s,\"steps\":%d,\"calls\":%d,"
          "\"turn_us\":%.2f,\"backend_us\":%.2f,\"text_bytes\":%zu}\n",
          batch, capture ? "true" : "false", steps, calls, calls > 0 ? 1e6 * (window_s - inside_s) / calls : 0.0,
          calls > 0 ? 1e6 * inside_s / calls : 0.0, text_bytes);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace rote::inference

int main(int argc, char** argv) { return rote::inference::Main(argc, argv); }

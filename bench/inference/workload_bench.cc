// The generation workload (docs/performance.md, "The generation workload"): N generation points
// (prompts as the pipeline builds them: bench/orchestrator/workload_prompts.cc), three attempts
// each, all points of an attempt submitted together as the pipeline submits them; attempt k+1
// quotes attempt k's reply (cut at 4,000 bytes, as the pipeline cuts it). Replies are the
// workload file's 100-400 tokens each (ignore_eos, so every system writes the same lengths):
// attempt 1 greedy, retries sampled at 0.75 as `rote serve`'s default retry temperature. A
// synthesized model (random weights, built in memory: no model directory is written or read)
// with the synthesized tokenizer's vocabulary widened to the model's size
// (bench/inference/synthetic_vocab.h: pieces of the source tree's own text, as the workload file's
// `<workload>.vocab` pinned them when workload_prompts wrote it). That tokenizer has
// no merges; it takes a pre-token found in its vocabulary as one token (whole pieces), which
// brings the prompts near a real code model's token counts (byte by byte, about twice as many).
//
// Engine limits as `rote serve` sets them: on CUDA a KV cache of every block free device memory
// holds after the weights (less 1 GiB), the engine's max_batch 16 and max_step_tokens 512, and
// with --max-batch N (as `rote serve --max-batch N`) max_step_tokens max(512, 32 N) unless given;
// max_context 0 (the model's, at most 32,768).
//
// Prints per N one JSON line: the time from the first submission to the last attempt's output,
// tokens/s of prefill and of decode (the engine's own split of its step time), and the share of
// prompt tokens served from the prefix cache. Progress goes to stderr. --replay FILE writes every
// request's prompt ids and reply length, in rounds, for bench/inference/workload_peer.py to run
// the same work. --time-limit S cancels an N still running S seconds after its first submission,
// --deadline S whatever runs S seconds after the program started (model building included); the
// cut N's line says "complete":false and the rest (larger N, and N under a later
// --prefill-fills-step value) are skipped.
//
//   bench_workload --workload FILE [--points 1,8,32] [--shape 0.5b] [--device cuda]
//                  [--numerics exact|fast] [--replay FILE] [--max-batch 16] [--prefill-chunk 256]
//                  [--max-step-tokens N] [--max-context 0] [--kv-cache-mb 0] [--threads 0]
//                  [--time-limit S] [--deadline S] [--vocab FILE] [--source DIR] [--model-dir DIR]
//                  [--prefill-fills-step 0|1|0,1]
//
// --vocab FILE: the ranked pieces the vocabulary is made from (WritePieces' format); default
// `<workload>.vocab` where it exists, which workload_prompts writes beside the workload, so the
// token ids (and a random model's replies) stay the same while the tree changes. Without one,
// --source DIR: the source tree the pieces are taken from (default: the one this binary was built
// from, else the working directory); then only the same tree gives the same token ids.
// --prefill-fills-step 0|1|0,1: EngineOptions::prefill_fills_step (the step's unused budget to the
// prompts; 1, the engine's default, unless given), each value side by side.
// --model-dir DIR: also write the model as a directory (config, weights, the widened tokenizer)
// for `workload_peer.py --model DIR`; `workload_peer.py --shape S` needs no directory.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>  // mkdtemp
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/inference/synthetic_vocab.h"
#include "inference/engine.h"
#include "inference/model/synth.h"
#include "inference/model/weights.h"
#include "nlohmann/json.hpp"

namespace fs = std::filesystem;
using namespace rote::inference;

namespace {

double NowS() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::vector<int> ParseList(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ',')) v.push_back(std::stoi(part));
  return v;
}

// At most `max_bytes` of `text`, cut before a UTF-8 continuation byte, with the note the
// pipeline's Truncated adds.
std::string Quoted(const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "\n[... " + std::to_string(text.size() - cut) + " more bytes]";
}

std::string Replace(std::string s, const std::string& marker, const std::string& with) {
  for (size_t at = 0; (at = s.find(marker, at)) != std::string::npos; at += with.size()) s.replace(at, marker.size(), with);
  return s;
}

// The source tree the vocabulary is made from: `flag` when given, else the tree the binary was
// built from when it is there, else the working directory (the binary copied to another machine
// with the tree). Empty when none holds the sources.
std::string SourceRoot(const std::string& flag) {
  for (const std::string& root : {flag, std::string(ROTE_SOURCE_DIR), fs::current_path().string()}) {
    if (!root.empty() && fs::is_directory(fs::path(root) / "docs") && fs::is_directory(fs::path(root) / "inference"))
      return root;
    if (!flag.empty()) return "";
  }
  return "";
}

// The vocabulary's ranked pieces: --vocab FILE, else <workload>.vocab where it exists (both pinned
// by workload_prompts), else the source tree's text (SourceRoot). False after saying why.
bool VocabularyPieces(std::map<std::string, std::string>& args, std::vector<std::string>* pieces, std::string* from) {
  std::string file = args["vocab"];
  if (file.empty() && fs::exists(args["workload"] + ".vocab")) file = args["workload"] + ".vocab";
  if (!file.empty()) {
    std::string error;
    if (!rote::bench::ReadPieces(file, pieces, &error)) {
      fprintf(stderr, "vocabulary: %s\n", error.c_str());
      return false;
    }
    *from = file;
    return true;
  }
  const std::string source = SourceRoot(args["source"]);
  if (source.empty()) {
    fprintf(stderr, "no vocabulary: give --vocab FILE (workload_prompts writes <workload>.vocab), or run from the "
                    "repository's root or give --source DIR\n");
    return false;
  }
  fprintf(stderr, "[workload] no %s.vocab: the vocabulary comes from the source tree %s, so token ids follow the "
                  "tree's text\n", args["workload"].c_str(), source.c_str());
  *pieces = rote::bench::RankedSourcePieces(source, rote::bench::kWorkloadPieces);
  *from = "source tree " + source;
  return true;
}

// The tokenizer of a synthesized model of `family` with its vocabulary widened to `vocab_size`
// (WidenVocabulary): the files are those of the family's "tiny" model (tokenizer.json,
// tokenizer_config.json, config.json, generation_config.json: the same special tokens, chat
// template and stop tokens at every shape), written to a scratch directory and read back.
StatusOr<Tokenizer> WidenedTokenizer(ModelFamily family, int32_t vocab_size, const std::vector<std::string>& pieces) {
  std::string scratch = (fs::temp_directory_path() / "rote-workload-tok-XXXXXX").string();
  if (::mkdtemp(scratch.data()) == nullptr) return FailedPrecondition("cannot create a scratch directory");
  SynthOptions tiny;
  tiny.family = family;
  tiny.shape = "tiny";
  const Status written = SynthesizeModel(tiny, scratch);
  StatusOr<Tokenizer> tokenizer = !written.ok() ? StatusOr<Tokenizer>(written)
                                  : !rote::bench::WidenVocabularyWith(scratch, vocab_size, pieces, /*whole_pieces=*/true)
                                      ? StatusOr<Tokenizer>(DataLoss("cannot widen the vocabulary in " + scratch))
                                      : Tokenizer::Load(scratch);
  std::error_code ec;
  fs::remove_all(scratch, ec);
  return tokenizer;
}

// Cancels the requests of the running N when its time limit passes.
class Watchdog {
 public:
  Watchdog(Engine* engine, double deadline) : engine_(engine), deadline_(deadline) {
    if (deadline_ > 0) thread_ = std::thread([this] { Run(); });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void Watch(const std::vector<RequestId>& ids) {
    std::lock_guard<std::mutex> lock(mu_);
    ids_ = ids;
    if (fired_)
      for (RequestId id : ids_) engine_->Cancel(id);
  }
  bool fired() const { return fired_.load(); }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!done_) {
      const double left = deadline_ - NowS();
      if (left <= 0) {
        fired_ = true;
        for (RequestId id : ids_) engine_->Cancel(id);
        return;
      }
      cv_.wait_for(lock, std::chrono::duration<double>(std::min(left, 1.0)));
    }
  }
  Engine* engine_;
  double deadline_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<RequestId> ids_;
  bool done_ = false;
  std::atomic<bool> fired_{false};
  std::thread thread_;
};

// Every 15 s while a round runs: what the engine has done since `base` (stderr).
class Heartbeat {
 public:
  Heartbeat(const Engine* engine, std::string label, double t0, const EngineStats& base)
      : engine_(engine), label_(std::move(label)), t0_(t0), base_(base) {
    thread_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!cv_.wait_for(lock, std::chrono::seconds(15), [this] { return done_; })) {
        const EngineStats s = engine_->stats();
        fprintf(stderr, "[workload] %s: %.0f s, %lld prompt tokens computed, %lld generated, %d running, %d waiting\n",
                label_.c_str(), NowS() - t0_, static_cast<long long>(s.prefill_tokens - base_.prefill_tokens),
                static_cast<long long>(s.generated_tokens - base_.generated_tokens), s.running, s.waiting);
      }
    });
  }
  ~Heartbeat() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  const Engine* engine_;
  std::string label_;
  double t0_;
  EngineStats base_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// Attempt `attempt` (0-based) of the first previous.size() points (the file's points over
// again past its end): attempt k+1 quotes attempt k's reply, previous[i].
std::vector<GenerationRequest> AttemptRequests(const std::vector<nlohmann::json>& points, int attempt,
                                               const std::vector<std::string>& previous) {
  std::vector<GenerationRequest> reqs;
  for (size_t i = 0; i < previous.size(); ++i) {
    const nlohmann::json& a = points[i % points.size()]["attempts"][static_cast<size_t>(attempt)];
    GenerationRequest r;
    for (const auto& m : a["messages"]) {
      r.messages.push_back({m["role"].get<std::string>(),
                            Replace(m["content"].get<std::string>(), "@@CANDIDATE@@", Quoted(previous[i], 4000))});
    }
    r.sampling.max_tokens = a["reply_tokens"].get<int>();
    r.sampling.ignore_eos = true;
    r.sampling.temperature = attempt == 0 ? 0.0f : 0.75f;
    r.sampling.seed = 1;
    r.sampling_key = static_cast<uint64_t>(i) * 3 + static_cast<uint64_t>(attempt);
    reqs.push_back(std::move(r));
  }
  return reqs;
}

// An engine over `model` that has run one short request (graphs captured, kernels loaded).
StatusOr<std::unique_ptr<Engine>> OpenWarm(std::shared_ptr<const Model> model, const Tokenizer& tokenizer,
                                           const EngineOptions& eo) {
  auto engine = Engine::Open(std::move(model), tokenizer, eo);
  if (engine.ok()) {
    GenerationRequest w;
    w.prompt = "warm up";
    w.sampling.max_tokens = 4;
    (void)(*engine)->Generate(w);
  }
  return engine;
}

constexpr const char* kUsage =
    "usage: bench_workload --workload FILE [--points 1,8,32] [--shape 0.5b] [--device cuda|cpu] "
    "[--numerics exact|fast] [--replay FILE] [--max-batch N] [--prefill-chunk N] [--max-step-tokens N] "
    "[--max-context N] [--kv-cache-mb N] [--threads N] [--time-limit S] [--deadline S] [--vocab FILE] [--source DIR] [--prefill-fills-step 0|1|0,1] "
    "[--model-dir DIR]\n";

}  // namespace

int main(int argc, char** argv) {
  const double started = NowS();
  std::map<std::string, std::string> args = {
      {"workload", ""},    {"points", "1,8,32"},  {"shape", "0.5b"},      {"device", "cuda"},
      {"numerics", "exact"}, {"replay", ""},      {"max-batch", "16"},    {"prefill-chunk", "256"},
      {"max-step-tokens", ""}, {"max-context", "0"}, {"kv-cache-mb", "0"}, {"threads", "0"},
      {"time-limit", "0"}, {"deadline", "0"},     {"source", ""},         {"model-dir", ""},
      {"vocab", ""}, {"prefill-fills-step", "1"}};
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 >= argc || k.rfind("--", 0) != 0 || !args.count(k.substr(2))) {
      fputs(kUsage, stderr);
      return 2;
    }
    args[k.substr(2)] = argv[i + 1];
  }
  if (args["numerics"] != "exact" && args["numerics"] != "fast") {
    fprintf(stderr, "--numerics is exact or fast, not '%s'\n", args["numerics"].c_str());
    return 2;
  }
  std::vector<nlohmann::json> points;
  {
    std::ifstream in(args["workload"]);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) points.push_back(nlohmann::json::parse(line));
  }
  if (points.empty()) {
    fprintf(stderr, "no points in '%s' (make them with workload_prompts)\n", args["workload"].c_str());
    return 1;
  }
  std::vector<std::string> pieces;
  std::string vocabulary_from;
  if (!VocabularyPieces(args, &pieces, &vocabulary_from)) return 1;

  const double m0 = NowS();
  SynthOptions so;
  so.shape = args["shape"];
  auto config = SynthConfig(so);
  if (!config.ok()) {
    fprintf(stderr, "%s\n", config.status().ToString().c_str());
    return 2;
  }
  const int host_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::shared_ptr<const Model> model;
  if (const std::string& dir = args["model-dir"]; !dir.empty()) {
    if (!SynthesizeModel(so, dir).ok() || !rote::bench::WidenVocabularyWith(dir, config->vocab_size, pieces, /*whole_pieces=*/true)) {
      fprintf(stderr, "cannot write the %s model to %s\n", so.shape.c_str(), dir.c_str());
      return 1;
    }
    fprintf(stderr, "[workload] wrote %s (%.1f s)\n", dir.c_str(), NowS() - m0);
  }
  {
    auto built = SynthesizeModelInMemory(so, host_threads);
    if (!built.ok()) {
      fprintf(stderr, "cannot synthesize the %s model: %s\n", so.shape.c_str(), built.status().ToString().c_str());
      return 1;
    }
    model = *built;
  }
  auto tokenizer = WidenedTokenizer(config->family, config->vocab_size, pieces);
  if (!tokenizer.ok()) {
    fprintf(stderr, "tokenizer: %s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  const double model_s = NowS() - m0;
  fprintf(stderr, "[workload] %s model built in memory, tokenizer made (%.1f s), vocabulary from %s\n", so.shape.c_str(), model_s,
          vocabulary_from.c_str());

  EngineOptions eo;
  if (!ParseDeviceName(args["device"], &eo).ok()) {
    fputs(kUsage, stderr);
    return 2;
  }
  eo.numerics_profile = args["numerics"] == "fast" ? NumericsProfile::kFast : NumericsProfile::kExact;
  eo.max_batch = std::stoi(args["max-batch"]);
  eo.prefill_chunk = std::stoi(args["prefill-chunk"]);
  eo.max_step_tokens = args["max-step-tokens"].empty() ? std::max(512, 32 * eo.max_batch)
                                                         : std::stoi(args["max-step-tokens"]);
  eo.max_context = std::stoi(args["max-context"]);
  // --prefill-fills-step 0|1, or both (0,1): each value runs every N, side by side in one process.
  const std::vector<int> fills_values = ParseList(args["prefill-fills-step"]);
  for (int f : fills_values)
    if (f != 0 && f != 1) {
      fprintf(stderr, "--prefill-fills-step takes 0, 1 or 0,1, not '%s'\n", args["prefill-fills-step"].c_str());
      return 2;
    }
  if (fills_values.empty()) {
    fputs(kUsage, stderr);
    return 2;
  }
  eo.threads = std::stoi(args["threads"]);
  // As `rote serve` sizes it: on CUDA every block free memory holds after the weights (0), or at
  // most --kv-cache-mb; on the CPU 4 GiB unless given.
  const int64_t kv_mb = std::stoll(args["kv-cache-mb"]);
  eo.kv_cache_bytes = kv_mb > 0 ? kv_mb << 20 : eo.device == Device::kCpu ? int64_t{4} << 30 : 0;
  const double time_limit = std::stod(args["time-limit"]);
  const double deadline = std::stod(args["deadline"]) > 0 ? started + std::stod(args["deadline"]) : 0;
  std::ofstream replay;
  if (!args["replay"].empty()) replay.open(args["replay"], std::ios::trunc);

  bool skip_rest = false;
  for (size_t fill_index = 0; fill_index < fills_values.size(); ++fill_index)
  for (int n : ParseList(args["points"])) {
    eo.prefill_fills_step = fills_values[fill_index] == 1;
    if (deadline > 0 && NowS() >= deadline) skip_rest = true;
    if (skip_rest) {
      printf("{\"system\":\"rote %s\",\"shape\":\"%s\",\"points\":%d,\"prefill_fills_step\":%s,\"skipped\":true}\n",
             args["numerics"].c_str(), args["shape"].c_str(), n, eo.prefill_fills_step ? "true" : "false");
      fflush(stdout);
      continue;
    }
    // A fresh engine per N: nothing cached from another N's prompts.
    const double e0 = NowS();
    auto engine = OpenWarm(model, *tokenizer, eo);
    if (!engine.ok()) {
      fprintf(stderr, "engine: %s\n", engine.status().message().c_str());
      return 1;
    }
    const double open_s = NowS() - e0;
    fprintf(stderr, "[workload] %s %s N=%d: engine ready (%.1f s; KV cache %lld MiB, %d blocks)\n",
            args["shape"].c_str(), args["numerics"].c_str(), n, open_s,
            static_cast<long long>((*engine)->kv_cache_bytes() >> 20), (*engine)->kv_blocks());
    const EngineStats before = (*engine)->stats();
    std::vector<std::string> previous(static_cast<size_t>(n));
    int64_t prompt_tokens = 0, reused = 0, generated = 0;
    std::vector<double> round_s;
    std::vector<std::string> replay_lines;  // written when all three rounds finished
    const double t0 = NowS();
    double cut = time_limit > 0 ? t0 + time_limit : 0;
    if (deadline > 0) cut = cut > 0 ? std::min(cut, deadline) : deadline;
    Watchdog watchdog(engine->get(), cut);
    for (int attempt = 0; attempt < 3 && !watchdog.fired(); ++attempt) {
      std::vector<GenerationRequest> reqs = AttemptRequests(points, attempt, previous);
      const std::string label = args["shape"] + " " + args["numerics"] + " N=" + std::to_string(n) + " attempt " +
                                std::to_string(attempt + 1);
      Heartbeat heartbeat(engine->get(), label, t0, before);
      const double r0 = NowS();
      auto ids = (*engine)->SubmitAll(std::move(reqs));
      if (!ids.ok()) {
        fprintf(stderr, "submit: %s\n", ids.status().message().c_str());
        return 1;
      }
      watchdog.Watch(*ids);
      std::vector<std::string> lines;
      for (int i = 0; i < n; ++i) {
        auto r = (*engine)->Wait((*ids)[static_cast<size_t>(i)]);
        if (!r.ok()) {
          fprintf(stderr, "wait: %s\n", r.status().message().c_str());
          return 1;
        }
        prompt_tokens += static_cast<int64_t>(r->prompt_tokens.size());
        reused += r->prompt_tokens_reused;
        generated += static_cast<int64_t>(r->tokens.size());
        previous[static_cast<size_t>(i)] = r->text;
        nlohmann::json line = {{"points", n}, {"attempt", attempt + 1}, {"prompt_ids", r->prompt_tokens},
                               {"reply_tokens", r->tokens.size()}};
        lines.push_back(line.dump());
      }
      if (watchdog.fired()) break;  // a cut round is not timed
      round_s.push_back(NowS() - r0);
      replay_lines.insert(replay_lines.end(), lines.begin(), lines.end());
      fprintf(stderr, "[workload] %s: %.2f s\n", label.c_str(), round_s.back());
    }
    const double wall = NowS() - t0;
    const bool complete = !watchdog.fired();
    if (complete && replay.is_open() && fill_index == 0) {  // the first value's rounds: the peer's
      for (const std::string& l : replay_lines) replay << l << "\n";
      replay.flush();
    }
    const EngineStats after = (*engine)->stats();
    const double prefill_s = after.prefill_seconds - before.prefill_seconds;
    const double decode_s = after.decode_seconds - before.decode_seconds;
    const int64_t computed = after.prefill_tokens - before.prefill_tokens;
    const int64_t steps = after.steps - before.steps;  // engine steps (a chained run of greedy steps is one)
    std::string rounds;
    for (double s : round_s) rounds += (rounds.empty() ? "" : ",") + std::to_string(s);
    printf("{\"system\":\"rote %s\",\"shape\":\"%s\",\"device\":\"%s\",\"points\":%d,\"attempts\":3,\"complete\":%s,"
           "\"seconds\":%.3f,\"rounds_s\":[%s],\"prompt_tokens\":%lld,\"prompt_tokens_computed\":%lld,"
           "\"prefix_cache_share\":%.3f,\"generated_tokens\":%lld,\"prefill_s\":%.3f,\"decode_s\":%.3f,"
           "\"prefill_tok_s\":%.1f,\"decode_tok_s\":%.1f,\"max_batch\":%d,\"max_step_tokens\":%d,\"kv_cache_mib\":%lld,"
           "\"steps\":%lld,\"prefill_steps\":%lld,\"mean_batch\":%.2f,\"prefill_fills_step\":%s,\"model_s\":%.1f,"
           "\"engine_open_s\":%.1f}\n",
           args["numerics"].c_str(), args["shape"].c_str(), (*engine)->device().c_str(), n, complete ? "true" : "false",
           wall, rounds.c_str(), static_cast<long long>(prompt_tokens), static_cast<long long>(computed),
           prompt_tokens ? static_cast<double>(reused) / prompt_tokens : 0.0, static_cast<long long>(generated), prefill_s,
           decode_s, prefill_s > 0 ? computed / prefill_s : 0.0, decode_s > 0 ? generated / decode_s : 0.0, eo.max_batch,
           eo.max_step_tokens, static_cast<long long>((*engine)->kv_cache_bytes() >> 20), static_cast<long long>(steps),
           static_cast<long long>(after.prefill_steps - before.prefill_steps), steps > 0 ? static_cast<double>(after.batch_size_sum - before.batch_size_sum) / steps : 0.0,
           eo.prefill_fills_step ? "true" : "false", model_s, open_s);
    fflush(stdout);
    if (!complete) {
      fprintf(stderr, "[workload] N=%d cut at its time limit; the rest skipped\n", n);
      skip_rest = true;
    }
  }
  return 0;
}

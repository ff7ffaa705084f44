#include "orchestrator/engine/backtest.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "orchestrator/engine/artifact.h"
#include "orchestrator/engine/canonical.h"
#include "orchestrator/engine/engine_internal.h"
#include "orchestrator/engine/regex_artifact.h"

namespace rote::orchestrator::engine {

using sandbox::Array;
using sandbox::Map;
using sandbox::Value;

namespace {

using Clock = sandbox::LuaState::Clock;

// Deterministic failures of the code itself, which a run journals as {"error": ...}; anything
// else is the infrastructure failing and leaves no verdict (as in blueprint_runtime.cc).
bool IsArtifactError(const absl::Status& s) {
  return absl::IsFailedPrecondition(s) || absl::IsResourceExhausted(s) || absl::IsInvalidArgument(s) ||
         absl::IsOutOfRange(s);
}

// {"error": message} as a run journals a failed call and records a failed run.
std::string ErrorJson(std::string_view message) {
  Map m;
  m["error"] = Value::String(std::string(message));
  absl::StatusOr<Canonical> c = CanonicalOf(Value::FromMap(std::move(m)));
  if (c.ok()) return c->json;
  return "{\"error\":\"(error message is not valid UTF-8)\"}";
}

// Cuts a value kept with a difference at a UTF-8 boundary; true when it cut.
bool Cut(std::string* s) {
  if (s->size() <= kMaxBacktestValueBytes) return false;
  size_t n = kMaxBacktestValueBytes;
  while (n > 0 && (static_cast<unsigned char>((*s)[n]) & 0xC0) == 0x80) --n;
  s->resize(n);
  return true;
}

std::string PointName(const std::string& key) {
  size_t slash = key.find('/');
  return slash == std::string::npos ? key : key.substr(slash + 1);
}

// A pattern step, as blueprint_runtime.cc runs it: {"method": ..., "text": ...} or, for the
// *_each methods, {"method": ..., "texts": [...]} (an element without a match is false).
absl::StatusOr<Value> RunPatternStep(const RegexArtifact& re, const Value& input) {
  if (input.is_string()) return re.FindAll(input.as_string());
  if (!input.is_map()) {
    return absl::InvalidArgumentError("a pattern's input is a text (a JSON string) or {\"method\": ..., \"text\": ...}");
  }
  const Map& m = input.as_map();
  auto method = m.find("method");
  if (method == m.end() || !method->second.is_string()) {
    return absl::InvalidArgumentError("a pattern step's input names its method");
  }
  std::string name = method->second.as_string();
  const bool batch = name.size() > 5 && name.substr(name.size() - 5) == "_each";
  if (batch) name.resize(name.size() - 5);
  auto one = [&](const std::string& text) -> absl::StatusOr<Value> {
    if (name == "match") return re.Match(text);
    if (name == "find_all") return re.FindAll(text);
    if (name == "captures") return re.Captures(text);
    return absl::InvalidArgumentError(absl::StrCat("unknown pattern method '", method->second.as_string(), "'"));
  };
  if (!batch) {
    auto text = m.find("text");
    if (text == m.end() || !text->second.is_string()) return absl::InvalidArgumentError("a pattern step's text is a string");
    return one(text->second.as_string());
  }
  auto texts = m.find("texts");
  Array items;
  if (texts != m.end() && texts->second.is_array()) items = texts->second.as_array();
  if (texts == m.end() || !(texts->second.is_array() || (texts->second.is_map() && texts->second.as_map().empty())) ||
      std::any_of(items.begin(), items.end(), [](const Value& v) { return !v.is_string(); })) {
    return absl::InvalidArgumentError("a pattern step's texts are a list of strings");
  }
  Array out;
  out.reserve(items.size());
  for (const Value& t : items) {
    absl::StatusOr<Value> v = one(t.as_string());
    if (!v.ok()) return v.status();
    out.push_back(v->is_nil() ? Value::Bool(false) : *std::move(v));
  }
  return Value::FromArray(std::move(out));
}

absl::StatusOr<std::unique_ptr<RegexArtifact>> CompilePattern(const ArtifactCode& code) {
  absl::StatusOr<sandbox::RegexOptions> ro = ParseRe2Options(code.options_json);
  if (!ro.ok()) return ro.status();
  return RegexArtifact::Compile(code.source, *ro);
}

// One call's result as the journal records it: canonical JSON, or the failure.
struct CallOutcome {
  absl::Status failure;  // OK: `json` is the result
  std::string json;
};

CallOutcome FromValue(absl::StatusOr<Value> v) {
  if (!v.ok()) return {v.status(), ""};
  absl::StatusOr<Canonical> c = CanonicalOf(*v);
  if (!c.ok()) return {absl::InvalidArgumentError(absl::StrCat("its result has no JSON form: ", c.status().message())), ""};
  return {absl::OkStatus(), c->json};
}

// The results of a f:map(list) step, as blueprint_runtime.cc assembles them.
CallOutcome FromMapResults(std::vector<sandbox::CallResult>& results) {
  Array out;
  out.reserve(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    sandbox::CallResult& r = results[i];
    if (!r.status.ok()) return {absl::Status(r.status.code(), absl::StrCat("element ", i + 1, ": ", r.status.message())), ""};
    if (r.value.is_nil()) {
      return {absl::FailedPreconditionError(absl::StrCat(
                  "element ", i + 1, ": the function returned nil, which cannot be an element of a list")),
              ""};
    }
    out.push_back(std::move(r.value));
  }
  return FromValue(Value::FromArray(std::move(out)));
}

}  // namespace

absl::StatusOr<TryOutcome> TryCode(LuaArtifactRunner* lua_runner, const store::ArtifactRecord& artifact,
                                   std::string_view input_json, const sandbox::Limits& limits,
                                   std::chrono::milliseconds deadline) {
  if (input_json.size() > limits.max_memory_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("the input is ", input_json.size(),
                                                   " bytes, more than the memory limit (max_memory_bytes=",
                                                   limits.max_memory_bytes, ")"));
  }
  absl::StatusOr<Value> input = sandbox::ParseJson(input_json);
  if (!input.ok()) return absl::InvalidArgumentError(absl::StrCat("input_json: ", input.status().message()));
  absl::StatusOr<ArtifactCode> code = VerifiedCode(artifact);
  if (!code.ok()) return code.status();
  TryOutcome out;
  out.artifact_digest = artifact.digest;
  out.limits = limits;
  CallOutcome call;
  if (code->kind == ArtifactKind::kRe2Pattern) {
    if (!input->is_string() && !input->is_map()) {
      return absl::InvalidArgumentError("a pattern's input is a text (a JSON string) or {\"method\": ..., \"text\": ...}");
    }
    absl::StatusOr<std::unique_ptr<RegexArtifact>> re = CompilePattern(*code);
    call = re.ok() ? FromValue(RunPatternStep(**re, *input)) : CallOutcome{re.status(), ""};
    if (absl::IsInvalidArgument(call.failure) && re.ok()) return call.failure;  // a malformed step input
  } else {
    absl::StatusOr<std::vector<sandbox::CallResult>> results = lua_runner->Run(
        code->source, PointName(artifact.generation_point), {*input}, limits, Clock::now() + deadline);
    if (!results.ok()) {
      if (!IsArtifactError(results.status())) return results.status();
      call = {results.status(), ""};
    } else if (results->size() != 1) {
      return absl::InternalError(absl::StrCat("the Lua runner returned ", results->size(), " results for 1 input"));
    } else {
      sandbox::CallResult& r = (*results)[0];
      out.usage = r.usage;
      call = r.status.ok() ? FromValue(std::move(r.value)) : CallOutcome{r.status, ""};
    }
  }
  if (call.failure.ok()) {
    out.output_json = std::move(call.json);
  } else {
    out.error = std::string(call.failure.message());
  }
  return out;
}

// ---- recorded calls -------------------------------------------------------------------------

// One page of recorded calls: how each is re-run, the batches that run them, their outcomes.
class Backtester::Calls {
 public:
  Calls(LuaArtifactRunner* runner, const ArtifactCode& code, const RegexArtifact* regex,
        absl::Status compile_error, std::string chunkname)
      : runner_(runner), code_(code), regex_(regex), compile_error_(std::move(compile_error)),
        chunkname_(std::move(chunkname)) {}

  enum class Mode { kCall, kMap, kPattern };
  struct Job {
    Mode mode = Mode::kCall;
    Value input;
    sandbox::Limits limits;
    CallOutcome outcome;
  };
  // Lua jobs [first, last) whose inputs go to one worker together.
  struct Batch {
    size_t first = 0;
    size_t last = 0;
  };

  std::vector<Job> jobs;

  // Runs every job, `parallelism` batches at a time; an infrastructure failure is returned.
  absl::Status RunAll(int parallelism, int batch_size, std::chrono::milliseconds deadline) {
    std::vector<Batch> batches;
    for (size_t i = 0; i < jobs.size();) {
      if (jobs[i].mode == Mode::kPattern) {
        jobs[i].outcome = compile_error_.ok() ? FromValue(RunPatternStep(*regex_, jobs[i].input))
                                              : CallOutcome{compile_error_, ""};
        ++i;
        continue;
      }
      Batch b{i, i};
      size_t inputs = 0;
      while (b.last < jobs.size() && jobs[b.last].mode != Mode::kPattern &&
             SameLimits(jobs[b.last].limits, jobs[i].limits)) {
        size_t n = jobs[b.last].mode == Mode::kMap ? jobs[b.last].input.as_array().size() : 1;
        if (inputs > 0 && inputs + n > static_cast<size_t>(batch_size)) break;
        inputs += n;
        ++b.last;
      }
      batches.push_back(b);
      i = b.last;
    }
    std::atomic<size_t> next{0};
    std::vector<absl::Status> failures(batches.size());
    auto work = [&] {
      for (size_t k = next.fetch_add(1); k < batches.size(); k = next.fetch_add(1)) {
        failures[k] = RunBatch(batches[k], deadline);
      }
    };
    const size_t threads = std::min<size_t>(static_cast<size_t>(std::max(parallelism, 1)), batches.size());
    std::vector<std::thread> pool;
    for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();
    for (const absl::Status& s : failures) {
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  static bool SameLimits(const sandbox::Limits& a, const sandbox::Limits& b) {
    return a.max_instructions == b.max_instructions && a.max_memory_bytes == b.max_memory_bytes &&
           a.max_output_bytes == b.max_output_bytes;
  }

  absl::Status RunBatch(const Batch& b, std::chrono::milliseconds deadline) {
    std::vector<Value> inputs;
    for (size_t j = b.first; j < b.last; ++j) {
      if (jobs[j].mode == Mode::kMap) {
        for (const Value& v : jobs[j].input.as_array()) inputs.push_back(v);
      } else {
        inputs.push_back(jobs[j].input);
      }
    }
    absl::StatusOr<std::vector<sandbox::CallResult>> results;
    if (inputs.empty()) {
      results = std::vector<sandbox::CallResult>();
    } else {
      results = runner_->Run(code_.source, chunkname_, inputs, jobs[b.first].limits, Clock::now() + deadline);
    }
    if (!results.ok()) {
      if (!IsArtifactError(results.status())) return results.status();
      for (size_t j = b.first; j < b.last; ++j) jobs[j].outcome = {results.status(), ""};
      return absl::OkStatus();
    }
    if (results->size() != inputs.size()) {
      return absl::InternalError(absl::StrCat("the Lua runner returned ", results->size(), " results for ",
                                              inputs.size(), " inputs"));
    }
    size_t k = 0;
    for (size_t j = b.first; j < b.last; ++j) {
      if (jobs[j].mode == Mode::kMap) {
        size_t n = jobs[j].input.as_array().size();
        std::vector<sandbox::CallResult> mine(std::make_move_iterator(results->begin() + static_cast<ptrdiff_t>(k)),
                                              std::make_move_iterator(results->begin() + static_cast<ptrdiff_t>(k + n)));
        jobs[j].outcome = FromMapResults(mine);
        k += n;
      } else {
        sandbox::CallResult& r = (*results)[k++];
        jobs[j].outcome = r.status.ok() ? FromValue(std::move(r.value)) : CallOutcome{r.status, ""};
      }
    }
    return absl::OkStatus();
  }

  LuaArtifactRunner* const runner_;
  const ArtifactCode& code_;
  const RegexArtifact* const regex_;
  const absl::Status compile_error_;
  const std::string chunkname_;
};

namespace {

// Whether a function step with this input and recorded result was f:map(list).
bool WasMap(const Value& input, std::string_view recorded_json) {
  if (!input.is_array()) return false;
  absl::StatusOr<Value> recorded = sandbox::ParseJson(recorded_json);
  if (!recorded.ok()) return false;
  if (recorded->is_array()) return recorded->as_array().size() == input.as_array().size();
  if (!recorded->is_map()) return false;
  auto error = recorded->as_map().find("error");
  return recorded->as_map().size() == 1 && error != recorded->as_map().end() && error->second.is_string() &&
         error->second.as_string().rfind("element ", 0) == 0;
}

void AddDifference(store::BacktestRecord* out, store::BacktestDifferenceRecord d) {
  if (out->differences.size() >= store::kMaxBacktestDifferences) return;
  bool cut = Cut(&d.input_json);
  cut = Cut(&d.recorded_json) || cut;
  cut = Cut(&d.candidate_json) || cut;
  d.truncated = cut;
  out->differences.push_back(std::move(d));
}

}  // namespace

absl::StatusOr<store::BacktestRecord> Backtester::Run(const store::ArtifactRecord& candidate,
                                                      const BacktestRequest& request) {
  if (request.max_calls < 0) return absl::InvalidArgumentError("max_calls must not be negative");
  if (request.max_runs < 0) return absl::InvalidArgumentError("max_runs must not be negative");
  const std::string& key = candidate.generation_point;
  const size_t slash = key.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == key.size()) {
    return absl::FailedPreconditionError(absl::StrCat("artifact ", candidate.digest, " belongs to '", key,
                                                      "', which is no {blueprint}/{point} generation point"));
  }
  const std::string blueprint_name = key.substr(0, slash);
  const std::string point = key.substr(slash + 1);
  const auto start = std::chrono::steady_clock::now();

  store::BacktestRecord out;
  out.artifact_digest = candidate.digest;
  out.principal = request.principal;
  if (options_.live_revision) {
    absl::StatusOr<std::string> live = options_.live_revision(candidate);
    if (!live.ok()) return live.status();
    out.live_artifact_digest = *std::move(live);
  }

  absl::StatusOr<ArtifactCode> code = VerifiedCode(candidate);
  if (!code.ok()) return code.status();
  std::unique_ptr<RegexArtifact> regex;
  absl::Status compile_error;
  if (code->kind == ArtifactKind::kRe2Pattern) {
    absl::StatusOr<std::unique_ptr<RegexArtifact>> re = CompilePattern(*code);
    if (re.ok()) regex = *std::move(re); else compile_error = re.status();
  }

  std::map<int64_t, sandbox::Limits> run_limits;  // each run's calls run under its own limits
  auto limits_of = [&](int64_t run_id) -> absl::StatusOr<sandbox::Limits> {
    auto it = run_limits.find(run_id);
    if (it != run_limits.end()) return it->second;
    absl::StatusOr<store::RunRecord> run = store_->GetRun(run_id);
    if (!run.ok()) return run.status();
    absl::StatusOr<sandbox::Limits> l = LimitsFromProfile(run->engine_profile_json);
    if (!l.ok()) return l.status();
    run_limits[run_id] = *l;
    return *l;
  };

  store::PointStepQuery query{blueprint_name, point, 0, -1, options_.page_size, options_.page_bytes};
  int64_t left = request.max_calls > 0 ? request.max_calls : -1;
  while (left != 0) {
    if (Cancelled()) return absl::CancelledError("the backtest was cancelled");
    if (left > 0) query.limit = static_cast<int32_t>(std::min<int64_t>(left, options_.page_size));
    absl::StatusOr<std::vector<store::PointStep>> page = store_->ListPointSteps(query);
    if (!page.ok()) return page.status();
    if (page->empty()) break;
    // Values kept as files are read here; past the byte budget the page ends early, so a page of
    // large values never holds more than about one budget in memory.
    int64_t held = 0;
    for (size_t i = 0; i < page->size(); ++i) {
      store::PointStep& s = (*page)[i];
      if (!s.values_read) {
        absl::StatusOr<std::string> in = store_->GetBlob(s.input_digest);
        if (!in.ok()) return in.status();
        absl::StatusOr<std::string> o = store_->GetBlob(s.output_digest);
        if (!o.ok()) return o.status();
        s.input = *std::move(in);
        s.output = *std::move(o);
      }
      held += static_cast<int64_t>(s.input.size() + s.output.size());
      if (held >= options_.page_bytes && i + 1 < page->size()) {
        page->resize(i + 1);
        break;
      }
    }
    query.after_run_id = page->back().run_id;
    query.after_index = page->back().index;
    if (left > 0) left -= static_cast<int64_t>(page->size());

    Calls calls(lua_runner_, *code, regex.get(), compile_error, point);
    calls.jobs.resize(page->size());
    for (size_t i = 0; i < page->size(); ++i) {
      store::PointStep& s = (*page)[i];
      absl::StatusOr<Value> input = sandbox::ParseJson(s.input);
      if (!input.ok()) {
        return absl::DataLossError(absl::StrCat("runs/", s.run_id, " step ", s.index, ": the recorded input does not parse: ",
                                                input.status().message()));
      }
      Calls::Job& job = calls.jobs[i];
      job.input = *std::move(input);
      if (code->kind == ArtifactKind::kRe2Pattern) {
        job.mode = Calls::Mode::kPattern;
      } else {
        job.mode = WasMap(job.input, s.output) ? Calls::Mode::kMap : Calls::Mode::kCall;
        absl::StatusOr<sandbox::Limits> l = limits_of(s.run_id);
        if (!l.ok()) return l.status();
        job.limits = *l;
      }
    }
    if (absl::Status s = calls.RunAll(options_.parallelism, options_.batch_size, engine_options_.run_deadline);
        !s.ok()) {
      return s;
    }
    for (size_t i = 0; i < page->size(); ++i) {
      const store::PointStep& s = (*page)[i];
      CallOutcome& c = calls.jobs[i].outcome;
      std::string got = c.failure.ok() ? c.json : ErrorJson(std::string(c.failure.message()));
      ++out.calls;
      if (got == s.output) {
        ++out.equal;
        continue;
      }
      store::BacktestDifferenceRecord d;
      d.run_id = s.run_id;
      d.step = s.index;
      d.input_json = s.input;
      d.recorded_json = s.output;
      d.recorded_artifact_digest = s.artifact_digest;
      if (c.failure.ok()) {
        ++out.different;
        d.candidate_json = std::move(c.json);
      } else {
        ++out.errors;
        d.error = std::string(c.failure.message());
      }
      AddDifference(&out, std::move(d));
    }
  }

  if (request.whole_runs) {
    if (absl::Status s = WholeRuns(candidate, blueprint_name, point, request, &out); !s.ok()) return s;
  }
  out.duration_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  absl::StatusOr<store::BacktestRecord> stored = store_->PutBacktest(out);
  if (!stored.ok()) return stored.status();
  return stored;
}

absl::Status Backtester::WholeRuns(const store::ArtifactRecord& candidate, const std::string& blueprint_name,
                                   const std::string& point, const BacktestRequest& request,
                                   store::BacktestRecord* out) {
  const size_t max_runs = request.max_runs > 0 ? static_cast<size_t>(request.max_runs) : 100;
  absl::StatusOr<std::vector<store::BlueprintRecord>> bps = store_->FindBlueprintsByName(blueprint_name);
  if (!bps.ok()) return bps.status();
  // Runs with a complete record (as replay.h requires), newest first.
  std::vector<store::RunRecord> runs;
  for (const store::BlueprintRecord& bp : *bps) {
    store::RunFilter filter;
    filter.blueprint_digest = bp.digest;
    store::PageRequest page{1000, ""};
    do {
      absl::StatusOr<store::Page<store::RunRecord>> p = store_->ListRuns(filter, page);
      if (!p.ok()) return p.status();
      for (store::RunRecord& r : p->items) {
        const bool complete = r.state == store::RunState::kSucceeded ||
                              (r.state == store::RunState::kFailed && !r.interrupted);
        const bool bound = std::any_of(r.bindings.begin(), r.bindings.end(),
                                       [&](const store::Binding& b) { return b.generation_point == point; });
        if (complete && bound) runs.push_back(std::move(r));
      }
      page.page_token = p->next_page_token;
    } while (!page.page_token.empty());
  }
  std::sort(runs.begin(), runs.end(), [](const store::RunRecord& a, const store::RunRecord& b) { return a.id > b.id; });
  if (runs.size() > max_runs) runs.resize(max_runs);

  absl::StatusOr<ArtifactCode> code = VerifiedCode(candidate);
  if (!code.ok()) return code.status();
  std::map<std::string, store::BlueprintRecord> sources;
  for (const store::BlueprintRecord& bp : *bps) sources[bp.digest] = bp;
  for (const store::RunRecord& run : runs) {
    if (Cancelled()) return absl::CancelledError("the backtest was cancelled");
    const store::BlueprintRecord& bp = sources[run.blueprint_digest];
    std::vector<store::Binding> others;
    for (const store::Binding& b : run.bindings) {
      if (b.generation_point != point) others.push_back(b);
    }
    absl::StatusOr<std::vector<BoundArtifact>> artifacts = LoadArtifacts(store_, others);
    if (!artifacts.ok()) return artifacts.status();
    artifacts->push_back(BoundArtifact{point, candidate.digest, *code});
    absl::StatusOr<sandbox::Limits> limits = LimitsFromProfile(run.engine_profile_json);
    if (!limits.ok()) return limits.status();
    absl::StatusOr<std::string> input_json = store_->GetBlob(run.input_digest);
    if (!input_json.ok()) return input_json.status();
    absl::StatusOr<Value> input = sandbox::ParseJson(*input_json);
    if (!input.ok()) return absl::DataLossError(absl::StrCat(RunName(run.id), ": the recorded input does not parse"));
    std::string recorded = ErrorJson(run.error);
    if (run.state == store::RunState::kSucceeded) {
      absl::StatusOr<std::string> o = store_->GetBlob(run.output_digest);
      if (!o.ok()) return o.status();
      recorded = *std::move(o);
    }
    ExecuteOptions opts;
    opts.limits = *limits;
    opts.deadline = Clock::now() + engine_options_.run_deadline;
    opts.lua_runner = lua_runner_;
    // A whole run can take long: a watcher stops it as soon as the backtest is cancelled.
    RunInterrupt interrupt;
    opts.interrupt = &interrupt;
    std::mutex mu;
    std::condition_variable cv;
    bool finished = false;
    std::thread watcher;
    if (options_.cancelled) {
      watcher = std::thread([&] {
        std::unique_lock<std::mutex> lock(mu);
        while (!cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return finished; })) {
          if (Cancelled()) {
            interrupt.Interrupt(absl::CancelledError("the backtest was cancelled"));
            return;
          }
        }
      });
    }
    absl::StatusOr<Canonical> output =
        ExecuteBlueprint(bp.source, absl::StrCat(bp.name, ".lua"), *artifacts, *input, opts);
    if (watcher.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu);
        finished = true;
      }
      cv.notify_one();
      watcher.join();
    }
    if (!output.ok() && !absl::IsFailedPrecondition(output.status()) && !absl::IsResourceExhausted(output.status())) {
      return output.status();  // infrastructure: no verdict
    }
    std::string replayed = output.ok() ? output->json : ErrorJson(RecordedError(std::string(output.status().message())));
    ++out->runs;
    if (replayed == recorded) {
      ++out->runs_equal;
      continue;
    }
    ++out->runs_different;
    store::BacktestDifferenceRecord d;
    d.run_id = run.id;
    d.step = -1;
    d.input_json = *std::move(input_json);
    d.recorded_json = std::move(recorded);
    d.candidate_json = std::move(replayed);
    for (const store::Binding& b : run.bindings) {
      if (b.generation_point == point) d.recorded_artifact_digest = b.artifact_digest;
    }
    AddDifference(out, std::move(d));
  }
  return absl::OkStatus();
}

absl::Status AddBacktestSummary(store::Store* store, ArtifactView* view) {
  absl::StatusOr<store::BacktestRecord> b = store->GetBacktest(view->record.digest, false);
  if (absl::IsNotFound(b.status())) return absl::OkStatus();
  if (!b.ok()) return b.status();
  view->backtest = *std::move(b);
  return absl::OkStatus();
}

// ---- the engine's entry points --------------------------------------------------------------

absl::StatusOr<TryOutcome> Engine::TryArtifact(std::string_view name, std::string_view input_json,
                                               const RunPolicy& limits) {
  absl::StatusOr<sandbox::Limits> effective = EffectiveLimits(limits);
  if (!effective.ok()) return effective.status();
  absl::StatusOr<ArtifactView> view = GetArtifact(name);
  if (!view.ok()) return view.status();
  return TryCode(lua_runner_, view->record, input_json, *effective, options_.run_deadline);
}

absl::StatusOr<store::BacktestRecord> Engine::BacktestRevision(std::string_view name, const BacktestRequest& request,
                                                               const std::function<bool()>& cancelled) {
  absl::StatusOr<ArtifactView> view = GetArtifact(name);
  if (!view.ok()) return view.status();
  BacktesterOptions o;
  o.parallelism = options_.backtest_parallelism;
  // The revision runs use now, for the point and spec the candidate was written for.
  o.live_revision = [this](const store::ArtifactRecord& c) -> absl::StatusOr<std::string> {
    absl::StatusOr<store::LiveRevision> live = store_->GetLiveRevision(c.generation_point, c.provenance.spec_digest);
    if (absl::IsNotFound(live.status())) return std::string();
    if (!live.ok()) return live.status();
    return live->artifact_digest;
  };
  o.cancelled = cancelled;
  return Backtester(store_, lua_runner_, options_, std::move(o)).Run(view->record, request);
}

absl::StatusOr<store::BacktestRecord> Engine::GetBacktest(std::string_view name) {
  absl::StatusOr<ArtifactView> view = GetArtifact(name);
  if (!view.ok()) return view.status();
  return store_->GetBacktest(view->record.digest, true);
}

}  // namespace rote::orchestrator::engine

#include "orchestrator/generate/pipeline.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "orchestrator/engine/regex_artifact.h"
#include "orchestrator/engine/validate.h"
#include "orchestrator/generate/constraint.h"
#include "orchestrator/generate/extract.h"
#include "orchestrator/generate/lua_names.h"
#include "orchestrator/generate/prompt.h"
#include "sandbox/value.h"
#include "spdlog/spdlog.h"
#include "store/digest.h"

namespace rote::orchestrator::generate {

using sandbox::Array;
using sandbox::Map;
using sandbox::Value;

namespace {

constexpr std::string_view kRequestFormat = "rote-generation-request/1";
// Provenance author of generated artifacts (hand-written ones from lockfiles say "expert").
constexpr std::string_view kAuthorModel = "model";

int HexValue(char c) { return c >= 'a' ? c - 'a' + 10 : c - '0'; }

// Sampling randomness per (request, attempt): never depends on which requests run together or
// in what order they were submitted.
uint64_t SamplingKey(std::string_view request_digest, int32_t attempt) {
  const std::string d = store::Sha256Digest(absl::StrCat(std::string(request_digest), "/attempt/", attempt));
  uint64_t key = 0;
  for (size_t i = store::kDigestPrefix.size(); i < store::kDigestPrefix.size() + 16; ++i) {
    key = (key << 4) | static_cast<uint64_t>(HexValue(d[i]));
  }
  return key;
}

std::string FailureMessage(std::string_view point_name, int32_t attempts, std::string_view last_failure,
                           std::string_view request_digest) {
  const std::string hex(request_digest.substr(std::min(request_digest.size(), store::kDigestPrefix.size())));
  return absl::StrCat("no candidate for '", std::string(point_name), "' passed validation in ", attempts,
                      attempts == 1 ? " attempt" : " attempts", "; the last one failed: ", std::string(last_failure),
                      ". Every attempt's prompt and output is recorded in generations/", hex,
                      " (read them with `rote generations get ", hex,
                      "`). Sharpen the task or the examples, or allow more attempts; repeating the same request "
                      "gives the same result");
}

bool SameAttempts(const std::vector<store::GenerationAttempt>& a, const std::vector<store::GenerationAttempt>& b,
                  std::string* detail) {
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    if (i >= a.size() || i >= b.size()) {
      *detail = absl::StrCat("the recorded chain has ", a.size(), " attempts, the re-derived one ", b.size());
      return false;
    }
    if (a[i].prompt_digest != b[i].prompt_digest) {
      *detail = absl::StrCat("attempt ", i + 1, ": prompt ", a[i].prompt_digest, " recorded, ", b[i].prompt_digest, " now");
      return false;
    }
    if (a[i].output_digest != b[i].output_digest) {
      *detail = absl::StrCat("attempt ", i + 1, ": output ", a[i].output_digest, " recorded, ", b[i].output_digest, " now");
      return false;
    }
    if (a[i].failure != b[i].failure) {
      *detail = absl::StrCat("attempt ", i + 1, ": failure '", a[i].failure, "' recorded, '", b[i].failure, "' now");
      return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<engine::GenerationPoint> PointFromParts(std::string_view name, engine::ArtifactKind kind,
                                                       std::string_view task, std::string_view signature,
                                                       const std::vector<std::string>& examples_json) {
  engine::GenerationPoint p;
  p.name = std::string(name);
  p.kind = kind;
  p.task = std::string(task);
  p.signature = std::string(signature);
  const char* expected_key = kind == engine::ArtifactKind::kRe2Pattern ? "matches" : "output";
  for (size_t i = 0; i < examples_json.size(); ++i) {
    absl::StatusOr<Value> v = sandbox::ParseJson(examples_json[i]);
    if (!v.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("example ", i + 1, " is not JSON: ", v.status().message()));
    }
    const Map* m = v->is_map() ? &v->as_map() : nullptr;
    const auto held = m != nullptr ? m->find("held_out") : Map::const_iterator();
    const bool has_held = m != nullptr && held != m->end();
    if (m == nullptr || m->size() != (has_held ? 3u : 2u) || !m->count("input") || !m->count(expected_key) ||
        (has_held && !held->second.is_bool())) {
      return absl::InvalidArgumentError(absl::StrCat("example ", i + 1, " must be an object with exactly \"input\" and \"",
                                                     expected_key, "\", and optionally \"held_out\": true"));
    }
    p.examples.push_back(engine::Example{m->at("input"), m->at(expected_key), has_held && held->second.as_bool()});
  }
  if (absl::Status s = engine::Seal(&p); !s.ok()) return s;
  return p;
}

std::string AdhocGenerationPointKey(std::string_view point_name) {
  return absl::StrCat("_adhoc/", std::string(point_name));
}

struct GenerationPipeline::Verdict {
  bool passed = false;
  std::string candidate;  // the extracted code, or the raw output when nothing could be extracted
  bool extracted = false;  // whether `candidate` is extracted code
  engine::ArtifactCode code;
  std::string report_json;
  std::string failure;
  std::string reason;  // a word for `failure`, for metrics (PipelineOptions::on_attempt)
  // Passed, but the auto review policy must leave it to a person (engine::Validation).
  std::string review_reason;
};

struct GenerationPipeline::Chain {
  engine::GenerationPoint point;
  Decoding decoding;
  std::string request_digest;
  const GenerationJob* job = nullptr;  // null when regenerating
  std::vector<store::GenerationAttempt> attempts;
  std::optional<PreviousAttempt> previous;
  bool done = false;
  absl::Status error;              // infrastructure failure or CANCELLED; the chain stops
  std::optional<Verdict> accepted;  // the verdict of the attempt that passed
  std::string last_failure;

  void Progress(const std::string& line) const {
    if (job != nullptr && job->context.progress) job->context.progress(absl::StrCat(point.name, ": ", line));
  }
};

GenerationPipeline::GenerationPipeline(store::Store* store, CodeModel* model, engine::LuaArtifactRunner* lua_runner,
                                       ReviewPolicy review_policy, PipelineOptions options)
    : store_(store),
      model_(model),
      lua_runner_(lua_runner),
      review_policy_(std::move(review_policy)),
      options_(std::move(options)) {}

absl::Status GenerationPipeline::SetGrammar(const engine::GenerationPoint& point, Decoding* decoding) const {
  decoding->grammar.clear();
  if (!options_.constrain_replies) return absl::OkStatus();
  absl::StatusOr<SandboxNames> names = ProbeSandboxNames();
  if (!names.ok()) return names.status();
  decoding->grammar = ConstraintDigest(ReplyConstraint(point.kind, *names));
  return absl::OkStatus();
}

absl::StatusOr<std::string> GenerationPipeline::RequestDigest(const engine::GenerationPoint& point,
                                                              const Decoding& decoding) const {
  if (absl::Status s = CheckDecoding(decoding); !s.ok()) return s;
  absl::StatusOr<Value> decoding_value = sandbox::ParseJson(DecodingJson(decoding));
  if (!decoding_value.ok()) return decoding_value.status();
  const ModelIdentity model = model_->identity();
  Map limits;
  limits["max_instructions"] = Value::Int(static_cast<int64_t>(options_.validation_limits.max_instructions));
  limits["max_memory_bytes"] = Value::Int(static_cast<int64_t>(options_.validation_limits.max_memory_bytes));
  limits["max_output_bytes"] = Value::Int(static_cast<int64_t>(options_.validation_limits.max_output_bytes));
  Map m;
  m["decoding"] = *std::move(decoding_value);
  m["format"] = Value::String(std::string(kRequestFormat));
  m["limits"] = Value::FromMap(std::move(limits));
  m["model"] = Value::String(model.digest);
  m["numerics"] = Value::String(model.numerics_profile);
  m["re2"] = Value::String(engine::Re2ProfileJson());
  m["sandbox"] = Value::String(std::string(sandbox::kProfileName));
  m["spec"] = Value::String(point.digest);
  m["template"] = Value::String(std::string(TemplateVersion(point.kind)));
  absl::StatusOr<std::string> json = sandbox::CanonicalJson(Value::FromMap(std::move(m)));
  if (!json.ok()) return json.status();
  return store::Sha256Digest(*json);
}

absl::StatusOr<GenerationPipeline::Verdict> GenerationPipeline::Evaluate(const engine::GenerationPoint& point,
                                                                         std::string_view output) {
  Verdict v;
  absl::StatusOr<std::string> code = ExtractCode(point.kind, output);
  if (!code.ok()) {
    v.candidate = std::string(output);
    v.failure = std::string(code.status().message());
    v.reason = "no_code";
    return v;
  }
  v.candidate = *code;
  v.extracted = true;
  if (size_t bad = sandbox::FindInvalidUtf8(*code); bad != std::string::npos) {
    v.failure = absl::StrCat("the code is not valid UTF-8 (byte ", bad, ")");
    v.reason = "invalid_utf8";
    return v;
  }
  if (point.kind == engine::ArtifactKind::kLuaFunction) {
    // Compile first (text only: LuaState::Load refuses binary chunks), so that a syntax error is
    // reported as Lua words it, before the name check reads the tokens.
    absl::StatusOr<std::unique_ptr<sandbox::LuaState>> state = sandbox::LuaState::Create(options_.validation_limits);
    if (!state.ok()) return state.status();
    if (absl::Status s = (*state)->NewEnvironment(); !s.ok()) return s;
    if (absl::Status s = (*state)->Load(*code, point.name); !s.ok()) {
      if (!absl::IsInvalidArgument(s) && !absl::IsFailedPrecondition(s)) return s;
      v.failure = absl::StrCat("it does not compile: ", s.message());
      v.reason = "compile_error";
      return v;
    }
    absl::StatusOr<std::vector<GlobalUse>> uses = GlobalUses(*code);
    if (!uses.ok()) {
      v.failure = absl::StrCat("it cannot be read: ", uses.status().message());
      v.reason = "compile_error";
      return v;
    }
    absl::StatusOr<SandboxNames> names = ProbeSandboxNames();
    if (!names.ok()) return names.status();
    if (std::string unknown = UnknownNamesMessage(*uses, *names); !unknown.empty()) {
      v.failure = absl::StrCat("it ", unknown);
      v.reason = "unknown_names";
      return v;
    }
  }
  v.code.kind = point.kind;
  v.code.source = *code;
  absl::StatusOr<std::string> options = engine::NormalizeOptions(point.kind, "");
  if (!options.ok()) return options.status();
  v.code.options_json = *options;
  absl::StatusOr<engine::Validation> validation =
      engine::ValidateArtifact(point, v.code, lua_runner_, options_.validation_limits);
  if (!validation.ok()) return validation.status();
  v.report_json = validation->report_json;
  if (!validation->passed) {
    v.failure = absl::StrCat(validation->refused ? "it was " : "it failed ", validation->first_failure);
    v.reason = validation->refused ? "refused" : "tests_failed";
    return v;
  }
  v.passed = true;
  v.review_reason = validation->review_reason;
  return v;
}

namespace {
// Prompt tokens between two "prompt N/M tokens read" progress lines.
constexpr int32_t kPrefillProgressTokens = 512;
}  // namespace

void GenerationPipeline::RunChains(std::vector<Chain*>& chains, const std::function<bool()>& cancelled) {
  absl::StatusOr<SandboxNames> names = ProbeSandboxNames();
  if (!names.ok()) {
    for (Chain* c : chains) {
      c->error = names.status();
      c->done = true;
    }
    return;
  }
  for (int32_t attempt = 1;; ++attempt) {
    std::vector<Chain*> active;
    for (Chain* c : chains) {
      if (!c->done && attempt > c->decoding.max_attempts) c->done = true;
      // A request names its grammar by digest: this server must hold it to the same one (the
      // regeneration of an artifact made under another sandbox profile or grammar version).
      if (!c->done && !c->decoding.grammar.empty()) {
        const std::string have = ConstraintDigest(ReplyConstraint(c->point.kind, *names));
        if (have != c->decoding.grammar) {
          c->error = absl::FailedPreconditionError(absl::StrCat("the request for '", c->point.name,
                                                                "' was held to grammar ", c->decoding.grammar,
                                                                "; this server's reply grammar for it is ", have));
          c->done = true;
        }
      }
      if (!c->done) active.push_back(c);
    }
    if (active.empty()) return;

    std::vector<CompletionRequest> requests(active.size());
    std::vector<std::string> prompts(active.size());
    // Progress lines at fixed token counts, so the lines do not depend on how the model's
    // steps happened to be batched or timed.
    std::vector<int32_t> next_progress(active.size(), options_.progress_every_tokens);
    std::vector<int32_t> next_prefill(active.size(), kPrefillProgressTokens);
    for (size_t i = 0; i < active.size(); ++i) {
      Chain* c = active[i];
      const std::string of = absl::StrCat(attempt, "/", c->decoding.max_attempts);
      CompletionRequest& r = requests[i];
      r.messages = BuildPrompt(c->point, *names, c->previous);
      prompts[i] = model_->RenderPrompt(r.messages);
      r.decoding = AttemptDecoding(c->decoding, attempt);
      r.sampling_key = SamplingKey(c->request_digest, attempt);
      if (!c->decoding.grammar.empty()) r.constraint = ReplyConstraint(c->point.kind, *names);
      // Reading a long prompt: a line at every kPrefillProgressTokens prompt tokens read (fixed
      // counts again, whatever the chunks were).
      r.on_prefill = [c, of, i, &next_prefill](int32_t read, int32_t prompt) {
        while (read >= next_prefill[i] && next_prefill[i] < prompt) {
          c->Progress(absl::StrCat("attempt ", of, ", prompt ", next_prefill[i], "/", prompt, " tokens read"));
          next_prefill[i] += kPrefillProgressTokens;
        }
      };
      r.on_text = [this, c, of, i, &next_progress](std::string_view text, int32_t tokens) {
        if (c->job != nullptr && c->job->events.token_text) c->job->events.token_text(text);
        while (options_.progress_every_tokens > 0 && tokens >= next_progress[i]) {
          c->Progress(absl::StrCat("attempt ", of, ", ", next_progress[i], " tokens"));
          next_progress[i] += options_.progress_every_tokens;
        }
      };
      c->Progress(absl::StrCat("attempt ", of, " started"));
      if (c->job != nullptr && c->job->events.attempt_started) c->job->events.attempt_started(attempt);
    }

    const int64_t batch_start_ms = UnixNowMs();
    std::vector<absl::StatusOr<Completion>> results = model_->CompleteAll(std::move(requests), cancelled);
    const int64_t batch_ms = std::max<int64_t>(0, UnixNowMs() - batch_start_ms);

    for (size_t i = 0; i < active.size(); ++i) {
      Chain* c = active[i];
      const std::string of = absl::StrCat(attempt, "/", c->decoding.max_attempts);
      absl::StatusOr<Completion>& r = i < results.size() ? results[i] : results.emplace_back(absl::InternalError("missing"));
      if (r.ok() && !r->grammar_digest.empty() && r->grammar_digest != c->decoding.grammar) {
        r = absl::InternalError(absl::StrCat("the model held the reply to grammar ", r->grammar_digest,
                                             ", not the request's ", c->decoding.grammar));
      }
      if (!r.ok() || r->finish_reason == "cancelled") {
        c->error = !r.ok() ? r.status()
                           : absl::CancelledError(absl::StrCat("the generation of '", c->point.name, "' was cancelled"));
        c->done = true;
        continue;
      }
      absl::StatusOr<store::BlobRef> prompt_blob = store_->PutBlob(prompts[i]);
      absl::StatusOr<store::BlobRef> output_blob =
          prompt_blob.ok() ? store_->PutBlob(r->text) : absl::StatusOr<store::BlobRef>(prompt_blob.status());
      if (!output_blob.ok()) {
        c->error = output_blob.status();
        c->done = true;
        continue;
      }
      absl::StatusOr<Verdict> verdict = Evaluate(c->point, r->text);
      if (!verdict.ok()) {
        c->error = verdict.status();
        c->done = true;
        continue;
      }
      store::GenerationAttempt at;
      at.index = attempt;
      at.prompt_digest = prompt_blob->digest;
      at.output_digest = output_blob->digest;
      if (verdict->extracted) {
        absl::StatusOr<store::BlobRef> code_blob = store_->PutBlob(verdict->candidate);
        if (!code_blob.ok()) {
          c->error = code_blob.status();
          c->done = true;
          continue;
        }
        at.code_digest = code_blob->digest;
      }
      at.prompt_tokens = r->prompt_tokens;
      at.output_tokens = r->tokens;
      at.start_ms = r->start_ms > 0 ? r->start_ms : batch_start_ms;
      at.duration_ms = r->start_ms > 0 ? r->duration_ms : batch_ms;
      // Failures travel in API strings and prompts: always valid UTF-8.
      at.failure = verdict->passed ? "" : Truncated(verdict->failure, kMaxQuotedCandidateBytes);
      c->attempts.push_back(at);
      if (options_.on_attempt) {
        options_.on_attempt(verdict->passed, verdict->reason, at.prompt_tokens, at.output_tokens,
                            static_cast<double>(at.duration_ms) / 1000.0);
      }
      if (verdict->passed) {
        c->Progress(absl::StrCat("attempt ", of, " passed (", r->tokens, " tokens)"));
        c->accepted = *std::move(verdict);
        c->done = true;
        continue;
      }
      c->Progress(absl::StrCat("attempt ", of, " failed (", r->tokens, " tokens, output ", at.output_digest,
                               "): ", at.failure));
      if (c->job != nullptr && c->job->events.attempt_failed) c->job->events.attempt_failed(attempt, at.failure);
      c->last_failure = at.failure;
      c->previous = PreviousAttempt{attempt, verdict->candidate, at.failure};
    }
  }
}

absl::StatusOr<std::optional<absl::StatusOr<engine::GeneratedArtifact>>> GenerationPipeline::Answered(
    const GenerationJob& job, const Chain& chain) {
  using Answer = std::optional<absl::StatusOr<engine::GeneratedArtifact>>;
  absl::StatusOr<std::string> cached = store_->GetCachedGeneration(chain.request_digest);
  if (cached.ok()) {
    absl::StatusOr<store::ArtifactRecord> a = store_->GetArtifact(*cached);
    if (!a.ok()) return a.status();
    if (a->state == store::ReviewState::kRejected) {
      return Answer(absl::FailedPreconditionError(absl::StrCat(
          "request ", chain.request_digest, " for '", chain.point.name, "' gave artifact ", a->digest,
          ", which a reviewer rejected; the same request gives the same code, so change the task, the examples "
          "or the decoding (e.g. the seed) to get another")));
    }
    if (absl::Status s = RecordRequester(store_, a->digest, job.context.principal); !s.ok()) return s;
    chain.Progress(absl::StrCat("answered from the generation cache: artifact ", a->digest));
    if (options_.on_answered) options_.on_answered("artifact");
    return Answer(engine::GeneratedArtifact{a->digest, true});
  }
  if (!absl::IsNotFound(cached.status())) return cached.status();
  absl::StatusOr<FailedGeneration> failed = GetFailedGeneration(chain.request_digest);
  if (failed.ok()) {
    const std::string last = failed->attempts.empty() ? "" : failed->attempts.back().failure;
    if (options_.on_answered) options_.on_answered("failure");
    chain.Progress(absl::StrCat("answered from the record of the same request: generations/",
                                chain.request_digest.substr(store::kDigestPrefix.size())));
    return Answer(absl::FailedPreconditionError(FailureMessage(
        chain.point.name, static_cast<int32_t>(failed->attempts.size()), last, chain.request_digest)));
  }
  if (!absl::IsNotFound(failed.status())) return failed.status();
  return Answer();
}

absl::StatusOr<engine::GeneratedArtifact> GenerationPipeline::StoreOutcome(const GenerationJob& job, const Chain& c) {
  if (!c.error.ok()) return c.error;
  const ModelIdentity model = model_->identity();
  store::GenerationRecord g;
  g.request_digest = c.request_digest;
  g.generation_point = job.context.generation_point_key;
  g.spec_digest = c.point.digest;
  g.model_digest = model.digest;
  g.numerics_profile = model.numerics_profile;
  g.prompt_template_version = std::string(TemplateVersion(c.point.kind));
  g.decoding_json = DecodingJson(c.decoding);
  g.device = model.device;
  g.attempts = c.attempts;
  if (!c.accepted.has_value()) {
    g.failure = c.last_failure;
    if (absl::StatusOr<store::GenerationRecord> put = store_->PutGeneration(g); !put.ok()) return put.status();
    return absl::FailedPreconditionError(
        FailureMessage(c.point.name, static_cast<int32_t>(c.attempts.size()), c.last_failure, c.request_digest));
  }
  const Verdict& v = *c.accepted;
  absl::StatusOr<std::string> digest = engine::ArtifactDigest(v.code);
  if (!digest.ok()) return digest.status();

  absl::StatusOr<store::ArtifactRecord> existing = store_->GetArtifact(*digest);
  if (!existing.ok() && !absl::IsNotFound(existing.status())) return existing.status();
  if (existing.ok()) {
    // The same code was stored before (another request, or another point whose tests it also
    // passes): it keeps its provenance and review state.
    if (existing->state == store::ReviewState::kRejected) {
      g.passed = true;
      g.artifact_digest = *digest;
      if (absl::StatusOr<store::GenerationRecord> put = store_->PutGeneration(g); !put.ok()) return put.status();
      return absl::FailedPreconditionError(absl::StrCat(
          "the model wrote artifact ", *digest, " for '", c.point.name,
          "' again, which a reviewer rejected; change the task, the examples or the decoding (e.g. the seed)"));
    }
  } else {
    store::ArtifactRecord a;
    a.digest = *digest;
    a.kind = engine::KindName(v.code.kind);
    a.generation_point = job.context.generation_point_key;
    a.source = v.code.source;
    a.options_json = v.code.options_json;
    a.provenance.spec_digest = c.point.digest;
    a.provenance.model_digest = model.digest;
    a.provenance.numerics_profile = model.numerics_profile;
    a.provenance.prompt_template_version = std::string(TemplateVersion(c.point.kind));
    a.provenance.decoding_json = DecodingJson(c.decoding);
    a.provenance.request_digest = c.request_digest;
    a.provenance.attempts = c.attempts;
    a.provenance.device = model.device;
    a.provenance.author = std::string(kAuthorModel);
    a.validation_report_json = v.report_json;
    absl::StatusOr<store::ArtifactRecord> put = store_->PutArtifact(a);
    if (!put.ok()) return put.status();
    const ReviewMode mode = review_policy_.ModeForKey(a.generation_point);
    if (mode == ReviewMode::kAuto && !v.review_reason.empty()) {
      c.Progress(absl::StrCat("artifact ", put->digest, " waits for a reviewer: ", v.review_reason));
    } else if (mode == ReviewMode::kAuto && put->state == store::ReviewState::kPending) {
      const std::vector<bool> held_out = engine::HeldOutExamples(c.point);
      const auto held = std::count(held_out.begin(), held_out.end(), true);
      store::ReviewRequest review;
      review.artifact_digest = put->digest;
      review.principal = std::string(kPolicyReviewer);
      review.decision = store::ReviewState::kApproved;
      review.comment = absl::StrCat("review policy 'auto': all ", c.point.examples.size(),
                                    c.point.kind == engine::ArtifactKind::kLuaFunction ? " tests" : " examples",
                                    " passed", held > 0 ? absl::StrCat(" (", held, " of them held out)") : "");
      review.expected_etag = put->etag;
      // The auto policy means runs use it at once: it becomes the point's live revision.
      review.promote = true;
      absl::StatusOr<store::ArtifactRecord> reviewed = store_->ReviewArtifact(review);
      // ABORTED: someone reviewed it in between; their decision stands.
      if (!reviewed.ok() && !absl::IsAborted(reviewed.status())) return reviewed.status();
    }
  }
  g.passed = true;
  g.artifact_digest = *digest;
  if (absl::StatusOr<store::GenerationRecord> put = store_->PutGeneration(g); !put.ok()) return put.status();
  absl::StatusOr<std::string> cached = store_->PutCachedGeneration(c.request_digest, *digest);
  if (!cached.ok()) return cached.status();
  if (*cached != *digest) {
    // Two derivations of one request disagreed: the generation step is not reproducible here.
    spdlog::error("request {} gave artifact {} now but {} before; keeping the earlier one", c.request_digest, *digest,
                  *cached);
  }
  if (absl::Status s = RecordRequester(store_, *cached, job.context.principal); !s.ok()) return s;
  return engine::GeneratedArtifact{*cached, false};
}

// Keeps this replica's claims on the requests it generates (PipelineOptions::replica_id): renews
// them while it lives, releases them when it goes.
class GenerationPipeline::ClaimKeeper {
 public:
  ClaimKeeper(GenerationPipeline* pipeline, std::vector<std::string> digests)
      : pipeline_(pipeline), digests_(std::move(digests)) {
    if (!Shared()) return;
    renewer_ = std::thread([this] {
      std::unique_lock lock(mu_);
      while (!cv_.wait_for(lock, pipeline_->options_.claim_lease / 3, [this] { return done_; })) {
        for (const std::string& d : digests_) {
          pipeline_->store_
              ->ClaimGeneration(d, pipeline_->options_.replica_id, pipeline_->options_.claim_lease.count())
              .IgnoreError();
        }
      }
    });
  }
  ~ClaimKeeper() {
    if (!Shared()) return;
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    renewer_.join();
    for (const std::string& d : digests_) {
      pipeline_->store_->ReleaseGeneration(d, pipeline_->options_.replica_id).IgnoreError();
    }
  }
  ClaimKeeper(const ClaimKeeper&) = delete;
  ClaimKeeper& operator=(const ClaimKeeper&) = delete;

 private:
  bool Shared() const { return !pipeline_->options_.replica_id.empty() && pipeline_->store_->SupportsRunLeases(); }
  GenerationPipeline* const pipeline_;
  const std::vector<std::string> digests_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread renewer_;
};

std::vector<absl::StatusOr<engine::GeneratedArtifact>> GenerationPipeline::GenerateAll(
    const std::vector<GenerationJob>& jobs) {
  std::vector<absl::StatusOr<engine::GeneratedArtifact>> results(jobs.size(),
                                                                 absl::InternalError("generation did not run"));
  std::vector<Chain> chains(jobs.size());
  std::vector<size_t> to_run;
  std::vector<size_t> to_wait;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const GenerationJob& job = jobs[i];
    Chain& c = chains[i];
    c.job = &job;
    absl::StatusOr<engine::GenerationPoint> point = engine::PointFromRecord(job.spec);
    if (!point.ok()) {
      results[i] = point.status();
      continue;
    }
    c.point = *std::move(point);
    c.decoding = job.decoding.value_or(options_.decoding);
    if (job.context.retry > 0) c.decoding.retry = job.context.retry;
    if (absl::Status s = SetGrammar(c.point, &c.decoding); !s.ok()) {
      results[i] = s;
      continue;
    }
    absl::StatusOr<std::string> digest = RequestDigest(c.point, c.decoding);
    if (!digest.ok()) {
      results[i] = digest.status();
      continue;
    }
    c.request_digest = *digest;
    // Regeneration reads the spec back by digest.
    if (absl::Status s = store_->PutGenerationSpec(job.spec); !s.ok()) {
      results[i] = s;
      continue;
    }
    absl::StatusOr<std::optional<absl::StatusOr<engine::GeneratedArtifact>>> answered = Answered(job, c);
    if (!answered.ok()) {
      results[i] = answered.status();
      continue;
    }
    if (answered->has_value()) {
      results[i] = **answered;
      continue;
    }
    std::lock_guard lock(mu_);
    if (in_flight_.insert(c.request_digest).second) {
      to_run.push_back(i);
    } else {
      to_wait.push_back(i);
    }
  }

  const std::vector<size_t> on_other_replicas = ClaimShared(chains, &to_run);
  if (!to_run.empty()) {
    std::vector<std::string> claimed;
    for (size_t i : to_run) claimed.push_back(chains[i].request_digest);
    // Renews this replica's claims while the model works; releases them once the outcomes are
    // stored (the identical requests waiting elsewhere are answered from those).
    std::optional<ClaimKeeper> keeper;
    keeper.emplace(this, std::move(claimed));
    std::vector<Chain*> running;
    for (size_t i : to_run) running.push_back(&chains[i]);
    // One run's points share its cancellation; the batch stops only when all of them are cancelled.
    auto cancelled = [&jobs, &to_run] {
      for (size_t i : to_run) {
        if (!jobs[i].context.cancelled || !jobs[i].context.cancelled()) return false;
      }
      return true;
    };
    RunChains(running, cancelled);
    for (size_t i : to_run) results[i] = StoreOutcome(jobs[i], chains[i]);
    keeper.reset();
    {
      std::lock_guard lock(mu_);
      for (size_t i : to_run) in_flight_.erase(chains[i].request_digest);
    }
    in_flight_cv_.notify_all();
  }

  for (size_t i : to_wait) {
    const GenerationJob& job = jobs[i];
    {
      std::unique_lock lock(mu_);
      while (in_flight_.count(chains[i].request_digest)) {
        if (job.context.cancelled && job.context.cancelled()) break;
        in_flight_cv_.wait_for(lock, std::chrono::milliseconds(200));
      }
    }
    if (job.context.cancelled && job.context.cancelled()) {
      results[i] = absl::CancelledError(absl::StrCat("the generation of '", chains[i].point.name, "' was cancelled"));
      continue;
    }
    absl::StatusOr<std::optional<absl::StatusOr<engine::GeneratedArtifact>>> answered = Answered(job, chains[i]);
    if (!answered.ok()) {
      results[i] = answered.status();
    } else if (answered->has_value()) {
      results[i] = **answered;
    } else {
      // The other generation ended without an answer (cancelled, or an infrastructure error).
      results[i] = std::move(GenerateAll({job})[0]);
    }
  }
  for (size_t i : on_other_replicas) results[i] = WaitForReplica(jobs[i], chains[i]);
  return results;
}

// ---- generations shared between replicas -----------------------------------------------------

std::vector<size_t> GenerationPipeline::ClaimShared(std::vector<Chain>& chains, std::vector<size_t>* to_run) {
  std::vector<size_t> elsewhere;
  if (options_.replica_id.empty() || !store_->SupportsRunLeases()) return elsewhere;
  std::vector<size_t> mine;
  for (size_t i : *to_run) {
    absl::StatusOr<bool> held =
        store_->ClaimGeneration(chains[i].request_digest, options_.replica_id, options_.claim_lease.count());
    // Without an answer from the database this replica generates: at worst the request reaches
    // the model twice, and the first record stored wins.
    if (!held.ok() || *held) {
      mine.push_back(i);
      continue;
    }
    elsewhere.push_back(i);
    chains[i].Progress("the same request is being generated on another replica; waiting for its result");
  }
  if (!elsewhere.empty()) {
    {
      std::lock_guard lock(mu_);
      for (size_t i : elsewhere) in_flight_.erase(chains[i].request_digest);
    }
    in_flight_cv_.notify_all();
  }
  *to_run = std::move(mine);
  return elsewhere;
}

absl::StatusOr<engine::GeneratedArtifact> GenerationPipeline::WaitForReplica(const GenerationJob& job, Chain& chain) {
  while (true) {
    if (job.context.cancelled && job.context.cancelled()) {
      return absl::CancelledError(absl::StrCat("the generation of '", chain.point.name, "' was cancelled"));
    }
    absl::StatusOr<std::optional<absl::StatusOr<engine::GeneratedArtifact>>> answered = Answered(job, chain);
    if (!answered.ok()) return answered.status();
    if (answered->has_value()) return **answered;
    // No answer yet: the other replica still holds its claim, or it released (or lost) it
    // without one (cancelled, died): then this replica generates.
    absl::StatusOr<bool> held =
        store_->ClaimGeneration(chain.request_digest, options_.replica_id, options_.claim_lease.count());
    if (held.ok() && *held) return std::move(GenerateAll({job})[0]);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

absl::StatusOr<std::optional<engine::GeneratedArtifact>> GenerationPipeline::Lookup(
    const store::GenerationSpecRecord& spec, const engine::GenerateContext& context) {
  absl::StatusOr<engine::GenerationPoint> point = engine::PointFromRecord(spec);
  if (!point.ok()) return point.status();
  Decoding decoding = options_.decoding;
  if (context.retry > 0) decoding.retry = context.retry;
  if (absl::Status s = SetGrammar(*point, &decoding); !s.ok()) return s;
  absl::StatusOr<std::string> digest = RequestDigest(*point, decoding);
  if (!digest.ok()) return digest.status();
  absl::StatusOr<std::string> cached = store_->GetCachedGeneration(*digest);
  if (absl::IsNotFound(cached.status())) return std::optional<engine::GeneratedArtifact>();
  if (!cached.ok()) return cached.status();
  return std::optional(engine::GeneratedArtifact{*cached, true});
}

absl::StatusOr<engine::GeneratedArtifact> GenerationPipeline::Generate(const store::GenerationSpecRecord& spec,
                                                                       const engine::GenerateContext& context) {
  GenerationJob job;
  job.spec = spec;
  job.context = context;
  return std::move(GenerateAll({job})[0]);
}

std::vector<absl::StatusOr<engine::GeneratedArtifact>> GenerationPipeline::GenerateTogether(
    const std::vector<engine::Generator::Request>& requests) {
  std::vector<GenerationJob> jobs(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    jobs[i].spec = requests[i].spec;
    jobs[i].context = requests[i].context;
  }
  return GenerateAll(jobs);
}

absl::StatusOr<FailedGeneration> GenerationPipeline::GetFailedGeneration(std::string_view request_digest) {
  absl::StatusOr<store::GenerationRecord> g = store_->GetGeneration(request_digest);
  if (!g.ok()) return g.status();
  if (g->passed) {
    return absl::NotFoundError(absl::StrCat("request ", std::string(request_digest), " passed: it made artifact ",
                                            g->artifact_digest));
  }
  return g;
}

absl::StatusOr<Regeneration> GenerationPipeline::Regenerate(const store::ArtifactRecord& artifact,
                                                            const std::function<bool()>& cancelled) {
  const store::Provenance& p = artifact.provenance;
  if (p.author != kAuthorModel || p.attempts.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("artifact ", artifact.digest, " was not generated by a model (author '",
                                                      p.author, "'): there is no recorded request to re-derive it from"));
  }
  const ModelIdentity model = model_->identity();
  if (p.model_digest != model.digest) {
    return absl::FailedPreconditionError(absl::StrCat("artifact ", artifact.digest, " was generated by model ",
                                                      p.model_digest, " but this server has model ", model.digest,
                                                      " loaded: start it with that model's directory"));
  }
  if (p.numerics_profile != model.numerics_profile) {
    return absl::FailedPreconditionError(absl::StrCat("artifact ", artifact.digest, " was generated under the '",
                                                      p.numerics_profile, "' numerics profile, this server runs '",
                                                      model.numerics_profile, "'"));
  }
  absl::StatusOr<store::GenerationSpecRecord> spec = store_->GetGenerationSpec(p.spec_digest);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<engine::GenerationPoint> point = engine::PointFromRecord(*spec);
  if (!point.ok()) return point.status();
  if (p.prompt_template_version != TemplateVersion(point->kind)) {
    return absl::FailedPreconditionError(absl::StrCat("artifact ", artifact.digest, " was generated with prompt template ",
                                                      p.prompt_template_version, "; this server has ",
                                                      std::string(TemplateVersion(point->kind))));
  }
  absl::StatusOr<Decoding> decoding = ParseDecodingJson(p.decoding_json);
  if (!decoding.ok()) return decoding.status();
  absl::StatusOr<std::string> digest = RequestDigest(*point, *decoding);
  if (!digest.ok()) return digest.status();
  if (*digest != p.request_digest) {
    return absl::FailedPreconditionError(absl::StrCat(
        "artifact ", artifact.digest, " was generated for request ", p.request_digest, "; the same spec, model and "
        "decoding give request ", *digest, " on this server, so its sandbox profile, RE2 options or validation limits "
        "differ from those the artifact was made under"));
  }
  Chain c;
  c.point = *std::move(point);
  c.decoding = *decoding;
  c.request_digest = *digest;
  std::vector<Chain*> chains{&c};
  RunChains(chains, cancelled ? cancelled : [] { return false; });
  if (!c.error.ok()) return c.error;
  Regeneration r;
  r.original_digest = artifact.digest;
  r.attempts = c.attempts;
  if (c.accepted.has_value()) {
    absl::StatusOr<std::string> regenerated = engine::ArtifactDigest(c.accepted->code);
    if (!regenerated.ok()) return regenerated.status();
    r.regenerated_digest = *regenerated;
  }
  std::string detail;
  const bool same_attempts = SameAttempts(p.attempts, c.attempts, &detail);
  r.matched = same_attempts && r.regenerated_digest == r.original_digest;
  if (r.matched) {
    r.detail = absl::StrCat("re-derived in ", c.attempts.size(), c.attempts.size() == 1 ? " attempt" : " attempts",
                            ": every prompt and output is byte-identical");
  } else if (!same_attempts) {
    r.detail = detail;
  } else {
    r.detail = absl::StrCat("the attempts match but the artifact digest is ", r.regenerated_digest);
  }
  return r;
}

}  // namespace rote::orchestrator::generate

#include "orchestrator/engine/generations.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "orchestrator/engine/names.h"
#include "store/digest.h"

namespace rote::orchestrator::engine {

namespace {

constexpr std::string_view kGenerations = "generations/";
constexpr std::string_view kArtifacts = "artifacts/";
constexpr std::string_view kAttempts = "/attempts/";
// Provenance author of generated artifacts: only they have a generation.
constexpr std::string_view kAuthorModel = "model";

absl::Status NotAnAttemptName(std::string_view name) {
  return absl::InvalidArgumentError(absl::StrCat(
      QuoteInput(name), " is not an attempt name; expected generations/{request hex}/attempts/{n} or "
      "artifacts/{digest hex}/attempts/{n} (64 lowercase hex digits, n from 1)"));
}

// [1-9][0-9]* within int32 (attempts are few).
bool ParseAttemptNumber(std::string_view s, int32_t* out) {
  if (s.empty() || s.size() > 9 || s[0] < '1' || s[0] > '9') return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = static_cast<int32_t>(v);
  return true;
}

absl::StatusOr<std::string> BlobText(store::Store* store, const std::string& digest) {
  if (digest.empty()) return std::string();
  return store->GetBlob(digest);
}

}  // namespace

absl::StatusOr<std::string> ParseGenerationName(std::string_view name) {
  if (name.starts_with(kGenerations)) {
    if (std::optional<std::string> digest = DigestFromId(name.substr(kGenerations.size()))) return *digest;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      QuoteInput(name), " is not a generation name; expected generations/{request hex} (64 lowercase hex digits, "
      "as a failed generation's error names it, or 8 or more of its first ones)"));
}

std::string GenerationName(std::string_view request_digest) {
  return absl::StrCat(std::string(kGenerations),
                      std::string(request_digest.substr(std::min(request_digest.size(), store::kDigestPrefix.size()))));
}

std::string CutUtf8(std::string text, int64_t max_bytes, bool* truncated) {
  const size_t limit = static_cast<size_t>(std::max<int64_t>(0, max_bytes));
  *truncated = text.size() > limit;
  if (!*truncated) return text;
  size_t cut = limit;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  text.resize(cut);
  return text;
}

absl::StatusOr<store::GenerationRecord> ProvenanceReader::GetGeneration(std::string_view name) {
  absl::StatusOr<std::string> digest = ParseGenerationName(name);
  if (!digest.ok()) {
    // An unambiguous prefix of 8 or more hex digits names the one generation it starts.
    const std::string_view id = name.starts_with(kGenerations) ? name.substr(kGenerations.size()) : "";
    if (id.size() < 8 || id.size() >= 64 || id.find_first_not_of("0123456789abcdef") != std::string_view::npos) {
      return digest.status();
    }
    absl::StatusOr<std::vector<std::string>> found =
        store_->FindGenerationsByPrefix(absl::StrCat("sha256:", std::string(id)), 6);
    if (!found.ok()) return found.status();
    if (found->empty()) {
      return absl::NotFoundError(absl::StrCat(std::string(name), " does not exist: no generation's request digest "
                                              "starts with ", std::string(id)));
    }
    if (found->size() > 1) {
      std::string candidates;
      for (size_t i = 0; i < std::min<size_t>(found->size(), 5); ++i) {
        absl::StrAppend(&candidates, i ? ", " : "", GenerationName((*found)[i]));
      }
      return absl::InvalidArgumentError(absl::StrCat(std::string(name), " is ambiguous: it starts ", candidates,
                                                     found->size() > 5 ? ", ..." : "",
                                                     "; give more hex digits"));
    }
    digest = (*found)[0];
  }
  absl::StatusOr<store::GenerationRecord> g = store_->GetGeneration(*digest);
  if (absl::IsNotFound(g.status())) {
    return absl::NotFoundError(absl::StrCat(std::string(name), " does not exist: no generation was recorded for request ",
                                            *digest));
  }
  return g;
}

absl::StatusOr<store::Page<store::GenerationRecord>> ProvenanceReader::ListGenerations(
    std::string_view generation_point, bool failed_only, const store::PageRequest& page) {
  if (!generation_point.empty()) {
    if (absl::Status s = CheckGenerationPointKey(generation_point, "generation_point"); !s.ok()) return s;
  }
  return store_->ListGenerations(store::GenerationFilter{std::string(generation_point), failed_only}, page);
}

absl::StatusOr<AttemptView> ProvenanceReader::GetAttempt(std::string_view name) {
  const size_t at = name.rfind(kAttempts);
  int32_t number = 0;
  if (at == std::string_view::npos || !ParseAttemptNumber(name.substr(at + kAttempts.size()), &number)) {
    return NotAnAttemptName(name);
  }
  const std::string_view owner = name.substr(0, at);
  AttemptView v;
  v.name = std::string(name);
  std::vector<store::GenerationAttempt> attempts;
  if (owner.starts_with(kGenerations)) {
    absl::StatusOr<std::string> digest = ParseGenerationName(owner);
    if (!digest.ok()) return NotAnAttemptName(name);
    absl::StatusOr<store::GenerationRecord> g = GetGeneration(owner);
    if (!g.ok()) return g.status();
    attempts = g->attempts;
    v.model_digest = g->model_digest;
    v.decoding_json = g->decoding_json;
    v.device = g->device;
    v.numerics_profile = g->numerics_profile;
    v.prompt_template_version = g->prompt_template_version;
    v.generation = std::string(owner);
  } else if (owner.starts_with(kArtifacts)) {
    std::optional<std::string> digest = DigestFromId(owner.substr(kArtifacts.size()));
    if (!digest) return NotAnAttemptName(name);
    absl::StatusOr<store::ArtifactRecord> a = store_->GetArtifact(*digest);
    if (absl::IsNotFound(a.status())) {
      return absl::NotFoundError(absl::StrCat(std::string(owner), " does not exist"));
    }
    if (!a.ok()) return a.status();
    const store::Provenance& p = a->provenance;
    attempts = p.attempts;
    v.model_digest = p.model_digest;
    v.decoding_json = p.decoding_json;
    v.device = p.device;
    v.numerics_profile = p.numerics_profile;
    v.prompt_template_version = p.prompt_template_version;
    if (p.author == kAuthorModel && !p.request_digest.empty()) v.generation = GenerationName(p.request_digest);
  } else {
    return NotAnAttemptName(name);
  }
  auto it = std::find_if(attempts.begin(), attempts.end(),
                         [&](const store::GenerationAttempt& a) { return a.index == number; });
  if (it == attempts.end()) {
    return absl::NotFoundError(absl::StrCat(std::string(owner), " has no attempt ", number, "; it has ",
                                            attempts.size(), attempts.size() == 1 ? " attempt" : " attempts"));
  }
  v.attempt = *it;
  for (auto [digest, text] : {std::pair{&it->prompt_digest, &v.prompt}, std::pair{&it->output_digest, &v.output},
                              std::pair{&it->code_digest, &v.code}}) {
    absl::StatusOr<std::string> bytes = BlobText(store_, *digest);
    if (!bytes.ok()) return bytes.status();
    *text = *std::move(bytes);
  }
  return v;
}

absl::StatusOr<store::Page<StepView>> ProvenanceReader::ListRunSteps(const store::RunRecord& run,
                                                                     int64_t max_value_bytes,
                                                                     const store::PageRequest& page) {
  absl::StatusOr<store::Page<store::StepRecord>> steps = store_->ListStepsPage(run.id, page);
  if (!steps.ok()) return steps.status();
  store::Page<StepView> out;
  out.next_page_token = steps->next_page_token;
  for (store::StepRecord& s : steps->items) {
    StepView v;
    for (auto [digest, json, omitted, size] :
         {std::tuple{&s.input_digest, &v.input_json, &v.input_omitted, &v.input_size_bytes},
          std::tuple{&s.output_digest, &v.output_json, &v.output_omitted, &v.output_size_bytes}}) {
      absl::StatusOr<store::BlobRef> stat = store_->StatBlob(*digest);
      if (!stat.ok()) return stat.status();
      *size = stat->size;
      if (stat->size > max_value_bytes) {
        *omitted = true;
        continue;
      }
      // Verified against its digest on the way out, like every value of a run.
      absl::StatusOr<std::string> bytes = store_->GetBlob(*digest);
      if (!bytes.ok()) return bytes.status();
      *json = *std::move(bytes);
    }
    v.step = std::move(s);
    out.items.push_back(std::move(v));
  }
  return out;
}

}  // namespace rote::orchestrator::engine

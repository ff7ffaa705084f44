// The prompts of the generation workload benchmark (docs/performance.md, "The generation
// workload"), exactly as the pipeline builds them: every generation point of the shipped
// blueprints, then synthetic points with more examples (8 to 16, so prompts reach the lengths
// real specs with many examples have), cycled to --points. For each point it writes the first
// attempt's messages and the retry messages of attempts 2 and 3, whose quoted candidate is the
// marker @@CANDIDATE@@ (the model half puts the previous attempt's reply there, cut as the
// pipeline cuts it) and whose failure is a validation failure of the kind's usual form; and a
// reply length of 100 to 400 tokens per attempt (a pure function of the point's index).
//
//   workload_prompts --out workload.jsonl [--points 32] [--blueprints DIR]
//
// It also writes workload.jsonl.vocab: the ranked pieces of the source tree's text (--source,
// default the tree it was built from) that
// bench_workload's synthesized vocabulary is made from (bench/inference/synthetic_vocab.h), so a
// workload file tokenizes the same on every later tree.
//   bench_workload --workload workload.jsonl ...   (the model half, bench/inference/workload_bench.cc)
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/inference/synthetic_vocab.h"
#include "nlohmann/json.hpp"
#include "orchestrator/engine/blueprint_runtime.h"
#include "orchestrator/engine/spec.h"
#include "orchestrator/generate/constraint.h"
#include "orchestrator/generate/lua_names.h"
#include "orchestrator/generate/pipeline.h"
#include "orchestrator/generate/prompt.h"

namespace fs = std::filesystem;
using namespace rote::orchestrator;
using rote::orchestrator::engine::ArtifactKind;

namespace {

constexpr char kCandidateMarker[] = "@@CANDIDATE@@";

// Synthetic Lua points: a task over records with n examples of input and output.
absl::StatusOr<engine::GenerationPoint> SyntheticLua(int i) {
  const int n = 8 + i % 9;
  std::vector<std::string> examples;
  for (int k = 0; k < n; ++k) {
    examples.push_back(absl::StrCat(R"({"input":{"id":)", k, R"(,"name":"customer )", k, R"( of batch )", i,
                                    R"(","amounts":[)", k, ",", 2 * k + 1, ",", 3 * k + i, R"(],"currency":")",
                                    (k % 3 == 0 ? "EUR" : k % 3 == 1 ? "USD" : "CHF"), R"("},"output":{"id":)", k,
                                    R"(,"total":)", 6 * k + 1 + i, R"(,"label":"CUSTOMER )", k, R"("}})"));
  }
  return generate::PointFromParts(
      absl::StrCat("synthetic_lua_", i), ArtifactKind::kLuaFunction,
      absl::StrCat("Summarize one customer record of batch ", i,
                   ": add up the amounts (integers), keep the id, and write the label as the name's first two words "
                   "in upper case. Records with an unknown currency keep their total; amounts may be empty."),
      "function({ id = integer, name = string, amounts = { integer }, currency = string }) -> "
      "{ id = integer, total = integer, label = string }",
      examples);
}

absl::StatusOr<engine::GenerationPoint> SyntheticRe2(int i) {
  const int n = 8 + i % 9;
  std::vector<std::string> examples;
  for (int k = 0; k < n; ++k) {
    const std::string ref = absl::StrCat("ORD-", 2024 + k % 3, "-", 10000 + 37 * k + i);
    examples.push_back(absl::StrCat(R"({"input":"shipment )", k, " for ", ref, " left the depot on 2024-0", 1 + k % 9,
                                    R"(-1)", k % 10, R"(, see ticket T)", k, R"(","matches":[")", ref, R"("]})"));
  }
  examples.push_back(R"({"input":"ORD-24-1 is too short and ORD-2024-x has no number","matches":[]})");
  return generate::PointFromParts(absl::StrCat("synthetic_re2_", i), ArtifactKind::kRe2Pattern,
                                  absl::StrCat("Find order references of the form ORD-YYYY-NNNNN (a four-digit year "
                                               "and five digits) in shipment notes (set ",
                                               i, ")."),
                                  "", examples);
}

std::string FailureFor(const engine::GenerationPoint& p, int attempt) {
  if (p.kind == ArtifactKind::kRe2Pattern) {
    return absl::StrCat("example ", attempt, ": expected matches [\"ORD-2024-10037\"], got [] (the pattern found nothing)");
  }
  return absl::StrCat("example ", attempt,
                      ": the function raised an error: candidate:7: attempt to perform arithmetic on a nil value "
                      "(field 'amount')");
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args = {{"out", ""}, {"points", "32"}, {"blueprints", ROTE_BLUEPRINTS_DIR},
                                               {"source", ROTE_SOURCE_DIR}};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k.rfind("--", 0) != 0 || !args.count(k.substr(2))) {
      fprintf(stderr, "usage: workload_prompts --out FILE [--points N] [--blueprints DIR] [--source DIR]\n");
      return 2;
    }
    args[k.substr(2)] = argv[i + 1];
  }
  if (args["out"].empty()) {
    fprintf(stderr, "usage: workload_prompts --out FILE [--points N] [--blueprints DIR] [--source DIR]\n");
    return 2;
  }
  absl::StatusOr<generate::SandboxNames> names = generate::ProbeSandboxNames();
  if (!names.ok()) {
    fprintf(stderr, "sandbox names: %s\n", std::string(names.status().message()).c_str());
    return 1;
  }
  std::vector<std::pair<std::string, engine::GenerationPoint>> points;  // (source, point)
  std::vector<fs::path> files;
  for (const fs::directory_entry& e : fs::directory_iterator(args["blueprints"]))
    if (e.path().extension() == ".lua") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    std::ifstream in(f);
    const std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    absl::StatusOr<engine::BlueprintDecl> decl = engine::LoadBlueprint(source, f.filename().string(), rote::sandbox::Limits{});
    if (!decl.ok()) {
      fprintf(stderr, "%s: %s\n", f.string().c_str(), std::string(decl.status().message()).c_str());
      return 1;
    }
    for (const engine::GenerationPoint& p : decl->points) points.emplace_back(decl->name, p);
  }
  const int shipped = static_cast<int>(points.size());
  const int wanted = std::stoi(args["points"]);
  for (int i = 0; static_cast<int>(points.size()) < wanted; ++i) {
    absl::StatusOr<engine::GenerationPoint> p = i % 2 == 0 ? SyntheticLua(i) : SyntheticRe2(i);
    if (!p.ok()) {
      fprintf(stderr, "synthetic point %d: %s\n", i, std::string(p.status().message()).c_str());
      return 1;
    }
    points.emplace_back("synthetic", *p);
  }
  std::ofstream out(args["out"], std::ios::trunc);
  int index = 0;
  for (const auto& [source, point] : points) {
    const generate::CompletionConstraint c = generate::ReplyConstraint(point.kind, *names);
    nlohmann::json line = {{"id", absl::StrCat(source, "/", point.name)},
                           {"kind", engine::KindName(point.kind)},
                           {"grammar", c.grammar},
                           {"examples", point.examples.size()},
                           {"attempts", nlohmann::json::array()}};
    if (c.allowed_globals.has_value()) line["allowed_globals"] = *c.allowed_globals;
    for (int attempt = 1; attempt <= 3; ++attempt) {
      std::optional<generate::PreviousAttempt> previous;
      if (attempt > 1) previous = generate::PreviousAttempt{attempt - 1, kCandidateMarker, FailureFor(point, attempt - 1)};
      nlohmann::json messages = nlohmann::json::array();
      for (const generate::ChatTurn& t : generate::BuildPrompt(point, *names, previous))
        messages.push_back({{"role", t.role}, {"content", t.content}});
      // 100 to 400 tokens, spread by a fixed multiplicative hash of (point, attempt).
      const uint32_t h = static_cast<uint32_t>(index * 3 + attempt) * 2654435761u;
      line["attempts"].push_back({{"messages", messages}, {"reply_tokens", 100 + static_cast<int>(h % 301)}});
    }
    out << line.dump() << "\n";
    ++index;
  }
  out.flush();
  if (!out) {
    fprintf(stderr, "cannot write %s\n", args["out"].c_str());
    return 1;
  }
  fprintf(stderr, "wrote %d points (%d from the shipped blueprints) to %s; candidate marker %s, quoted up to %zu bytes\n",
          index, shipped, args["out"].c_str(), kCandidateMarker, generate::kMaxQuotedCandidateBytes);
  const std::string vocab = args["out"] + ".vocab";
  const std::vector<std::string> pieces = rote::bench::RankedSourcePieces(args["source"], rote::bench::kWorkloadPieces);
  if (pieces.empty() || !rote::bench::WritePieces(vocab, pieces)) {
    fprintf(stderr, "cannot write the vocabulary's pieces to %s (source tree %s)\n", vocab.c_str(), args["source"].c_str());
    return 1;
  }
  fprintf(stderr, "wrote %zu ranked pieces of %s to %s (bench_workload's vocabulary)\n", pieces.size(), args["source"].c_str(),
          vocab.c_str());
  return 0;
}

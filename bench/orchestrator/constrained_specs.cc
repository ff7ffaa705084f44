// The constrained-generation benchmark (docs/generation.md, "Constrained replies"): does a
// reply held to its grammar compile (Lua) or get accepted by RE2, where a free one does not?
//
//   constrained_specs prompts --out prompts.jsonl [--lua 200] [--re2 200]
//       writes generation specs' first-attempt prompts exactly as the pipeline builds them
//       (BuildPrompt, the sandbox's names), each with its reply grammar and allowed names;
//   bench_grammar_specs --prompts prompts.jsonl --out replies.jsonl   (the model; any machine)
//   constrained_specs check --prompts prompts.jsonl --replies replies.jsonl
//       reads each reply the way the pipeline does (ExtractCode, compile, the sandbox-name check
//       for Lua; RE2 under rote's options) and prints, per kind, constrained and free: replies,
//       ended on EOS, code extracted, compiled / accepted, names all provided.
//
// The specs are made from templates and parameters (a pure function of the counts), so they
// vary in task, signature, examples and prompt length.
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "orchestrator/engine/regex_artifact.h"
#include "orchestrator/engine/spec.h"
#include "orchestrator/generate/constraint.h"
#include "orchestrator/generate/extract.h"
#include "orchestrator/generate/lua_names.h"
#include "orchestrator/generate/pipeline.h"
#include "orchestrator/generate/prompt.h"
#include "sandbox/lua_runtime.h"

using namespace rote::orchestrator;
using rote::orchestrator::engine::ArtifactKind;

namespace {

struct LuaTemplate {
  const char* task;
  const char* signature;
  // Examples for parameter p: input JSON and output JSON.
  std::vector<std::pair<std::string, std::string>> (*examples)(int p);
};

std::vector<std::pair<std::string, std::string>> Scale(int p) {
  return {{"3", std::to_string(3 * p)}, {"10", std::to_string(10 * p)}, {"-2", std::to_string(-2 * p)}};
}
std::vector<std::pair<std::string, std::string>> Repeat(int p) {
  return {{"\"ab\"", "\"" + std::string(static_cast<size_t>(p % 4 + 1), 'x') + "ab\""}, {"\"\"", "\"\""}};
}
std::vector<std::pair<std::string, std::string>> Sum(int p) {
  return {{"[1,2,3]", std::to_string(6 + p)}, {"[]", std::to_string(p)}, {"[10]", std::to_string(10 + p)}};
}
std::vector<std::pair<std::string, std::string>> Words(int p) {
  return {{"\"a b c\"", std::to_string(3 + p % 2)}, {"\"one\"", std::to_string(1 + p % 2)}};
}
std::vector<std::pair<std::string, std::string>> Field(int p) {
  return {{"{\"k" + std::to_string(p) + "\":5}", "5"}, {"{\"k" + std::to_string(p) + "\":\"v\"}", "\"v\""}};
}

const std::vector<LuaTemplate> kLuaTemplates = {
    {"Multiply the number by %d.", "function(n) -> integer", Scale},
    {"Prefix the string with %d x characters (cycling 1 to 4).", "function(s) -> string", Repeat},
    {"Sum the array of integers and add %d.", "function(list) -> integer", Sum},
    {"Count the words separated by spaces, plus %d modulo 2.", "function(text) -> integer", Words},
    {"Return the value of key k%d of the map.", "function(map) -> any", Field},
};

struct Re2Template {
  const char* task;
  std::vector<std::pair<std::string, std::vector<std::string>>> (*examples)(int p);
};

std::vector<std::pair<std::string, std::vector<std::string>>> Digits(int p) {
  const std::string n(static_cast<size_t>(p % 5 + 2), '7');
  return {{"id " + n + " and 12", {n}}, {"none here", {}}};
}
std::vector<std::pair<std::string, std::vector<std::string>>> Prefixed(int p) {
  const std::string w = "INV-" + std::to_string(1000 + p);
  return {{"pay " + w + " today", {w}}, {"INV-x", {}}};
}
std::vector<std::pair<std::string, std::vector<std::string>>> Dates(int p) {
  const std::string d = "2024-0" + std::to_string(p % 9 + 1) + "-1" + std::to_string(p % 10);
  return {{"on " + d + ".", {d}}, {"2024-13", {}}};
}
std::vector<std::pair<std::string, std::vector<std::string>>> Emails(int p) {
  const std::string e = "user" + std::to_string(p) + "@example.org";
  return {{"mail " + e + " now", {e}}, {"no at sign", {}}};
}

const std::vector<Re2Template> kRe2Templates = {
    {"Find numbers of 2 or more digits (case %d).", Digits},
    {"Find invoice numbers like INV-1234 (case %d).", Prefixed},
    {"Find ISO dates YYYY-MM-DD with a valid month (case %d).", Dates},
    {"Find e-mail addresses (case %d).", Emails},
};

std::string Fill(const char* pattern, int p) {
  std::string s = pattern;
  for (size_t at; (at = s.find("%d")) != std::string::npos;) s.replace(at, 2, std::to_string(p));
  return s;
}

std::string JsonString(const std::string& s) { return nlohmann::json(s).dump(); }

int WritePrompts(const std::string& out_path, int lua_count, int re2_count) {
  absl::StatusOr<generate::SandboxNames> names = generate::ProbeSandboxNames();
  if (!names.ok()) {
    fprintf(stderr, "sandbox names: %s\n", std::string(names.status().message()).c_str());
    return 1;
  }
  std::ofstream out(out_path, std::ios::trunc);
  int written = 0;
  auto emit = [&](const std::string& id, const engine::GenerationPoint& point) {
    const generate::CompletionConstraint c = generate::ReplyConstraint(point.kind, *names);
    nlohmann::json line = {{"id", id}, {"kind", engine::KindName(point.kind)}, {"grammar", c.grammar},
                           {"messages", nlohmann::json::array()}};
    if (c.allowed_globals.has_value()) line["allowed_globals"] = *c.allowed_globals;
    for (const generate::ChatTurn& t : generate::BuildPrompt(point, *names, std::nullopt))
      line["messages"].push_back({{"role", t.role}, {"content", t.content}});
    out << line.dump() << "\n";
    ++written;
  };
  for (int i = 0; i < lua_count; ++i) {
    const LuaTemplate& t = kLuaTemplates[static_cast<size_t>(i) % kLuaTemplates.size()];
    const int p = i / static_cast<int>(kLuaTemplates.size()) + 2;
    std::vector<std::string> examples;
    for (const auto& [in, outv] : t.examples(p)) examples.push_back(absl::StrCat(R"({"input":)", in, R"(,"output":)", outv, "}"));
    auto point = generate::PointFromParts(absl::StrCat("lua_", i), ArtifactKind::kLuaFunction, Fill(t.task, p), t.signature,
                                        examples);
    if (!point.ok()) {
      fprintf(stderr, "lua spec %d: %s\n", i, std::string(point.status().message()).c_str());
      return 1;
    }
    emit(absl::StrCat("lua_", i), *point);
  }
  for (int i = 0; i < re2_count; ++i) {
    const Re2Template& t = kRe2Templates[static_cast<size_t>(i) % kRe2Templates.size()];
    const int p = i / static_cast<int>(kRe2Templates.size()) + 1;
    std::vector<std::string> examples;
    for (const auto& [text, matches] : t.examples(p)) {
      nlohmann::json m = matches;
      examples.push_back(absl::StrCat(R"({"input":)", JsonString(text), R"(,"matches":)", m.dump(), "}"));
    }
    auto point = generate::PointFromParts(absl::StrCat("re2_", i), ArtifactKind::kRe2Pattern, Fill(t.task, p), "", examples);
    if (!point.ok()) {
      fprintf(stderr, "re2 spec %d: %s\n", i, std::string(point.status().message()).c_str());
      return 1;
    }
    emit(absl::StrCat("re2_", i), *point);
  }
  fprintf(stderr, "wrote %d prompts to %s\n", written, out_path.c_str());
  return out ? 0 : 1;
}

std::string Unhex(const std::string& h) {
  std::string s;
  for (size_t i = 0; i + 1 < h.size(); i += 2) s.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return s;
}

struct Tally {
  int replies = 0, eos = 0, extracted = 0, compiled = 0, names_ok = 0;
  std::map<std::string, int> first_failures;
};

int Check(const std::string& prompts_path, const std::string& replies_path) {
  std::map<std::string, std::string> kind_of;
  std::ifstream pin(prompts_path);
  for (std::string line; std::getline(pin, line);) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line);
    kind_of[j["id"].get<std::string>()] = j["kind"].get<std::string>();
  }
  absl::StatusOr<generate::SandboxNames> names = generate::ProbeSandboxNames();
  if (!names.ok()) return 1;
  std::map<std::string, Tally> tallies;  // "<kind> <constrained|free>"
  std::ifstream rin(replies_path);
  for (std::string line; std::getline(rin, line);) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line);
    const std::string kind = kind_of[j["id"].get<std::string>()];
    const bool lua = kind == "lua_function";
    Tally& t = tallies[kind + (j["constrained"].get<bool>() ? " constrained" : " free")];
    ++t.replies;
    if (j["finish"] == "eos") ++t.eos;
    const std::string text = Unhex(j["text_hex"].get<std::string>());
    absl::StatusOr<std::string> code = generate::ExtractCode(lua ? ArtifactKind::kLuaFunction : ArtifactKind::kRe2Pattern, text);
    auto fail = [&](const std::string& why) { ++t.first_failures[why.substr(0, 60)]; };
    if (!code.ok()) {
      fail(std::string(code.status().message()));
      continue;
    }
    ++t.extracted;
    if (lua) {
      auto state = rote::sandbox::LuaState::Create(rote::sandbox::Limits{100'000'000, 64ull << 20, 1ull << 20});
      if (!state.ok() || !(*state)->NewEnvironment().ok()) return 1;
      if (absl::Status s = (*state)->Load(*code, "candidate"); !s.ok()) {
        fail(absl::StrCat("does not compile: ", s.message()));
        continue;
      }
      ++t.compiled;
      absl::StatusOr<std::vector<generate::GlobalUse>> uses = generate::GlobalUses(*code);
      if (uses.ok() && generate::UnknownNamesMessage(*uses, *names).empty()) {
        ++t.names_ok;
      } else {
        fail(uses.ok() ? generate::UnknownNamesMessage(*uses, *names) : std::string(uses.status().message()));
      }
    } else {
      auto compiled = engine::RegexArtifact::Compile(*code, rote::sandbox::RegexOptions{});
      if (!compiled.ok()) {
        fail(absl::StrCat("RE2 refuses: ", compiled.status().message()));
        continue;
      }
      ++t.compiled;
      ++t.names_ok;
    }
  }
  for (const auto& [key, t] : tallies) {
    printf("{\"set\":\"%s\",\"replies\":%d,\"ended_on_eos\":%d,\"code_extracted\":%d,\"compiled_or_accepted\":%d,"
           "\"names_provided\":%d,\"share_valid\":%.3f}\n",
           key.c_str(), t.replies, t.eos, t.extracted, t.compiled, t.names_ok,
           t.replies ? static_cast<double>(t.names_ok) / t.replies : 0.0);
    for (const auto& [why, n] : t.first_failures) printf("  %-13s %4d x %s\n", key.c_str(), n, nlohmann::json(why).dump().c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args = {{"out", ""}, {"prompts", ""}, {"replies", ""}, {"lua", "200"}, {"re2", "200"}};
  const std::string mode = argc > 1 ? argv[1] : "";
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k.rfind("--", 0) != 0 || !args.count(k.substr(2))) return 2;
    args[k.substr(2)] = argv[i + 1];
  }
  if (mode == "prompts" && !args["out"].empty()) return WritePrompts(args["out"], std::stoi(args["lua"]), std::stoi(args["re2"]));
  if (mode == "check" && !args["prompts"].empty() && !args["replies"].empty()) return Check(args["prompts"], args["replies"]);
  fprintf(stderr,
          "usage: constrained_specs prompts --out FILE [--lua N] [--re2 N]\n"
          "       constrained_specs check --prompts FILE --replies FILE\n");
  return 2;
}

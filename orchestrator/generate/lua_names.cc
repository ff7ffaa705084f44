#include "orchestrator/generate/lua_names.h"

#include <algorithm>
#include <mutex>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sandbox/lua_runtime.h"

namespace rote::orchestrator::generate {

namespace {

enum class TokenType { kName, kKeyword, kString, kNumber, kOp };

struct Token {
  TokenType type;
  std::string text;  // names, keywords and operators; strings and numbers are not kept
  int line;
};

bool IsKeyword(std::string_view w) {
  static const std::set<std::string_view> kKeywords = {
      "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if", "in",
      "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while"};
  return kKeywords.count(w) > 0;
}

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// The level of a long bracket opening at s[i] ("[[" is 0, "[==[" is 2), or nullopt.
std::optional<size_t> LongBracketLevel(std::string_view s, size_t i) {
  if (i >= s.size() || s[i] != '[') return std::nullopt;
  size_t j = i + 1;
  while (j < s.size() && s[j] == '=') ++j;
  if (j < s.size() && s[j] == '[') return j - i - 1;
  return std::nullopt;
}

// Lua 5.4's lexical grammar, reduced to what name analysis needs.
absl::StatusOr<std::vector<Token>> Lex(std::string_view s) {
  std::vector<Token> out;
  int line = 1;
  size_t i = 0;
  // Skips a long bracket body starting at s[i] (the opening bracket); counts lines.
  auto skip_long = [&](size_t level, const char* what) -> absl::Status {
    const int start_line = line;
    const std::string close = absl::StrCat("]", std::string(level, '='), "]");
    size_t end = s.find(close, i);
    if (end == std::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("unfinished long ", what, " starting at line ", start_line));
    }
    line += static_cast<int>(std::count(s.begin() + i, s.begin() + end, '\n'));
    i = end + close.size();
    return absl::OkStatus();
  };
  while (i < s.size()) {
    const char c = s[i];
    if (c == '\n') {
      ++line;
      ++i;
    } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
      ++i;
    } else if (c == '-' && i + 1 < s.size() && s[i + 1] == '-') {
      i += 2;
      if (std::optional<size_t> level = LongBracketLevel(s, i)) {
        if (absl::Status st = skip_long(*level, "comment"); !st.ok()) return st;
      } else {
        while (i < s.size() && s[i] != '\n') ++i;
      }
    } else if (std::optional<size_t> level = LongBracketLevel(s, i)) {
      out.push_back({TokenType::kString, "", line});
      if (absl::Status st = skip_long(*level, "string"); !st.ok()) return st;
    } else if (c == '"' || c == '\'') {
      const int start_line = line;
      ++i;
      bool closed = false;
      while (i < s.size()) {
        if (s[i] == '\\' && i + 1 < s.size()) {
          if (s[i + 1] == '\n') ++line;
          i += 2;
        } else if (s[i] == c) {
          ++i;
          closed = true;
          break;
        } else if (s[i] == '\n') {
          break;
        } else {
          ++i;
        }
      }
      if (!closed) return absl::InvalidArgumentError(absl::StrCat("unfinished string at line ", start_line));
      out.push_back({TokenType::kString, "", start_line});
    } else if (IsDigit(c) || (c == '.' && i + 1 < s.size() && IsDigit(s[i + 1]))) {
      // Numerals: digits, hex digits, '.', exponents with their sign.
      while (i < s.size()) {
        const char d = s[i];
        if ((d == '+' || d == '-') && (s[i - 1] == 'e' || s[i - 1] == 'E' || s[i - 1] == 'p' || s[i - 1] == 'P')) {
          ++i;
        } else if (IsNameChar(d) || d == '.') {
          ++i;
        } else {
          break;
        }
      }
      out.push_back({TokenType::kNumber, "", line});
    } else if (IsNameStart(c)) {
      size_t j = i;
      while (j < s.size() && IsNameChar(s[j])) ++j;
      std::string word(s.substr(i, j - i));
      out.push_back({IsKeyword(word) ? TokenType::kKeyword : TokenType::kName, std::move(word), line});
      i = j;
    } else {
      static const char* const kMulti[] = {"...", "..", "==", "~=", "<=", ">=", "//", "::", "<<", ">>"};
      std::string op(1, c);
      for (const char* m : kMulti) {
        if (s.substr(i, std::string_view(m).size()) == m) {
          op = m;
          break;
        }
      }
      out.push_back({TokenType::kOp, op, line});
      i += op.size();
    }
  }
  return out;
}

bool IsOp(const std::vector<Token>& t, size_t i, std::string_view op) {
  return i < t.size() && t[i].type == TokenType::kOp && t[i].text == op;
}
bool IsKw(const std::vector<Token>& t, size_t i, std::string_view kw) {
  return i < t.size() && t[i].type == TokenType::kKeyword && t[i].text == kw;
}
bool IsName(const std::vector<Token>& t, size_t i) { return i < t.size() && t[i].type == TokenType::kName; }

// Declares the parameter names of the list opening at t[i] == "(".
void DeclareParams(const std::vector<Token>& t, size_t i, std::set<std::string>* declared) {
  if (!IsOp(t, i, "(")) return;
  for (size_t j = i + 1; j < t.size() && !IsOp(t, j, ")"); ++j) {
    if (IsName(t, j)) declared->insert(t[j].text);
  }
}

}  // namespace

absl::StatusOr<std::vector<GlobalUse>> GlobalUses(std::string_view source) {
  absl::StatusOr<std::vector<Token>> lexed = Lex(source);
  if (!lexed.ok()) return lexed.status();
  const std::vector<Token>& t = *lexed;

  // Everything the chunk declares anywhere.
  std::set<std::string> declared;
  for (size_t i = 0; i < t.size(); ++i) {
    if (IsKw(t, i, "local")) {
      if (IsKw(t, i + 1, "function")) {
        if (IsName(t, i + 2)) declared.insert(t[i + 2].text);
        continue;
      }
      // local a <const>, b = ...
      size_t j = i + 1;
      while (IsName(t, j)) {
        declared.insert(t[j].text);
        ++j;
        if (IsOp(t, j, "<") && IsName(t, j + 1) && IsOp(t, j + 2, ">")) j += 3;
        if (!IsOp(t, j, ",")) break;
        ++j;
      }
    } else if (IsKw(t, i, "function")) {
      size_t j = i + 1;
      if (IsName(t, j)) {
        // function name(...), function a.b.c(...), function a:m(...)
        const bool plain = !IsOp(t, j + 1, ".") && !IsOp(t, j + 1, ":");
        if (plain) declared.insert(t[j].text);
        ++j;
        while ((IsOp(t, j, ".") || IsOp(t, j, ":")) && IsName(t, j + 1)) {
          if (IsOp(t, j, ":")) declared.insert("self");
          j += 2;
        }
      }
      DeclareParams(t, j, &declared);
    } else if (IsKw(t, i, "for")) {
      for (size_t j = i + 1; IsName(t, j); j += 2) {
        declared.insert(t[j].text);
        if (!IsOp(t, j + 1, ",")) break;
      }
    } else if (IsName(t, i) && (i == 0 || (!IsOp(t, i - 1, ".") && !IsOp(t, i - 1, ":")))) {
      // Assignment targets: a = ..., a, b = ... (also table constructor keys, which are no uses).
      size_t j = i;
      while (IsName(t, j) && IsOp(t, j + 1, ",")) j += 2;
      if (IsName(t, j) && IsOp(t, j + 1, "=")) {
        for (size_t k = i; k <= j; k += 2) declared.insert(t[k].text);
      }
    }
  }

  std::vector<GlobalUse> uses;
  std::set<std::pair<std::string, std::string>> seen;
  for (size_t i = 0; i < t.size(); ++i) {
    if (!IsName(t, i) || declared.count(t[i].text)) continue;
    if (i > 0 && (IsOp(t, i - 1, ".") || IsOp(t, i - 1, ":") || IsOp(t, i - 1, "::") || IsKw(t, i - 1, "goto"))) {
      continue;
    }
    if (i > 0 && IsOp(t, i - 1, "<") && IsOp(t, i + 1, ">") && (t[i].text == "const" || t[i].text == "close")) {
      continue;
    }
    GlobalUse use{t[i].text, "", t[i].line};
    if (IsOp(t, i + 1, ".") && IsName(t, i + 2)) use.field = t[i + 2].text;
    if (seen.insert({use.name, use.field}).second) uses.push_back(std::move(use));
  }
  return uses;
}

bool SandboxNames::Provides(const GlobalUse& use) const {
  if (std::binary_search(base.begin(), base.end(), use.name)) return true;
  for (const auto& [lib, members] : libraries) {
    if (lib != use.name) continue;
    return use.field.empty() || std::binary_search(members.begin(), members.end(), use.field);
  }
  return false;
}

std::string SandboxNames::Describe() const {
  std::string out = absl::StrCat("global functions: ", absl::StrJoin(base, " "), "\n");
  for (const auto& [lib, members] : libraries) absl::StrAppend(&out, lib, ": ", absl::StrJoin(members, " "), "\n");
  return out;
}

namespace {

// Every global of stock Lua 5.4 (reference manual, section 6): the candidates the probe asks
// the sandbox about. Whatever the sandbox does not provide is simply absent from the answer.
constexpr const char* kProbe = R"lua(
return function(_)
  local base = {}
  for _, n in ipairs({"_G", "_VERSION", "assert", "collectgarbage", "dofile", "error",
                      "getmetatable", "ipairs", "load", "loadfile", "next", "pairs", "pcall",
                      "print", "rawequal", "rawget", "rawlen", "rawset", "require", "select",
                      "setmetatable", "tonumber", "tostring", "type", "warn", "xpcall"}) do
    if _ENV[n] ~= nil then base[#base + 1] = n end
  end
  local libraries = {}
  for _, lib in ipairs({"coroutine", "debug", "io", "math", "os", "package", "string", "table",
                        "utf8"}) do
    local t = _ENV[lib]
    if type(t) == "table" then
      local members = {}
      for k in pairs(t) do
        if type(k) == "string" then members[#members + 1] = k end
      end
      libraries[lib] = {members = members}
    end
  end
  return {base = base, libraries = libraries}
end
)lua";

std::vector<std::string> Strings(const sandbox::Value& v) {
  std::vector<std::string> out;
  if (!v.is_array()) return out;  // an empty list comes back as an empty map
  for (const sandbox::Value& e : v.as_array()) {
    if (e.is_string()) out.push_back(e.as_string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<SandboxNames> Probe() {
  absl::StatusOr<std::vector<sandbox::CallResult>> r =
      sandbox::RunFunctionArtifact(kProbe, "sandbox_probe", {sandbox::Value::Nil()}, sandbox::Limits{});
  if (!r.ok()) return r.status();
  if (r->size() != 1 || !(*r)[0].status.ok()) {
    return absl::InternalError(absl::StrCat("probing the sandbox's names failed: ",
                                            r->empty() ? "no result" : (*r)[0].status.message()));
  }
  const sandbox::Value& v = (*r)[0].value;
  if (!v.is_map() || !v.as_map().count("base") || !v.as_map().count("libraries") ||
      !v.as_map().at("libraries").is_map()) {
    return absl::InternalError("probing the sandbox's names returned an unexpected value");
  }
  SandboxNames names;
  names.base = Strings(v.as_map().at("base"));
  for (const auto& [lib, entry] : v.as_map().at("libraries").as_map()) {
    std::vector<std::string> members;
    if (entry.is_map() && entry.as_map().count("members")) members = Strings(entry.as_map().at("members"));
    names.libraries.emplace_back(lib, std::move(members));
  }
  return names;
}

}  // namespace

absl::StatusOr<SandboxNames> ProbeSandboxNames() {
  static std::once_flag once;
  static absl::StatusOr<SandboxNames>* probed = nullptr;
  std::call_once(once, [] { probed = new absl::StatusOr<SandboxNames>(Probe()); });
  return *probed;
}

std::string UnknownNamesMessage(const std::vector<GlobalUse>& uses, const SandboxNames& names) {
  std::vector<std::string> unknown;
  for (const GlobalUse& u : uses) {
    if (names.Provides(u)) continue;
    // Report os.time as such, but a missing library only once.
    const bool library_known = !u.field.empty() && names.Provides(GlobalUse{u.name, "", 0});
    const std::string what = library_known ? absl::StrCat(u.name, ".", u.field) : u.name;
    const std::string entry = absl::StrCat(what, " (line ", u.line, ")");
    if (std::none_of(unknown.begin(), unknown.end(),
                     [&](const std::string& e) { return e.rfind(what + " (", 0) == 0; })) {
      unknown.push_back(entry);
    }
  }
  if (unknown.empty()) return "";
  return absl::StrCat("uses names the sandbox does not provide: ", absl::StrJoin(unknown, ", "));
}

}  // namespace rote::orchestrator::generate

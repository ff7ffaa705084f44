// Parser of the grammar format: text -> GrammarSpec (EBNF operators desugared into fresh
// nonterminals, left-recursive so the Earley parser keeps its sets small).
#include <map>
#include <set>

#include "inference/grammar/grammar_spec.h"
#include "inference/grammar/regex.h"

namespace rote::inference::grammar {
namespace {

struct Tok {
  enum Kind { kIdent, kString, kRegex, kPunct, kDirective, kEnd } kind = kEnd;
  std::string text;  // ident, string body (escaped), regex body, punct, directive name
  int line = 0;
};

StatusOr<std::vector<Tok>> Tokenize(std::string_view s) {
  std::vector<Tok> out;
  int line = 1;
  size_t i = 0;
  auto is_ident = [](char c, bool first) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (!first && c >= '0' && c <= '9');
  };
  while (i < s.size()) {
    char c = s[i];
    if (c == '\n') { ++line; ++i; continue; }
    if (c == ' ' || c == '\t' || c == '\r') { ++i; continue; }
    if (c == '#') { while (i < s.size() && s[i] != '\n') ++i; continue; }
    Tok t;
    t.line = line;
    if (is_ident(c, true) || c == '%') {
      size_t j = i + 1;
      while (j < s.size() && is_ident(s[j], false)) ++j;
      t.kind = c == '%' ? Tok::kDirective : Tok::kIdent;
      t.text = std::string(s.substr(c == '%' ? i + 1 : i, j - i - (c == '%' ? 1 : 0)));
      i = j;
    } else if (c == '"' || c == '/') {
      size_t j = i + 1;
      while (j < s.size() && s[j] != c && s[j] != '\n') j += s[j] == '\\' ? 2 : 1;
      if (j >= s.size() || s[j] != c) {
        return InvalidArgument("grammar line " + std::to_string(line) + ": unterminated " +
                               (c == '"' ? "string" : "regex"));
      }
      t.kind = c == '"' ? Tok::kString : Tok::kRegex;
      t.text = std::string(s.substr(i + 1, j - i - 1));
      i = j + 1;
    } else if (s.substr(i).starts_with("::=")) {
      t.kind = Tok::kPunct;
      t.text = "::=";
      i += 3;
    } else if (std::string_view("=|()?*+@").find(c) != std::string_view::npos) {
      t.kind = Tok::kPunct;
      t.text = std::string(1, c);
      ++i;
    } else {
      return InvalidArgument("grammar line " + std::to_string(line) + ": unexpected character '" +
                             std::string(1, c) + "'");
    }
    out.push_back(std::move(t));
  }
  Tok end;
  end.line = line;
  out.push_back(end);
  return out;
}

std::string RegexOfLiteral(const std::string& bytes) {
  static const char* kHex = "0123456789abcdef";
  std::string r;
  for (unsigned char b : bytes) {
    r += "\\x";
    r += kHex[b >> 4];
    r += kHex[b & 15];
  }
  return r;
}

class TextParser {
 public:
  explicit TextParser(std::vector<Tok> toks) : t_(std::move(toks)) {}

  StatusOr<GrammarSpec> Run() {
    // Terminal names first, so rules may use a terminal defined below them.
    for (size_t i = 0; i + 1 < t_.size(); ++i) {
      if (t_[i].kind == Tok::kIdent && IsPunct(t_[i + 1], "=")) terminal_names_.insert(t_[i].text);
    }
    spec_.nonterminal_names.push_back("$start");
    spec_.productions.push_back({0, {}});
    while (t_[pos_].kind != Tok::kEnd && error_.empty()) Statement();
    if (!error_.empty()) return InvalidArgument(error_);
    return Finish();
  }

 private:
  static bool IsPunct(const Tok& t, const char* p) { return t.kind == Tok::kPunct && t.text == p; }
  void Fail(const std::string& what) {
    if (error_.empty()) error_ = "grammar line " + std::to_string(t_[pos_].line) + ": " + what;
  }
  bool AtStatementStart() const {
    const Tok& t = t_[pos_];
    if (t.kind == Tok::kEnd || t.kind == Tok::kDirective) return true;
    return t.kind == Tok::kIdent && (IsPunct(t_[pos_ + 1], "=") || IsPunct(t_[pos_ + 1], "::="));
  }

  void Statement() {
    const Tok& t = t_[pos_];
    if (t.kind == Tok::kDirective) {
      int line = t.line;
      std::string d = t.text;
      ++pos_;
      if (d == "ignore") {
        while (t_[pos_].kind == Tok::kIdent && t_[pos_].line == line) ignore_.push_back(t_[pos_++].text);
      } else if (d == "ignore_leading") {
        spec_.leading_ignore = true;
      } else if (d == "start") {
        if (t_[pos_].kind != Tok::kIdent) return Fail("%start needs a rule name");
        start_name_ = t_[pos_++].text;
      } else {
        Fail("unknown directive %" + d);
      }
      return;
    }
    if (t.kind != Tok::kIdent) return Fail("expected a terminal or rule definition");
    std::string name = t.text;
    pos_ += 1;
    if (IsPunct(t_[pos_], "=")) {
      ++pos_;
      TerminalDefinition(name);
    } else if (IsPunct(t_[pos_], "::=")) {
      ++pos_;
      if (terminal_names_.count(name)) return Fail(name + " is both a terminal and a rule");
      if (start_name_.empty()) start_name_ = name;
      int nt = Nonterminal(name);
      defined_.insert(name);
      Alternatives(nt, /*until_paren=*/false);
    } else {
      Fail("expected '=' or '::=' after " + name);
    }
  }

  void TerminalDefinition(const std::string& name) {
    if (terminal_index_.count(name)) return Fail("terminal " + name + " defined twice");
    std::vector<std::pair<bool, std::string>> pieces;  // (literal, text)
    while (true) {
      const Tok& p = t_[pos_];
      if (p.kind == Tok::kString) {
        auto bytes = UnescapeLiteral(p.text);
        if (!bytes.ok()) return Fail(bytes.status().message());
        pieces.push_back({true, *bytes});
      } else if (p.kind == Tok::kRegex) {
        Nfa scratch;
        auto checked = AddRegex(scratch, p.text);
        if (!checked.ok()) return Fail("terminal " + name + ": " + checked.status().message());
        pieces.push_back({false, p.text});
      } else {
        return Fail("terminal " + name + " needs a /regex/ or \"literal\"");
      }
      ++pos_;
      if (!IsPunct(t_[pos_], "|")) break;
      ++pos_;
    }
    TerminalDef def;
    def.name = name;
    if (pieces.size() == 1 && pieces[0].first) {
      def.literal = true;
      def.pattern = pieces[0].second;
    } else {
      for (size_t i = 0; i < pieces.size(); ++i) {
        if (i) def.pattern += "|";
        const std::string piece = pieces[i].first ? RegexOfLiteral(pieces[i].second) : pieces[i].second;
        def.pattern += pieces.size() == 1 ? piece : "(" + piece + ")";
      }
    }
    terminal_index_[name] = static_cast<int>(spec_.terminals.size());
    if (def.literal) literal_index_.emplace(def.pattern, static_cast<int>(spec_.terminals.size()));
    spec_.terminals.push_back(def);
  }

  int Nonterminal(const std::string& name) {
    auto [it, fresh] = nt_index_.emplace(name, static_cast<int>(spec_.nonterminal_names.size()));
    if (fresh) spec_.nonterminal_names.push_back(name);
    return it->second;
  }
  int FreshNonterminal(const std::string& base) {
    spec_.nonterminal_names.push_back(base + "#" + std::to_string(spec_.nonterminal_names.size()));
    return static_cast<int>(spec_.nonterminal_names.size()) - 1;
  }
  int GrammarTerminalSymbol(int lex, NameRole role) {
    auto key = std::make_pair(lex, static_cast<int>(role));
    auto [it, fresh] = gterm_index_.emplace(key, static_cast<int>(spec_.gterms.size()));
    if (fresh) spec_.gterms.push_back({lex, role});
    return -1 - it->second;
  }

  // alt := seq ('|' seq)*, each sequence one production of `lhs`.
  void Alternatives(int lhs, bool until_paren) {
    while (error_.empty()) {
      std::vector<int> rhs;
      while (error_.empty()) {
        const Tok& t = t_[pos_];
        if (IsPunct(t, "|") || (until_paren && IsPunct(t, ")"))) break;
        if (!until_paren && AtStatementStart()) break;
        if (until_paren && t.kind == Tok::kEnd) return Fail("missing ')'");
        rhs.push_back(Item(lhs));
      }
      spec_.productions.push_back({lhs, rhs});
      if (!IsPunct(t_[pos_], "|")) break;
      ++pos_;
    }
  }

  int Item(int context) {
    int sym = Atom(context);
    while (error_.empty()) {
      const Tok& t = t_[pos_];
      if (!(IsPunct(t, "?") || IsPunct(t, "*") || IsPunct(t, "+"))) break;
      ++pos_;
      int n = FreshNonterminal(spec_.nonterminal_names[context]);
      if (t.text == "?") {
        spec_.productions.push_back({n, {}});
        spec_.productions.push_back({n, {sym}});
      } else if (t.text == "*") {
        spec_.productions.push_back({n, {}});
        spec_.productions.push_back({n, {n, sym}});
      } else {
        spec_.productions.push_back({n, {sym}});
        spec_.productions.push_back({n, {n, sym}});
      }
      sym = n;
    }
    return sym;
  }

  int Atom(int context) {
    const Tok& t = t_[pos_];
    if (IsPunct(t, "(")) {
      ++pos_;
      int n = FreshNonterminal(spec_.nonterminal_names[context]);
      Alternatives(n, /*until_paren=*/true);
      if (error_.empty()) ++pos_;  // ')'
      return n;
    }
    if (t.kind == Tok::kString) {
      ++pos_;
      auto bytes = UnescapeLiteral(t.text);
      if (!bytes.ok()) { Fail(bytes.status().message()); return 0; }
      auto it = literal_index_.find(*bytes);
      int lex;
      if (it != literal_index_.end()) {
        lex = it->second;
      } else {
        lex = static_cast<int>(spec_.terminals.size());
        literal_index_.emplace(*bytes, lex);
        spec_.terminals.push_back({"\"" + t.text + "\"", true, *bytes, false});
      }
      return GrammarTerminalSymbol(lex, NameRole::kPlain);
    }
    if (t.kind != Tok::kIdent) { Fail("expected a symbol, a \"literal\" or '('"); return 0; }
    ++pos_;
    if (terminal_names_.count(t.text)) {
      NameRole role = NameRole::kPlain;
      if (IsPunct(t_[pos_], "@")) {
        ++pos_;
        const std::string r = t_[pos_].kind == Tok::kIdent ? t_[pos_].text : "";
        if (r == "ref") role = NameRole::kRef;
        else if (r == "decl") role = NameRole::kDecl;
        else { Fail("unknown role '" + r + "' (ref or decl)"); return 0; }
        ++pos_;
      }
      pending_terminals_.push_back({t.text, t.line});
      return GrammarTerminalSymbol(-1 - static_cast<int>(pending_terminals_.size()), role);
    }
    used_.emplace(t.text, t.line);
    return Nonterminal(t.text);
  }

  StatusOr<GrammarSpec> Finish() {
    for (const auto& [name, line] : used_) {
      if (!defined_.count(name)) {
        return InvalidArgument("grammar line " + std::to_string(line) + ": " + name + " is not defined");
      }
    }
    if (start_name_.empty()) return InvalidArgument("grammar has no rules");
    // Resolve terminal references (terminals may be defined after their first use).
    for (auto& g : spec_.gterms) {
      if (g.lex >= 0) continue;
      const auto& [name, line] = pending_terminals_[-1 - g.lex - 1];
      auto it = terminal_index_.find(name);
      if (it == terminal_index_.end()) {
        return InvalidArgument("grammar line " + std::to_string(line) + ": terminal " + name + " is not defined");
      }
      g.lex = it->second;
    }
    // Different pending entries can name one terminal: merge equal (lex, role) pairs.
    std::map<std::pair<int, int>, int> canon;
    std::vector<int> remap(spec_.gterms.size());
    std::vector<GrammarTerminal> merged;
    for (size_t i = 0; i < spec_.gterms.size(); ++i) {
      auto key = std::make_pair(spec_.gterms[i].lex, static_cast<int>(spec_.gterms[i].role));
      auto [it, fresh] = canon.emplace(key, static_cast<int>(merged.size()));
      if (fresh) merged.push_back(spec_.gterms[i]);
      remap[i] = it->second;
    }
    spec_.gterms = merged;
    for (auto& p : spec_.productions) {
      for (int& s : p.rhs) if (s < 0) s = -1 - remap[-1 - s];
    }
    for (const auto& name : ignore_) {
      auto it = terminal_index_.find(name);
      if (it == terminal_index_.end()) return InvalidArgument("%ignore names undefined terminal " + name);
      spec_.terminals[it->second].ignore = true;
    }
    auto st = nt_index_.find(start_name_);
    if (st == nt_index_.end() || !defined_.count(start_name_)) {
      return InvalidArgument("start rule " + start_name_ + " is not defined");
    }
    spec_.productions[0].rhs = {st->second};
    spec_.start = 0;
    return RemoveUnproductive();
  }

  StatusOr<GrammarSpec> RemoveUnproductive() {
    std::vector<char> productive(spec_.nonterminal_names.size(), 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (const auto& p : spec_.productions) {
        if (productive[p.lhs]) continue;
        bool ok = true;
        for (int s : p.rhs) ok = ok && (s < 0 || productive[s]);
        if (ok) { productive[p.lhs] = 1; changed = true; }
      }
    }
    if (!productive[0]) return InvalidArgument("the start rule derives no finite sentence");
    std::vector<Production> kept;
    for (const auto& p : spec_.productions) {
      bool ok = productive[p.lhs];
      for (int s : p.rhs) ok = ok && (s < 0 || productive[s]);
      if (ok) kept.push_back(p);
    }
    spec_.productions = std::move(kept);
    return spec_;
  }

  std::vector<Tok> t_;
  size_t pos_ = 0;
  std::string error_;
  GrammarSpec spec_;
  std::set<std::string> terminal_names_;
  std::map<std::string, int> terminal_index_;
  std::map<std::string, int> literal_index_;
  std::map<std::string, int> nt_index_;
  std::map<std::pair<int, int>, int> gterm_index_;
  std::vector<std::pair<std::string, int>> pending_terminals_;
  std::map<std::string, int> used_;
  std::set<std::string> defined_;
  std::vector<std::string> ignore_;
  std::string start_name_;
};

}  // namespace

StatusOr<GrammarSpec> ParseGrammarText(std::string_view text) {
  auto toks = Tokenize(text);
  if (!toks.ok()) return toks.status();
  return TextParser(std::move(*toks)).Run();
}

}  // namespace rote::inference::grammar

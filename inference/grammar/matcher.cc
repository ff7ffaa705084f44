// The Matcher: a lexer state, an Earley parser and the declared names of one request, and the
// token mask computed from the per-lexer-state token tables.
#include <algorithm>
#include <cstring>

#include "inference/grammar/grammar_compiled.h"
#include "inference/grammar/name_trie.h"

namespace rote::inference::grammar {

struct MatcherState {
  struct Step {
    int lex_state;
    std::string partial;
    size_t parser_sets;
    size_t declared;
    bool finished;
  };

  std::shared_ptr<const CompiledGrammar> grammar;
  const CompiledGrammarImpl* g = nullptr;
  mutable EarleyParser parser;  // Complete() scans and pops
  int lex_state = LexerDfa::kStart;
  std::string partial;  // bytes of the unfinished lexeme
  bool restricted = false;
  NameTrie names;
  std::vector<std::string> declared;
  std::vector<Step> history;
  bool finished = false;
  bool root_ignore_ok = false;  // FillMask: an ignored lexeme may end the unfinished one

  MatcherState(std::shared_ptr<const CompiledGrammar> cg)
      : grammar(std::move(cg)), g(&grammar->impl()), parser(g->tables.get()) {}

  bool Bit(const std::vector<uint64_t>& bits, int t) const { return (bits[t / 64] >> (t % 64)) & 1; }
  bool IgnoreAllowed() const {
    return (parser.num_sets() > 1 || g->spec.leading_ignore) && parser.ExpectsAnything();
  }
  bool NameOk(std::string_view text) const { return !restricted || names.Contains(text); }
  bool PrefixOk(std::string_view text) const { return !restricted || names.HasPrefix(text); }

  // The unfinished lexeme ending in `state` can still become a terminal the parser takes:
  // 0 = no, 1 = yes whatever its text, 2 = only as a name that passes the @ref check.
  int FinalViability(int state) const {
    const uint64_t* poss = g->lexer.Possible(state);
    const uint64_t* ef = parser.ExpectFree();
    const uint64_t* er = parser.ExpectRef();
    const bool ignore_ok = IgnoreAllowed();
    bool ref = false;
    for (int w = 0; w < g->lexer.words(); ++w) {
      uint64_t any = ef[w] | (ignore_ok ? g->ignore_bits[w] : 0);
      if (!restricted) any |= er[w];
      if (poss[w] & any) return 1;
      ref = ref || (poss[w] & er[w]);
    }
    return ref ? 2 : 0;
  }

  bool EndLexeme() {
    const int term = g->lexer.Accept(lex_state);
    if (term < 0) return false;
    if (Bit(g->ignore_bits, term)) {
      if (!IgnoreAllowed()) return false;
    } else {
      bool decl = false;
      const bool sensitive = g->tables->lex_has_role[term];
      if (!parser.Scan(term, !sensitive || NameOk(partial), &decl)) return false;
      if (decl && restricted) {
        names.Add(partial);
        declared.push_back(partial);
      }
    }
    lex_state = LexerDfa::kStart;
    partial.clear();
    return true;
  }

  // Feeds bytes; on failure the state is garbage and the caller restores it.
  bool Feed(std::string_view bytes) {
    for (char ch : bytes) {
      const auto b = static_cast<uint8_t>(ch);
      int next = g->lexer.Next(lex_state, b);
      if (next == LexerDfa::kDead) {
        if (lex_state == LexerDfa::kStart || !EndLexeme()) return false;
        next = g->lexer.Next(LexerDfa::kStart, b);
        if (next == LexerDfa::kDead) return false;
      }
      lex_state = next;
      partial.push_back(ch);
    }
    if (lex_state == LexerDfa::kStart) return true;
    const int v = FinalViability(lex_state);
    return v == 1 || (v == 2 && PrefixOk(partial));
  }

  Step Save() const { return {lex_state, partial, parser.num_sets(), declared.size(), finished}; }
  void Restore(const Step& s) {
    lex_state = s.lex_state;
    partial = s.partial;
    parser.Truncate(s.parser_sets);
    while (declared.size() > s.declared) {
      names.Remove(declared.back());
      declared.pop_back();
    }
    finished = s.finished;
  }

  bool Complete() const {
    if (finished) return false;
    if (lex_state == LexerDfa::kStart) return parser.num_sets() > 1 && parser.IsComplete();
    const int term = g->lexer.Accept(lex_state);
    if (term < 0) return false;
    if (Bit(g->ignore_bits, term)) return IgnoreAllowed() && parser.IsComplete();
    auto& p = parser;
    const bool sensitive = g->tables->lex_has_role[term];
    if (!p.Scan(term, !sensitive || NameOk(partial), nullptr)) return false;
    const bool done = p.IsComplete();
    p.Pop();
    return done;
  }

  bool TryStep(std::string_view bytes) {
    if (finished) return false;
    Step before = Save();
    if (!Feed(bytes)) {
      Restore(before);
      return false;
    }
    history.push_back(std::move(before));
    return true;
  }

  void FillMask(uint64_t* bits);
  void Walk(const TokenTable& t, int node, int label, uint64_t* bits);
  void AddGroup(const TokenTable& t, const TokenTable::Group& grp, int label, uint64_t* bits);
};

namespace {
enum Label { kFree = 0, kNameOk = 1, kNameNotOk = 2 };
inline void SetBit(uint64_t* bits, int32_t id) { bits[id / 64] |= 1ull << (id % 64); }
}  // namespace

void MatcherState::AddGroup(const TokenTable& t, const TokenTable::Group& grp, int label, uint64_t* bits) {
  auto piece_text = [&](uint32_t i, std::string& buf) -> std::string_view {
    const NamePiece& p = t.pieces[i];
    std::string_view tok = g->token_bytes[t.tokens[i]];
    if (!p.after_partial) return tok.substr(p.offset, p.length);
    buf.assign(partial);
    buf.append(tok.substr(p.offset, p.length));
    return buf;
  };
  if (grp.leading_ignore && !root_ignore_ok) return;
  std::string buf;
  auto add_all = [&] {
    if (grp.dense >= 0) {
      const uint64_t* d = &t.dense_bits[static_cast<size_t>(grp.dense) * t.mask_words];
      for (size_t w = 0; w < t.mask_words; ++w) bits[w] |= d[w];
      return;
    }
    for (uint32_t i = grp.begin; i < grp.end; ++i) SetBit(bits, t.tokens[i]);
  };
  // Large groups are sorted by name piece: the tokens whose name is allowed (or, for an
  // unfinished name, is a prefix of an allowed one) are found by searching each allowed name.
  const bool search = grp.end - grp.begin > 8;
  auto for_allowed = [&](bool prefixes, auto&& fn) {
    const bool rel = t.pieces[grp.begin].after_partial;
    for (const auto& entry : names.names()) {
      const std::string& name = entry.first;
      if (rel && !std::string_view(name).starts_with(partial)) continue;
      const std::string_view rest = std::string_view(name).substr(rel ? partial.size() : 0);
      for (size_t len = prefixes ? 1 : rest.size(); len <= rest.size(); ++len) {
        const std::string_view key = rest.substr(0, len);
        uint32_t lo = grp.begin, hi = grp.end;
        while (lo < hi) {  // first piece >= key
          const uint32_t mid = (lo + hi) / 2;
          const NamePiece& p = t.pieces[mid];
          if (std::string_view(g->token_bytes[t.tokens[mid]]).substr(p.offset, p.length) < key) lo = mid + 1;
          else hi = mid;
        }
        for (; lo < grp.end; ++lo) {
          const NamePiece& p = t.pieces[lo];
          if (std::string_view(g->token_bytes[t.tokens[lo]]).substr(p.offset, p.length) != key) break;
          fn(t.tokens[lo]);
        }
      }
    }
  };
  if (grp.kind == TokenTable::kPlain || grp.kind == TokenTable::kCompleteName) {
    if (grp.kind == TokenTable::kPlain && label != kFree) return;
    if (FinalViability(grp.final_state) != 1) return;
    if (label == kFree) {
      add_all();
      return;
    }
    if (search && label == kNameOk) {
      for_allowed(false, [&](int32_t id) { SetBit(bits, id); });
      return;
    }
    for (uint32_t i = grp.begin; i < grp.end; ++i) {
      if (NameOk(piece_text(i, buf)) == (label == kNameOk)) SetBit(bits, t.tokens[i]);
    }
    return;
  }
  // kPartialName
  if (label != kFree) return;
  const int v = FinalViability(grp.final_state);
  if (v == 1) {
    add_all();
  } else if (v == 2 && search) {
    for_allowed(true, [&](int32_t id) { SetBit(bits, id); });
  } else if (v == 2) {
    for (uint32_t i = grp.begin; i < grp.end; ++i) {
      if (PrefixOk(piece_text(i, buf))) SetBit(bits, t.tokens[i]);
    }
  }
}

// Depth-first over the emission trie, the parser pushed along: a child is tried only when the
// parser takes its terminal. At the one name-sensitive lexeme of a path the walk splits into
// "the name passes @ref" and "it does not" when the parser's answer depends on it.
void MatcherState::Walk(const TokenTable& t, int node, int label, uint64_t* bits) {
  for (int gi : t.groups_at[node]) AddGroup(t, t.groups[gi], label, bits);
  const int num_terms = static_cast<int>(g->spec.terminals.size());
  for (const auto& [key, child] : t.children[node]) {
    if (key >= num_terms) {
      // The unfinished lexeme alone, a name: its text is known now.
      const int term = key - num_terms;
      const bool ok = NameOk(partial);
      const bool takes = ((parser.ExpectFree()[term / 64] >> (term % 64)) & 1) ||
                         (ok && ((parser.ExpectRef()[term / 64] >> (term % 64)) & 1));
      if (takes && parser.Scan(term, ok, nullptr)) {
        Walk(t, child, label, bits);
        parser.Pop();
      }
      continue;
    }
    const int term = key;
    const bool sensitive = g->tables->lex_has_role[term];
    const bool free = (parser.ExpectFree()[term / 64] >> (term % 64)) & 1;
    const bool ref = (parser.ExpectRef()[term / 64] >> (term % 64)) & 1;
    if (!free && !ref) continue;
    if (!sensitive || !restricted) {
      if (parser.Scan(term, true, nullptr)) {
        Walk(t, child, label, bits);
        parser.Pop();
      }
      continue;
    }
    if (label != kFree) continue;  // a second name: those tokens are checked one by one
    if (!ref) {
      if (parser.Scan(term, false, nullptr)) {
        Walk(t, child, kFree, bits);
        parser.Pop();
      }
      continue;
    }
    if (parser.Scan(term, true, nullptr)) {
      Walk(t, child, kNameOk, bits);
      parser.Pop();
    }
    if (free && parser.Scan(term, false, nullptr)) {
      Walk(t, child, kNameNotOk, bits);
      parser.Pop();
    }
  }
}

void MatcherState::FillMask(uint64_t* bits) {
  const size_t words = grammar->mask_words();
  std::memset(bits, 0, words * sizeof(uint64_t));
  if (finished) return;
  const TokenTable& t = g->Table(lex_state);
  root_ignore_ok = IgnoreAllowed();
  Walk(t, 0, kFree, bits);
  for (int32_t id : t.several_names) {
    Step before = Save();
    if (Feed(g->token_bytes[id])) SetBit(bits, id);
    Restore(before);
  }
  if (Complete()) for (int32_t id : g->eos_ids) SetBit(bits, id);
}

Matcher::Matcher() = default;
Matcher::~Matcher() = default;
Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;
Matcher::Matcher(const Matcher& other) : s_(std::make_unique<MatcherState>(*other.s_)) {}
Matcher& Matcher::operator=(const Matcher& other) {
  if (this != &other) s_ = std::make_unique<MatcherState>(*other.s_);
  return *this;
}

StatusOr<Matcher> Matcher::Create(std::shared_ptr<const CompiledGrammar> grammar,
                                  std::optional<std::vector<std::string>> allowed_globals) {
  if (!grammar) return InvalidArgument("Matcher::Create needs a compiled grammar");
  Matcher m;
  m.s_ = std::make_unique<MatcherState>(std::move(grammar));
  if (allowed_globals) {
    m.s_->restricted = true;
    for (const auto& n : *allowed_globals) m.s_->names.Add(n);
  }
  return m;
}

bool Matcher::AcceptToken(int32_t id) {
  const auto& g = *s_->g;
  if (id < 0 || id >= static_cast<int32_t>(g.token_bytes.size()) || s_->finished) return false;
  if (g.is_eos[id]) {
    if (!s_->Complete()) return false;
    s_->history.push_back(s_->Save());
    s_->finished = true;
    return true;
  }
  if (g.token_bytes[id].empty()) return false;
  return s_->TryStep(g.token_bytes[id]);
}

bool Matcher::AcceptBytes(std::string_view bytes) { return s_->TryStep(bytes); }
void Matcher::FillNextTokenMask(uint64_t* bits) { s_->FillMask(bits); }
bool Matcher::IsComplete() const { return s_->Complete(); }
int Matcher::num_steps() const { return static_cast<int>(s_->history.size()); }
bool Matcher::finished() const { return s_->finished; }

void Matcher::Rollback(int n) {
  if (n <= 0) return;
  n = std::min<int>(n, static_cast<int>(s_->history.size()));
  const size_t keep = s_->history.size() - n;
  MatcherState::Step target = s_->history[keep];
  s_->history.resize(keep);
  s_->Restore(target);
}

}  // namespace rote::inference::grammar

#include "inference/grammar/grammar_compiled.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace rote::inference::grammar {

size_t TokenTable::MemoryBytes() const {
  size_t n = sizeof(*this) + tokens.capacity() * sizeof(int32_t) + pieces.capacity() * sizeof(NamePiece) +
             groups.capacity() * sizeof(Group) + several_names.capacity() * sizeof(int32_t) +
             dense_bits.capacity() * sizeof(uint64_t);
  for (const auto& c : children) n += sizeof(c) + c.capacity() * sizeof(c[0]);
  for (const auto& g : groups_at) n += sizeof(g) + g.capacity() * sizeof(int);
  return n;
}

TokenTable BuildTokenTable(const CompiledGrammarImpl& g, int lex_state) {
  const LexerDfa& L = g.lexer;
  auto sensitive = [&](int t) { return (g.sensitive_bits[t / 64] >> (t % 64)) & 1; };
  TokenTable table;
  table.children.emplace_back();
  table.groups_at.emplace_back();
  std::map<std::tuple<int, int, int, bool>, int> group_of;  // (node, final state, kind, leading ignore)
  std::vector<std::vector<std::pair<int32_t, NamePiece>>> members;
  const int vocab = static_cast<int>(g.token_bytes.size());
  const int num_terms = static_cast<int>(g.spec.terminals.size());
  for (int32_t id = 0; id < vocab; ++id) {
    const std::string& bytes = g.token_bytes[id];
    if (bytes.empty() || g.is_eos[id]) continue;
    int state = lex_state;
    int start = lex_state == LexerDfa::kStart ? 0 : -1;  // -1: the lexeme began before the token
    int node = 0;
    int names = 0;
    bool leading_ignore = false;
    NamePiece piece;
    bool dead = false;
    for (size_t i = 0; i < bytes.size() && !dead; ++i) {
      const auto b = static_cast<uint8_t>(bytes[i]);
      int next = L.Next(state, b);
      if (next != LexerDfa::kDead) { state = next; continue; }
      const int term = state == LexerDfa::kStart ? -1 : L.Accept(state);
      if (term < 0) { dead = true; break; }
      if ((g.ignore_bits[term / 64] >> (term % 64)) & 1) {
        // Ignored lexemes leave the parser as it is: the trie skips them. One before the first
        // parsed lexeme needs the matcher's own state to allow it (see Group).
        if (node == 0) leading_ignore = true;
        state = L.Next(LexerDfa::kStart, b);
        start = static_cast<int>(i);
        if (state == LexerDfa::kDead) dead = true;
        continue;
      }
      // A name lexeme that ends where the token begins is the matcher's unfinished lexeme alone:
      // its text does not depend on the token, so it is keyed apart and checked once per mask.
      const bool partial_only = sensitive(term) && start < 0 && i == 0;
      const int key = partial_only ? term + num_terms : term;
      if (sensitive(term) && !partial_only) {
        ++names;
        piece = {static_cast<uint16_t>(start < 0 ? 0 : start), static_cast<uint16_t>(i - (start < 0 ? 0 : start)), start < 0};
      }
      auto& kids = table.children[node];
      int child = -1;
      for (const auto& [t, c] : kids) if (t == key) child = c;
      if (child < 0) {
        child = static_cast<int>(table.children.size());
        table.children[node].push_back({key, child});
        table.children.emplace_back();
        table.groups_at.emplace_back();
      }
      node = child;
      state = L.Next(LexerDfa::kStart, b);
      start = static_cast<int>(i);
      if (state == LexerDfa::kDead) dead = true;
    }
    if (dead || bytes.size() > 65535) continue;
    bool final_name = false;
    const uint64_t* poss = L.Possible(state);
    for (int w = 0; w < L.words(); ++w) final_name = final_name || (poss[w] & g.sensitive_bits[w]);
    if (final_name) {
      ++names;
      piece = {static_cast<uint16_t>(start < 0 ? 0 : start), static_cast<uint16_t>(bytes.size() - (start < 0 ? 0 : start)), start < 0};
    }
    if (names >= 2) { table.several_names.push_back(id); continue; }
    const int kind = names == 0 ? TokenTable::kPlain : final_name ? TokenTable::kPartialName : TokenTable::kCompleteName;
    auto [it, fresh] = group_of.emplace(std::make_tuple(node, state, kind, leading_ignore), static_cast<int>(table.groups.size()));
    if (fresh) {
      TokenTable::Group grp;
      grp.leading_ignore = leading_ignore;
      grp.node = node;
      grp.final_state = state;
      grp.kind = static_cast<TokenTable::Kind>(kind);
      table.groups.push_back(grp);
      table.groups_at[node].push_back(it->second);
      members.emplace_back();
    }
    members[it->second].push_back({id, piece});
  }
  for (size_t k = 0; k < table.groups.size(); ++k) {
    table.groups[k].begin = static_cast<uint32_t>(table.tokens.size());
    if (table.groups[k].kind != TokenTable::kPlain) {
      // Sorted by name piece, so the matcher finds the tokens of an allowed name by search.
      auto text = [&](const std::pair<int32_t, NamePiece>& m) {
        return std::string_view(g.token_bytes[m.first]).substr(m.second.offset, m.second.length);
      };
      std::stable_sort(members[k].begin(), members[k].end(),
                       [&](const auto& x, const auto& y) { return text(x) < text(y); });
    }
    for (const auto& [id, piece] : members[k]) {
      table.tokens.push_back(id);
      table.pieces.push_back(piece);
    }
    table.groups[k].end = static_cast<uint32_t>(table.tokens.size());
  }
  table.mask_words = (g.token_bytes.size() + 63) / 64;
  const size_t dense_min = std::max<size_t>(2048, g.token_bytes.size() / 32);
  for (auto& grp : table.groups) {
    if (grp.end - grp.begin < dense_min) continue;
    grp.dense = static_cast<int>(table.dense_bits.size() / table.mask_words);
    table.dense_bits.resize(table.dense_bits.size() + table.mask_words, 0);
    uint64_t* bits = &table.dense_bits[static_cast<size_t>(grp.dense) * table.mask_words];
    for (uint32_t i = grp.begin; i < grp.end; ++i) bits[table.tokens[i] / 64] |= 1ull << (table.tokens[i] % 64);
  }
  return table;
}

const TokenTable& CompiledGrammarImpl::Table(int lex_state) const {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (table_cache[lex_state]) return *table_cache[lex_state];
  }
  auto built = std::make_shared<const TokenTable>(BuildTokenTable(*this, lex_state));
  std::lock_guard<std::mutex> lock(mu);
  if (!table_cache[lex_state]) table_cache[lex_state] = std::move(built);
  return *table_cache[lex_state];
}

CompiledGrammar::CompiledGrammar() = default;
CompiledGrammar::~CompiledGrammar() = default;

StatusOr<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::Compile(std::string_view grammar_text,
                                                                          std::vector<std::string> token_bytes,
                                                                          std::vector<int32_t> eos_ids) {
  auto spec = ParseGrammarText(grammar_text);
  if (!spec.ok()) return spec.status();
  auto lexer = LexerDfa::Build(spec->terminals);
  if (!lexer.ok()) return lexer.status();
  std::shared_ptr<CompiledGrammar> cg(new CompiledGrammar());
  cg->impl_ = std::make_unique<CompiledGrammarImpl>();
  CompiledGrammarImpl& g = *cg->impl_;
  g.spec = std::move(*spec);
  g.lexer = std::move(*lexer);
  g.tables = std::make_unique<EarleyTables>(g.spec);
  g.token_bytes = std::move(token_bytes);
  g.is_eos.assign(g.token_bytes.size(), 0);
  for (int32_t id : eos_ids) {
    if (id < 0 || id >= static_cast<int32_t>(g.token_bytes.size())) {
      return InvalidArgument("eos id " + std::to_string(id) + " is outside the vocabulary");
    }
    g.is_eos[id] = 1;
  }
  g.eos_ids = std::move(eos_ids);
  const int w = g.lexer.words();
  g.ignore_bits.assign(w, 0);
  g.sensitive_bits.assign(w, 0);
  for (size_t t = 0; t < g.spec.terminals.size(); ++t) {
    if (g.spec.terminals[t].ignore) g.ignore_bits[t / 64] |= 1ull << (t % 64);
    if (g.tables->lex_has_role[t]) g.sensitive_bits[t / 64] |= 1ull << (t % 64);
  }
  g.table_cache.resize(g.lexer.num_states());
  g.Table(LexerDfa::kStart);  // the state every lexeme starts from
  return std::shared_ptr<const CompiledGrammar>(std::move(cg));
}

int32_t CompiledGrammar::vocab_size() const { return static_cast<int32_t>(impl_->token_bytes.size()); }
size_t CompiledGrammar::mask_words() const { return (impl_->token_bytes.size() + 63) / 64; }

size_t CompiledGrammar::MemoryBytes() const {
  const auto& g = *impl_;
  size_t n = static_cast<size_t>(g.lexer.num_states()) * (256 * 4 + 4 + 8 * g.lexer.words());
  for (const auto& r : g.tables->prod_rhs) n += sizeof(r) + r.capacity() * sizeof(int);
  for (const auto& t : g.token_bytes) n += sizeof(t) + (t.capacity() > 15 ? t.capacity() : 0);
  std::lock_guard<std::mutex> lock(g.mu);
  for (const auto& t : g.table_cache) if (t) n += t->MemoryBytes();
  return n;
}

}  // namespace rote::inference::grammar

#include "inference/grammar/earley.h"

#include <algorithm>
#include <climits>
#include <cstdint>

namespace rote::inference::grammar {
namespace {

// Item layout: production (22 bits) | dot (10 bits) | origin set (32 bits).
inline uint64_t MakeItem(uint32_t prod, uint32_t dot, uint32_t origin) {
  return (static_cast<uint64_t>(prod) << 42) | (static_cast<uint64_t>(dot) << 32) | origin;
}
inline uint32_t ItemProd(uint64_t it) { return static_cast<uint32_t>(it >> 42); }
inline uint32_t ItemDot(uint64_t it) { return static_cast<uint32_t>(it >> 32) & 1023u; }
inline uint32_t ItemOrigin(uint64_t it) { return static_cast<uint32_t>(it); }

}  // namespace

EarleyTables::EarleyTables(const GrammarSpec& spec) {
  gterms = spec.gterms;
  const size_t nn = spec.nonterminal_names.size();
  prods_of.resize(nn);
  nullable.assign(nn, 0);
  for (const auto& p : spec.productions) {
    prods_of[p.lhs].push_back(static_cast<int>(prod_lhs.size()));
    prod_lhs.push_back(p.lhs);
    prod_rhs.push_back(p.rhs);
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < prod_lhs.size(); ++i) {
      if (nullable[prod_lhs[i]]) continue;
      bool all = true;
      for (int s : prod_rhs[i]) all = all && s >= 0 && nullable[s];
      if (all) { nullable[prod_lhs[i]] = 1; changed = true; }
    }
  }
  lex_words = std::max<int>(1, (static_cast<int>(spec.terminals.size()) + 63) / 64);
  lex_has_role.assign(spec.terminals.size(), 0);
  for (const auto& g : gterms) if (g.role != NameRole::kPlain) lex_has_role[g.lex] = 1;
}

EarleyParser::EarleyParser(const EarleyTables* tables) : tables_(tables) {
  set_start_ = {0};
  seen_key_.assign(1024, 0);
  seen_stamp_.assign(1024, 0);
  ++stamp_;
  cur_base_ = 0;
  Insert(MakeItem(0, 0, 0));
  set_start_.push_back(static_cast<uint32_t>(items_.size()));
  Close(0);
}

bool EarleyParser::Insert(uint64_t item) {
  if ((items_.size() - cur_base_ + 1) * 2 >= seen_key_.size()) {
    // Grow the dedup table and re-insert the items of the set being built.
    seen_key_.assign(seen_key_.size() * 4, 0);
    seen_stamp_.assign(seen_key_.size(), 0);
    ++stamp_;
    std::vector<uint64_t> cur(items_.begin() + cur_base_, items_.end());
    items_.resize(cur_base_);
    for (uint64_t it : cur) Insert(it);
  }
  size_t mask = seen_key_.size() - 1;
  size_t h = (item * 0x9E3779B97F4A7C15ull) >> 20;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    if (seen_stamp_[i] != stamp_) {
      seen_stamp_[i] = stamp_;
      seen_key_[i] = item;
      items_.push_back(item);
      return true;
    }
    if (seen_key_[i] == item) return false;
  }
}

// Completes and predicts the last set (its scanned items already in items_), then records
// what it expects.
void EarleyParser::Close(size_t k) {
  const auto& T = *tables_;
  for (size_t i = set_start_[k]; i < items_.size(); ++i) {
    const uint64_t it = items_[i];
    const uint32_t p = ItemProd(it), d = ItemDot(it), o = ItemOrigin(it);
    const auto& rhs = T.prod_rhs[p];
    if (d == rhs.size()) {
      if (o == k) continue;  // nullable completion: handled at prediction
      const int lhs = T.prod_lhs[p];
      if (!indexed_[o]) IndexSet(o);
      const auto first = by_next_symbol_.begin() + set_start_[o];
      const auto last = by_next_symbol_.begin() + set_start_[o + 1];
      for (auto at = std::lower_bound(first, last, lhs); at != last && *at == lhs; ++at) {
        const uint64_t w = by_next_item_[at - by_next_symbol_.begin()];
        Insert(MakeItem(ItemProd(w), ItemDot(w) + 1, ItemOrigin(w)));
      }
      continue;
    }
    const int x = rhs[d];
    if (x < 0) continue;
    for (int q : T.prods_of[x]) Insert(MakeItem(static_cast<uint32_t>(q), 0, static_cast<uint32_t>(k)));
    if (T.nullable[x]) Insert(MakeItem(p, d + 1, o));
  }
  set_start_.back() = static_cast<uint32_t>(items_.size());
  indexed_.resize(k + 1);
  indexed_[k] = 0;
  const size_t w = T.lex_words;
  exp_free_.resize((k + 1) * w);
  exp_ref_.resize((k + 1) * w);
  uint64_t* ef = &exp_free_[k * w];
  uint64_t* er = &exp_ref_[k * w];
  std::fill(ef, ef + w, 0);
  std::fill(er, er + w, 0);
  for (size_t i = set_start_[k]; i < set_start_[k + 1]; ++i) {
    const uint64_t it = items_[i];
    const auto& rhs = T.prod_rhs[ItemProd(it)];
    const uint32_t d = ItemDot(it);
    if (d == rhs.size() || rhs[d] >= 0) continue;
    const GrammarTerminal& g = T.gterms[-1 - rhs[d]];
    uint64_t* bits = g.role == NameRole::kRef ? er : ef;
    bits[g.lex / 64] |= 1ull << (g.lex % 64);
  }
}

bool EarleyParser::Scan(int lex, bool ref_ok, bool* declared) {
  const auto& T = *tables_;
  const size_t w = T.lex_words;
  const size_t k = num_sets() - 1;
  const uint64_t bit = 1ull << (lex % 64);
  const bool free = exp_free_[k * w + lex / 64] & bit;
  const bool ref = ref_ok && (exp_ref_[k * w + lex / 64] & bit);
  if (!free && !ref) return false;
  ++stamp_;
  cur_base_ = items_.size();
  const uint32_t from = set_start_[k], to = set_start_[k + 1];
  for (uint32_t i = from; i < to; ++i) {
    const uint64_t it = items_[i];
    const auto& rhs = T.prod_rhs[ItemProd(it)];
    const uint32_t d = ItemDot(it);
    if (d == rhs.size() || rhs[d] >= 0) continue;
    const GrammarTerminal& g = T.gterms[-1 - rhs[d]];
    if (g.lex != lex || (g.role == NameRole::kRef && !ref_ok)) continue;
    if (g.role == NameRole::kDecl && declared) *declared = true;
    Insert(MakeItem(ItemProd(it), d + 1, ItemOrigin(it)));
  }
  set_start_.push_back(static_cast<uint32_t>(items_.size()));
  Close(k + 1);
  return true;
}

void EarleyParser::IndexSet(size_t o) {
  constexpr int32_t kNoSymbol = INT32_MAX;
  const auto& T = *tables_;
  const size_t a = set_start_[o], b = set_start_[o + 1];
  if (by_next_symbol_.size() < b) {
    by_next_symbol_.resize(b);
    by_next_item_.resize(b);
  }
  std::vector<std::pair<int32_t, uint64_t>> entries;
  entries.reserve(b - a);
  for (size_t j = a; j < b; ++j) {
    const uint64_t it = items_[j];
    const auto& rhs = T.prod_rhs[ItemProd(it)];
    const uint32_t d = ItemDot(it);
    entries.push_back({d < rhs.size() && rhs[d] >= 0 ? rhs[d] : kNoSymbol, it});
  }
  std::sort(entries.begin(), entries.end());
  for (size_t j = a; j < b; ++j) {
    by_next_symbol_[j] = entries[j - a].first;
    by_next_item_[j] = entries[j - a].second;
  }
  indexed_[o] = 1;
}

void EarleyParser::Pop() {
  if (num_sets() > 1) Truncate(num_sets() - 1);
}

void EarleyParser::Truncate(size_t n) {
  if (n < 1 || n >= num_sets()) return;
  set_start_.resize(n + 1);
  items_.resize(set_start_[n]);
  indexed_.resize(n);
  if (by_next_symbol_.size() > items_.size()) {
    by_next_symbol_.resize(items_.size());
    by_next_item_.resize(items_.size());
  }
  exp_free_.resize(n * tables_->lex_words);
  exp_ref_.resize(n * tables_->lex_words);
}

bool EarleyParser::IsComplete() const {
  const size_t k = num_sets() - 1;
  const uint64_t done = MakeItem(0, 1, 0);
  for (size_t i = set_start_[k]; i < set_start_[k + 1]; ++i) if (items_[i] == done) return true;
  return false;
}

bool EarleyParser::ExpectsAnything() const {
  const uint64_t* f = ExpectFree();
  const uint64_t* r = ExpectRef();
  for (int i = 0; i < tables_->lex_words; ++i) if (f[i] | r[i]) return true;
  return false;
}

}  // namespace rote::inference::grammar

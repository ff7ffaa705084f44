// Byte-level BPE: the merge table and the merge loop, lowest rank first, leftmost among equal
// ranks, as tokenizers' BPE model applies them.
#include <algorithm>

#include "inference/tokenizer/tokenizer_internal.h"

namespace rote::inference {

using tokenizer_internal::PairKey;

void Tokenizer::Impl::Bpe(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    auto it = bytes_to_id.find(word);
    if (it != bytes_to_id.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // Symbols form a linked list over the word; a merge joins a symbol with its right neighbour.
  struct Symbol {
    int32_t id;
    int prev;
    int next;
    bool alive;
  };
  struct Candidate {
    int32_t rank;
    int pos;
    int32_t new_id;
  };
  // Heap order: the lowest rank first, the leftmost among equal ranks (tokenizers' order).
  auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  // Scratch reused across words; per thread, so concurrent Encode calls share nothing.
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  symbols.clear();
  heap.clear();
  for (unsigned char b : word) {
    const int32_t id = byte_id[b];
    if (id < 0) continue;  // no token for this byte and no unk: tokenizers drops it too
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, true});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  auto consider = [&](int pos) {
    if (pos < 0) return;
    const int next = symbols[pos].next;
    if (next < 0) return;
    auto it = merges.find(PairKey(symbols[pos].id, symbols[next].id));
    if (it == merges.end()) return;
    heap.push_back({it->second.first, pos, it->second.second});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) consider(i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    // A stale entry: the pair at this position changed since it was queued.
    auto it = merges.find(PairKey(left.id, right.id));
    if (it == merges.end() || it->second.second != top.new_id) continue;
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    consider(left.prev);
    consider(top.pos);
  }
  for (int i = 0; i >= 0; i = symbols[i].next) {
    out.push_back(symbols[i].id);
  }
}

Status Tokenizer::Impl::LoadMerges(const tokenizer_internal::Json* merges_list) {
  using tokenizer_internal::Json;
  // Merges: "a b" strings (older files) or ["a", "b"] pairs (newer ones).
  if (merges_list == nullptr || !merges_list->is_array()) {
    return InvalidArgument("tokenizer.json: field 'model.merges' must be a list");
  }
  int32_t rank = 0;
  std::string joined;
  merges.reserve(merges_list->size());
  for (const Json& m : *merges_list) {
    std::string_view a, b;
    if (m.is_string()) {
      const std::string& text = m.get_ref<const std::string&>();
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        return InvalidArgument("tokenizer.json: merge '" + text + "' is not two tokens separated by one space");
      }
      a = std::string_view(text).substr(0, space);
      b = std::string_view(text).substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get_ref<const std::string&>();
      b = m[1].get_ref<const std::string&>();
    } else {
      return InvalidArgument("tokenizer.json: merge #" + std::to_string(rank) +
                             " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    joined.assign(a);
    joined.append(b);
    auto ia = token_to_id.find(a);
    auto ib = token_to_id.find(b);
    auto iab = token_to_id.find(joined);
    if (ia == token_to_id.end() || ib == token_to_id.end() || iab == token_to_id.end()) {
      return InvalidArgument("tokenizer.json: merge '" + std::string(a) + " " + std::string(b) +
                             "' uses a token that is not in the vocabulary");
    }
    // The first (best-ranked) occurrence of a pair wins, as in tokenizers.
    merges.emplace(PairKey(ia->second, ib->second), std::make_pair(rank, iab->second));
    ++rank;
  }
  return OkStatus();
}

}  // namespace rote::inference

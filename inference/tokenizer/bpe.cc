// BPE: the merge table and the merge loop, lowest rank first, leftmost among equal ranks, as
// tokenizers' BPE model applies them. Byte-level models start from one symbol per byte;
// SentencePiece-style models from one per character, with byte_fallback and unk for characters
// outside the vocabulary.
#include <algorithm>

#include "inference/tokenizer/tokenizer_internal.h"

namespace rote::inference {

using tokenizer_internal::PairKey;

int32_t Tokenizer::Impl::VocabId(std::string_view token) const {
  auto it = token_to_id.find(token);
  if (it == token_to_id.end() || !id_in_vocab[it->second]) return -1;
  return it->second;
}

void Tokenizer::Impl::Bpe(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    if (byte_level) {
      auto it = bytes_to_id.find(word);
      if (it != bytes_to_id.end()) {
        out.push_back(it->second);
        return;
      }
    } else if (const int32_t id = VocabId(word); id >= 0) {
      out.push_back(id);
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
  auto add = [&](int32_t id) {
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, true});
  };
  // tokenizers' merge_word: a unit (byte or character) found in the vocabulary is a symbol;
  // otherwise its bytes' "<0xAB>" tokens when byte_fallback has them all; otherwise unk, a run
  // of them fused into one with fuse_unk. A pending unk is added only before the next unit
  // found in the vocabulary (or at the end), after any byte-fallback symbols, as tokenizers does.
  int32_t pending_unk = -1;
  auto unit = [&](std::string_view text, int32_t id) {
    if (id >= 0) {
      if (pending_unk >= 0) add(pending_unk);
      pending_unk = -1;
      add(id);
      return;
    }
    if (byte_fallback) {
      bool all = true;
      for (unsigned char b : text) all = all && byte_fallback_id[b] >= 0;
      if (all) {
        for (unsigned char b : text) add(byte_fallback_id[b]);
        return;
      }
    }
    if (unk_id >= 0) {
      if (pending_unk >= 0 && !fuse_unk) add(pending_unk);
      pending_unk = unk_id;
    }
    // No token for this unit and no unk: tokenizers drops it too.
  };
  if (byte_level) {
    for (size_t i = 0; i < word.size(); ++i) unit(word.substr(i, 1), byte_id[static_cast<unsigned char>(word[i])]);
  } else {
    size_t pos = 0;
    while (pos < word.size()) {
      const size_t start = pos;
      ++pos;
      while (pos < word.size() && (static_cast<unsigned char>(word[pos]) & 0xC0) == 0x80) ++pos;
      const std::string_view ch = word.substr(start, pos - start);
      unit(ch, VocabId(ch));
    }
  }
  if (pending_unk >= 0) add(pending_unk);
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

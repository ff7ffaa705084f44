// The names NAME@ref may use (allowed globals and declared names) as a byte trie with counts,
// so a declaration can be undone (Rollback) and a partial name checked as a prefix.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace rote::inference::grammar {

class NameTrie {
 public:
  NameTrie() : nodes_(1) {}

  void Add(std::string_view name) {
    Walk(name, +1);
    ++count_[std::string(name)];
  }
  void Remove(std::string_view name) {
    Walk(name, -1);
    auto it = count_.find(std::string(name));
    if (it != count_.end() && --it->second == 0) count_.erase(it);
  }
  // Every name, sorted.
  const std::map<std::string, int>& names() const { return count_; }

  // Node reached by `text` from `from` (0 = root), or -1 when no name continues that way.
  int Find(int from, std::string_view text) const {
    int n = from;
    for (char c : text) {
      if (n < 0) return -1;
      n = Child(n, static_cast<uint8_t>(c));
    }
    return n;
  }
  bool IsName(int node) const { return node >= 0 && nodes_[node].ends > 0; }
  bool Contains(std::string_view name) const { return IsName(Find(0, name)); }
  bool HasPrefix(std::string_view text) const { return Find(0, text) >= 0; }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int>> kids;
    int passes = 0;  // names through this node
    int ends = 0;    // names ending here
  };
  int Child(int n, uint8_t c) const {
    for (const auto& [b, k] : nodes_[n].kids) if (b == c) return nodes_[k].passes > 0 ? k : -1;
    return -1;
  }
  void Walk(std::string_view name, int delta) {
    int n = 0;
    for (char ch : name) {
      const auto c = static_cast<uint8_t>(ch);
      int next = -1;
      for (const auto& [b, k] : nodes_[n].kids) if (b == c) next = k;
      if (next < 0) {
        next = static_cast<int>(nodes_.size());
        nodes_[n].kids.push_back({c, next});
        nodes_.emplace_back();
      }
      n = next;
      nodes_[n].passes += delta;
    }
    nodes_[n].ends += delta;
  }
  std::vector<Node> nodes_;
  std::map<std::string, int> count_;
};

}  // namespace rote::inference::grammar

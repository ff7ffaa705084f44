#include "inference/grammar/lexer.h"

#include <algorithm>
#include <map>

#include "inference/grammar/regex.h"

namespace rote::inference::grammar {
namespace {

constexpr int kMaxDfaStates = 200000;

void Closure(const Nfa& nfa, std::vector<int>& set, std::vector<char>& mark) {
  std::vector<int> stack(set.begin(), set.end());
  for (int s : set) mark[s] = 1;
  while (!stack.empty()) {
    int s = stack.back();
    stack.pop_back();
    for (int t : nfa.states[s].eps) {
      if (!mark[t]) {
        mark[t] = 1;
        set.push_back(t);
        stack.push_back(t);
      }
    }
  }
  for (int s : set) mark[s] = 0;
  std::sort(set.begin(), set.end());
}

}  // namespace

StatusOr<LexerDfa> LexerDfa::Build(const std::vector<TerminalDef>& terminals) {
  Nfa nfa;
  int start = nfa.NewState();
  const int n = static_cast<int>(terminals.size());
  std::vector<int> rank(n);  // lower wins
  int next_rank = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < n; ++i) if (terminals[i].literal == (pass == 0)) rank[i] = next_rank++;
  }
  for (int i = 0; i < n; ++i) {
    NfaFragment f;
    if (terminals[i].literal) {
      if (terminals[i].pattern.empty()) return InvalidArgument("terminal " + terminals[i].name + " is empty");
      f = AddLiteral(nfa, terminals[i].pattern);
    } else {
      auto r = AddRegex(nfa, terminals[i].pattern);
      if (!r.ok()) return InvalidArgument("terminal " + terminals[i].name + ": " + r.status().message());
      f = *r;
    }
    nfa.states[start].eps.push_back(f.start);
    nfa.states[f.end].accept = i;
  }

  LexerDfa dfa;
  dfa.words_ = std::max(1, (n + 63) / 64);
  std::map<std::vector<int>, int> ids;
  std::vector<std::vector<int>> sets;
  std::vector<char> mark(nfa.states.size(), 0);
  std::vector<int> init{start};
  Closure(nfa, init, mark);
  ids[init] = 0;
  sets.push_back(init);
  std::vector<std::vector<int>> moves(256);
  for (size_t d = 0; d < sets.size(); ++d) {
    if (sets.size() > kMaxDfaStates) return ResourceExhausted("lexer DFA exceeds 200000 states");
    int best = -1;
    for (int s : sets[d]) {
      int a = nfa.states[s].accept;
      if (a >= 0 && (best < 0 || rank[a] < rank[best])) best = a;
    }
    dfa.accept_.push_back(best);
    for (auto& m : moves) m.clear();
    for (int s : sets[d]) {
      for (const auto& r : nfa.states[s].ranges) {
        for (int b = r.lo; b <= r.hi; ++b) moves[b].push_back(r.target);
      }
    }
    for (int b = 0; b < 256; ++b) {
      auto& m = moves[b];
      int target = kDead;
      if (!m.empty()) {
        std::sort(m.begin(), m.end());
        m.erase(std::unique(m.begin(), m.end()), m.end());
        Closure(nfa, m, mark);
        auto [it, fresh] = ids.emplace(m, static_cast<int>(sets.size()));
        if (fresh) sets.push_back(m);
        target = it->second;
      }
      dfa.next_.push_back(target);
    }
  }
  // Possible terminals: the accepting terminal of every state reachable from a state, found by
  // propagating backwards until nothing changes.
  const int ns = static_cast<int>(sets.size());
  const int w = dfa.words_;
  dfa.possible_.assign(static_cast<size_t>(ns) * w, 0);
  for (int s = 0; s < ns; ++s) {
    if (dfa.accept_[s] >= 0) dfa.possible_[static_cast<size_t>(s) * w + dfa.accept_[s] / 64] |= 1ull << (dfa.accept_[s] % 64);
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (int s = ns - 1; s >= 0; --s) {
      uint64_t* ps = &dfa.possible_[static_cast<size_t>(s) * w];
      for (int b = 0; b < 256; ++b) {
        int t = dfa.next_[static_cast<size_t>(s) * 256 + b];
        if (t < 0 || t == s) continue;
        const uint64_t* pt = &dfa.possible_[static_cast<size_t>(t) * w];
        for (int i = 0; i < w; ++i) {
          if (pt[i] & ~ps[i]) { ps[i] |= pt[i]; changed = true; }
        }
      }
    }
  }
  return dfa;
}

}  // namespace rote::inference::grammar

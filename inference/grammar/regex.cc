#include "inference/grammar/regex.h"

#include <bitset>
#include <memory>

namespace rote::inference::grammar {
namespace {

using ByteSet = std::bitset<256>;

struct Node {
  enum Kind { kSet, kConcat, kAlt, kRepeat, kUntil } kind = kSet;
  ByteSet set;
  std::vector<std::unique_ptr<Node>> children;
  int min = 0, max = 0;  // kRepeat; max -1 = unbounded
  std::string until;     // kUntil
};
using NodePtr = std::unique_ptr<Node>;

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class RegexParser {
 public:
  explicit RegexParser(std::string_view p) : p_(p) {}

  StatusOr<NodePtr> Parse() {
    auto n = ParseAlt();
    if (!error_.empty()) return InvalidArgument(error_);
    if (pos_ != p_.size()) return InvalidArgument(Where("unexpected ')'"));
    return n;
  }

 private:
  std::string Where(const std::string& what) const {
    return "regex /" + std::string(p_) + "/ at offset " + std::to_string(pos_) + ": " + what;
  }
  void Fail(const std::string& what) {
    if (error_.empty()) error_ = Where(what);
  }
  bool More() const { return pos_ < p_.size() && error_.empty(); }

  NodePtr ParseAlt() {
    auto alt = std::make_unique<Node>();
    alt->kind = Node::kAlt;
    alt->children.push_back(ParseConcat());
    while (More() && p_[pos_] == '|') {
      ++pos_;
      alt->children.push_back(ParseConcat());
    }
    if (alt->children.size() == 1) return std::move(alt->children[0]);
    return alt;
  }

  NodePtr ParseConcat() {
    auto cat = std::make_unique<Node>();
    cat->kind = Node::kConcat;
    while (More() && p_[pos_] != '|' && p_[pos_] != ')') cat->children.push_back(ParseRepeat());
    return cat;
  }

  NodePtr ParseRepeat() {
    NodePtr atom = ParseAtom();
    while (More()) {
      char c = p_[pos_];
      int min = 0, max = 0;
      if (c == '*') { min = 0; max = -1; ++pos_; }
      else if (c == '+') { min = 1; max = -1; ++pos_; }
      else if (c == '?') { min = 0; max = 1; ++pos_; }
      else if (c == '{') {
        ++pos_;
        min = ParseInt();
        max = min;
        if (More() && p_[pos_] == ',') {
          ++pos_;
          max = (More() && p_[pos_] == '}') ? -1 : ParseInt();
        }
        if (!More() || p_[pos_] != '}') { Fail("expected '}'"); return atom; }
        ++pos_;
        if (max != -1 && max < min) Fail("{m,n} with n < m");
      } else {
        break;
      }
      auto rep = std::make_unique<Node>();
      rep->kind = Node::kRepeat;
      rep->min = min;
      rep->max = max;
      rep->children.push_back(std::move(atom));
      atom = std::move(rep);
    }
    return atom;
  }

  int ParseInt() {
    int v = 0;
    bool any = false;
    while (More() && p_[pos_] >= '0' && p_[pos_] <= '9' && v < 1000) {
      v = v * 10 + (p_[pos_++] - '0');
      any = true;
    }
    if (!any) Fail("expected a number");
    return v;
  }

  NodePtr SetNode(const ByteSet& s) {
    auto n = std::make_unique<Node>();
    n->set = s;
    return n;
  }

  NodePtr ParseAtom() {
    if (!More()) { Fail("unexpected end"); return SetNode({}); }
    char c = p_[pos_++];
    if (c == '(') {
      if (p_.substr(pos_).starts_with("?until:")) {
        pos_ += 7;
        auto n = std::make_unique<Node>();
        n->kind = Node::kUntil;
        while (More() && p_[pos_] != ')') {
          ByteSet s = ParseEscapeOrByte(/*in_class=*/false);
          if (s.count() != 1) { Fail("(?until:) takes literal bytes"); break; }
          for (int b = 0; b < 256; ++b) if (s[b]) n->until.push_back(static_cast<char>(b));
        }
        if (n->until.empty()) Fail("(?until:) needs text");
        if (!More()) { Fail("missing ')'"); return n; }
        ++pos_;
        return n;
      }
      if (p_.substr(pos_).starts_with("?:")) pos_ += 2;
      NodePtr inner = ParseAlt();
      if (!More() || p_[pos_] != ')') { Fail("missing ')'"); return inner; }
      ++pos_;
      return inner;
    }
    if (c == '[') return ParseClass();
    if (c == '.') {
      ByteSet s;
      s.set();
      s.reset('\n');
      return SetNode(s);
    }
    if (c == '*' || c == '+' || c == '?' || c == '{' || c == ')') {
      Fail(std::string("nothing to repeat or unbalanced '") + c + "'");
      return SetNode({});
    }
    --pos_;
    return SetNode(ParseEscapeOrByte(false));
  }

  NodePtr ParseClass() {
    bool negate = false;
    if (More() && p_[pos_] == '^') { negate = true; ++pos_; }
    ByteSet s;
    bool first = true;
    while (More() && (p_[pos_] != ']' || first)) {
      first = false;
      ByteSet lo = ParseEscapeOrByte(true);
      if (More() && p_[pos_] == '-' && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']' && lo.count() == 1) {
        ++pos_;
        ByteSet hi = ParseEscapeOrByte(true);
        int a = 0, b = 0;
        while (!lo[a]) ++a;
        if (hi.count() != 1) { Fail("bad range"); break; }
        while (!hi[b]) ++b;
        if (b < a) Fail("range out of order");
        for (int x = a; x <= b; ++x) s.set(x);
      } else {
        s |= lo;
      }
    }
    if (!More()) { Fail("missing ']'"); return SetNode(s); }
    ++pos_;
    if (negate) s.flip();
    return SetNode(s);
  }

  // One byte, or a class escape such as \d.
  ByteSet ParseEscapeOrByte(bool in_class) {
    (void)in_class;
    ByteSet s;
    unsigned char c = static_cast<unsigned char>(p_[pos_++]);
    if (c != '\\') { s.set(c); return s; }
    if (!More()) { Fail("trailing backslash"); return s; }
    char e = p_[pos_++];
    switch (e) {
      case 'n': s.set('\n'); break;
      case 't': s.set('\t'); break;
      case 'r': s.set('\r'); break;
      case 'f': s.set('\f'); break;
      case 'v': s.set('\v'); break;
      case '0': s.set(0); break;
      case 'x': {
        int h1 = pos_ < p_.size() ? HexValue(p_[pos_]) : -1;
        int h2 = pos_ + 1 < p_.size() ? HexValue(p_[pos_ + 1]) : -1;
        if (h1 < 0 || h2 < 0) { Fail("\\x needs two hex digits"); break; }
        pos_ += 2;
        s.set(h1 * 16 + h2);
        break;
      }
      case 'd': case 'D':
        for (int b = '0'; b <= '9'; ++b) s.set(b);
        if (e == 'D') s.flip();
        break;
      case 'w': case 'W':
        for (int b = 0; b < 256; ++b)
          if ((b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || b == '_') s.set(b);
        if (e == 'W') s.flip();
        break;
      case 's': case 'S':
        for (char b : std::string(" \t\n\r\f\v")) s.set(static_cast<unsigned char>(b));
        if (e == 'S') s.flip();
        break;
      default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) {
          Fail(std::string("unknown escape \\") + e);
        }
        s.set(static_cast<unsigned char>(e));
    }
    return s;
  }

  std::string_view p_;
  size_t pos_ = 0;
  std::string error_;
};

void AddSetMoves(Nfa& nfa, int from, const ByteSet& s, int to) {
  int b = 0;
  while (b < 256) {
    if (!s[b]) { ++b; continue; }
    int e = b;
    while (e + 1 < 256 && s[e + 1]) ++e;
    nfa.states[from].ranges.push_back({static_cast<uint8_t>(b), static_cast<uint8_t>(e), to});
    b = e + 1;
  }
}

// Knuth-Morris-Pratt automaton for "shortest text ending in `until`".
NfaFragment BuildUntil(Nfa& nfa, const std::string& until) {
  const int n = static_cast<int>(until.size());
  std::vector<int> fail(n + 1, 0);
  for (int i = 1, k = 0; i < n; ++i) {
    while (k > 0 && until[i] != until[k]) k = fail[k];
    if (until[i] == until[k]) ++k;
    fail[i + 1] = k;
  }
  std::vector<int> q(n + 1);
  for (int j = 0; j <= n; ++j) q[j] = nfa.NewState();
  for (int j = 0; j < n; ++j) {
    std::vector<ByteSet> to(n + 1);
    for (int b = 0; b < 256; ++b) {
      int k = j;
      while (k > 0 && static_cast<unsigned char>(until[k]) != b) k = fail[k];
      if (static_cast<unsigned char>(until[k]) == b) ++k;
      to[k].set(b);
    }
    for (int k = 0; k <= n; ++k) if (to[k].any()) AddSetMoves(nfa, q[j], to[k], q[k]);
  }
  return {q[0], q[n]};
}

NfaFragment Build(Nfa& nfa, const Node& node) {
  switch (node.kind) {
    case Node::kSet: {
      NfaFragment f{nfa.NewState(), nfa.NewState()};
      AddSetMoves(nfa, f.start, node.set, f.end);
      return f;
    }
    case Node::kConcat: {
      NfaFragment f{nfa.NewState(), -1};
      f.end = f.start;
      for (const auto& c : node.children) {
        NfaFragment g = Build(nfa, *c);
        nfa.states[f.end].eps.push_back(g.start);
        f.end = g.end;
      }
      return f;
    }
    case Node::kAlt: {
      NfaFragment f{nfa.NewState(), nfa.NewState()};
      for (const auto& c : node.children) {
        NfaFragment g = Build(nfa, *c);
        nfa.states[f.start].eps.push_back(g.start);
        nfa.states[g.end].eps.push_back(f.end);
      }
      return f;
    }
    case Node::kUntil:
      return BuildUntil(nfa, node.until);
    case Node::kRepeat: {
      NfaFragment f{nfa.NewState(), -1};
      f.end = f.start;
      for (int i = 0; i < node.min; ++i) {
        NfaFragment g = Build(nfa, *node.children[0]);
        nfa.states[f.end].eps.push_back(g.start);
        f.end = g.end;
      }
      if (node.max == -1) {
        NfaFragment g = Build(nfa, *node.children[0]);
        int out = nfa.NewState();
        nfa.states[f.end].eps.push_back(g.start);
        nfa.states[f.end].eps.push_back(out);
        nfa.states[g.end].eps.push_back(g.start);
        nfa.states[g.end].eps.push_back(out);
        f.end = out;
      } else {
        int out = nfa.NewState();
        for (int i = node.min; i < node.max; ++i) {
          NfaFragment g = Build(nfa, *node.children[0]);
          nfa.states[f.end].eps.push_back(g.start);
          nfa.states[f.end].eps.push_back(out);
          f.end = g.end;
        }
        nfa.states[f.end].eps.push_back(out);
        f.end = out;
      }
      return f;
    }
  }
  return {};
}

}  // namespace

StatusOr<NfaFragment> AddRegex(Nfa& nfa, std::string_view pattern) {
  RegexParser parser(pattern);
  auto tree = parser.Parse();
  if (!tree.ok()) return tree.status();
  return Build(nfa, **tree);
}

NfaFragment AddLiteral(Nfa& nfa, std::string_view bytes) {
  NfaFragment f{nfa.NewState(), -1};
  f.end = f.start;
  for (char c : bytes) {
    int next = nfa.NewState();
    auto b = static_cast<uint8_t>(c);
    nfa.states[f.end].ranges.push_back({b, b, next});
    f.end = next;
  }
  return f;
}

StatusOr<std::string> UnescapeLiteral(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') { out.push_back(s[i]); continue; }
    if (++i == s.size()) return InvalidArgument("literal ends in a backslash");
    switch (s[i]) {
      case 'n': out.push_back('\n'); break;
      case 't': out.push_back('\t'); break;
      case 'r': out.push_back('\r'); break;
      case '\\': out.push_back('\\'); break;
      case '"': out.push_back('"'); break;
      case 'x': {
        int h1 = i + 1 < s.size() ? HexValue(s[i + 1]) : -1;
        int h2 = i + 2 < s.size() ? HexValue(s[i + 2]) : -1;
        if (h1 < 0 || h2 < 0) return InvalidArgument("\\x in a literal needs two hex digits");
        out.push_back(static_cast<char>(h1 * 16 + h2));
        i += 2;
        break;
      }
      default:
        return InvalidArgument(std::string("unknown escape \\") + s[i] + " in a literal");
    }
  }
  return out;
}

}  // namespace rote::inference::grammar

// Parsing: the lexer's tokens to the tree of jinja_internal.h; operator precedence and the
// statement forms follow Jinja2's parser.
#include "inference/tokenizer/jinja/jinja_internal.h"
#include "inference/tokenizer/utf8.h"

namespace rote::inference::jinja {
namespace {

std::shared_ptr<Node> Make(NodeKind k, int line) {
  auto n = std::make_shared<Node>();
  n->kind = k;
  n->line = line;
  return n;
}

class Parser {
 public:
  Parser(std::vector<Token> toks, const Limits& limits) : t_(std::move(toks)), limits_(limits) {}

  NodeP ParseAll() {
    std::string end;
    NodeP body = ParseBody({}, &end);
    return body;
  }

 private:
  struct DepthGuard {
    Parser* p;
    explicit DepthGuard(Parser* parser) : p(parser) {
      if (++p->depth_ > p->limits_.max_depth) Fail("template nested too deeply (limit " + std::to_string(p->limits_.max_depth) + ")", p->Cur().line);
    }
    ~DepthGuard() { --p->depth_; }
  };

  const Token& Cur() const { return t_[i_]; }
  const Token& Peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  bool IsOp(const char* op) const { return Cur().type == Tok::kOp && Cur().text == op; }
  bool IsName(const char* n) const { return Cur().type == Tok::kName && Cur().text == n; }
  void Next() { if (i_ + 1 < t_.size()) ++i_; }
  [[noreturn]] void Unexpected(const std::string& what) const {
    std::string got = Cur().type == Tok::kEof ? "end of template"
                      : Cur().type == Tok::kBlockEnd ? "end of statement block"
                      : Cur().type == Tok::kVarEnd ? "end of print statement"
                      : "'" + Cur().text + "'";
    Fail("expected " + what + ", got " + got, Cur().line);
  }
  void ExpectOp(const char* op) {
    if (!IsOp(op)) Unexpected(std::string("'") + op + "'");
    Next();
  }
  std::string ExpectName() {
    if (Cur().type != Tok::kName) Unexpected("a name");
    std::string n = Cur().text;
    Next();
    return n;
  }
  void ExpectBlockEnd() {
    if (Cur().type != Tok::kBlockEnd) Unexpected("end of statement block");
    Next();
  }

  // Statements up to a {% name %} in `ends` (left unconsumed after the name; *end says which).
  NodeP ParseBody(const std::vector<std::string>& ends, std::string* end) {
    DepthGuard g(this);
    auto body = Make(NodeKind::kBody, Cur().line);
    for (;;) {
      const Token& tok = Cur();
      if (tok.type == Tok::kEof) {
        if (!ends.empty()) Fail("unexpected end of template: missing '{% " + ends.back() + " %}'", tok.line);
        *end = "";
        return body;
      }
      if (tok.type == Tok::kData) {
        auto n = Make(NodeKind::kText, tok.line);
        n->text = tok.text;
        body->kids.push_back(n);
        Next();
        continue;
      }
      if (tok.type == Tok::kVarBegin) {
        Next();
        auto n = Make(NodeKind::kOutput, tok.line);
        n->kids.push_back(ParseExpr());
        if (Cur().type != Tok::kVarEnd) Unexpected("end of print statement");
        Next();
        body->kids.push_back(n);
        continue;
      }
      if (tok.type != Tok::kBlockBegin) Unexpected("template data");
      Next();
      if (Cur().type != Tok::kName) Unexpected("a statement name");
      const std::string name = Cur().text;
      for (const std::string& e : ends) {
        if (name == e) {
          Next();
          *end = name;
          return body;
        }
      }
      NodeP st = ParseStatement();
      if (st) body->kids.push_back(st);
    }
  }

  NodeP ParseStatement() {
    const int line = Cur().line;
    const std::string name = Cur().text;
    Next();
    if (name == "if") return ParseIf(line);
    if (name == "for") return ParseFor(line);
    if (name == "set") return ParseSet(line);
    if (name == "macro") return ParseMacro(line);
    if (name == "call") return ParseCallBlock(line);
    if (name == "filter") {
      auto n = Make(NodeKind::kFilterBlock, line);
      std::vector<NodeP> filters = ParseFilterChain();
      ExpectBlockEnd();
      std::string end;
      n->kids.push_back(ParseBody({"endfilter"}, &end));
      ExpectBlockEnd();
      for (auto& f : filters) n->kids.push_back(f);
      return n;
    }
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) Fail("'" + name + "' outside a loop", line);
      ExpectBlockEnd();
      return Make(name == "break" ? NodeKind::kBreak : NodeKind::kContinue, line);
    }
    if (name == "generation") {
      // transformers' AssistantTracker: without an assistant mask it renders its body.
      ExpectBlockEnd();
      std::string end;
      NodeP body = ParseBody({"endgeneration"}, &end);
      ExpectBlockEnd();
      return body;
    }
    Fail("unknown or unsupported statement '" + name + "'", line);
  }

  NodeP ParseIf(int line) {
    auto n = Make(NodeKind::kIf, line);
    n->kids.push_back(ParseExpr());
    ExpectBlockEnd();
    std::string end;
    n->kids.push_back(ParseBody({"elif", "else", "endif"}, &end));
    if (end == "elif") {
      auto inner = ParseIf(Cur().line);
      auto wrap = Make(NodeKind::kBody, inner->line);
      wrap->kids.push_back(inner);
      n->kids.push_back(wrap);
      n->has_else = true;
      return n;  // the nested if consumed endif
    }
    if (end == "else") {
      ExpectBlockEnd();
      n->kids.push_back(ParseBody({"endif"}, &end));
      n->has_else = true;
    }
    ExpectBlockEnd();
    return n;
  }

  NodeP ParseFor(int line) {
    auto n = Make(NodeKind::kFor, line);
    n->names.push_back(ExpectName());
    while (IsOp(",")) {
      Next();
      n->names.push_back(ExpectName());
    }
    if (!IsName("in")) Unexpected("'in'");
    Next();
    n->kids.push_back(ParseExpr(/*no_cond=*/true));
    if (IsName("if")) {
      Next();
      n->kids.push_back(ParseExpr(true));
      n->has_filter = true;
    }
    if (IsName("recursive")) Fail("recursive loops are not supported", line);
    ExpectBlockEnd();
    std::string end;
    ++loop_depth_;
    n->kids.push_back(ParseBody({"else", "endfor"}, &end));
    --loop_depth_;
    if (end == "else") {
      ExpectBlockEnd();
      n->kids.push_back(ParseBody({"endfor"}, &end));
      n->has_else = true;
    }
    ExpectBlockEnd();
    return n;
  }

  NodeP ParseSet(int line) {
    std::vector<std::string> targets{ExpectName()};
    bool attr = false;
    if (IsOp(".")) {
      Next();
      targets.push_back(ExpectName());
      attr = true;
    } else {
      while (IsOp(",")) {
        Next();
        targets.push_back(ExpectName());
      }
    }
    if (IsOp("=")) {
      Next();
      auto n = Make(NodeKind::kSet, line);
      n->names = targets;
      n->flag = attr;
      n->kids.push_back(ParseTupleOrExpr());
      ExpectBlockEnd();
      return n;
    }
    if (attr || targets.size() != 1) Unexpected("'='");
    auto n = Make(NodeKind::kSetBlock, line);
    n->names = targets;
    std::vector<NodeP> filters;
    if (IsOp("|")) filters = ParseFilterChain();
    ExpectBlockEnd();
    std::string end;
    n->kids.push_back(ParseBody({"endset"}, &end));
    ExpectBlockEnd();
    for (auto& f : filters) n->kids.push_back(f);
    return n;
  }

  // Parameters "(a, b=1)" into names and default kids.
  void ParseParams(Node& n) {
    ExpectOp("(");
    while (!IsOp(")")) {
      n.names.push_back(ExpectName());
      if (IsOp("=")) {
        Next();
        n.kwarg_names.push_back(n.names.back());
        n.kids.push_back(ParseExpr());
      } else if (!n.kwarg_names.empty()) {
        Fail("non-default argument follows default argument", Cur().line);
      }
      if (!IsOp(",")) break;
      Next();
    }
    ExpectOp(")");
  }

  NodeP ParseMacro(int line) {
    auto n = Make(NodeKind::kMacro, line);
    n->text = ExpectName();
    n->kids.push_back(nullptr);  // body, filled below
    ParseParams(*n);
    ExpectBlockEnd();
    std::string end;
    n->kids[0] = ParseBody({"endmacro"}, &end);
    if (Cur().type == Tok::kName) Next();  // {% endmacro name %}
    ExpectBlockEnd();
    return n;
  }

  NodeP ParseCallBlock(int line) {
    auto n = Make(NodeKind::kCallBlock, line);
    n->kids.push_back(nullptr);  // body
    if (IsOp("(")) ParseParams(*n);
    NodeP call = ParseExpr();
    if (call->kind != NodeKind::kCall) Fail("expected a call after 'call'", line);
    ExpectBlockEnd();
    std::string end;
    n->kids[0] = ParseBody({"endcall"}, &end);
    ExpectBlockEnd();
    n->kids.push_back(call);
    return n;
  }

  std::vector<NodeP> ParseFilterChain() {
    std::vector<NodeP> out;
    bool first = true;
    while (first || IsOp("|")) {
      if (!first || IsOp("|")) Next();
      first = false;
      out.push_back(ParseFilterCall(nullptr));
    }
    return out;
  }

  // ---- expressions ----

  NodeP ParseTupleOrExpr() {
    const int line = Cur().line;
    NodeP first = ParseExpr();
    if (!IsOp(",")) return first;
    auto t = Make(NodeKind::kTuple, line);
    t->kids.push_back(first);
    while (IsOp(",")) {
      Next();
      if (Cur().type == Tok::kBlockEnd || Cur().type == Tok::kVarEnd) break;
      t->kids.push_back(ParseExpr());
    }
    return t;
  }

  NodeP ParseExpr(bool no_cond = false) {
    DepthGuard g(this);
    if (no_cond) return ParseOr();
    NodeP expr = ParseOr();
    while (IsName("if")) {
      const int line = Cur().line;
      Next();
      auto n = Make(NodeKind::kCondExpr, line);
      NodeP cond = ParseOr();
      n->kids = {cond, expr};
      if (IsName("else")) {
        Next();
        n->kids.push_back(ParseExpr());
      }
      expr = n;
    }
    return expr;
  }

  NodeP ParseOr() {
    NodeP left = ParseAnd();
    while (IsName("or")) {
      auto n = Make(NodeKind::kOr, Cur().line);
      Next();
      n->kids = {left, ParseAnd()};
      left = n;
    }
    return left;
  }
  NodeP ParseAnd() {
    NodeP left = ParseNot();
    while (IsName("and")) {
      auto n = Make(NodeKind::kAnd, Cur().line);
      Next();
      n->kids = {left, ParseNot()};
      left = n;
    }
    return left;
  }
  NodeP ParseNot() {
    if (IsName("not")) {
      DepthGuard g(this);
      auto n = Make(NodeKind::kNot, Cur().line);
      Next();
      n->kids = {ParseNot()};
      return n;
    }
    return ParseCompare();
  }
  // a < b < c is (a < b) and (b < c), each operand evaluated once: one node, ops in `names`.
  NodeP ParseCompare() {
    NodeP left = ParseMath1();
    std::shared_ptr<Node> n;
    for (;;) {
      std::string op;
      if (Cur().type == Tok::kOp && (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" ||
                                     Cur().text == "<=" || Cur().text == ">" || Cur().text == ">=")) {
        op = Cur().text;
        Next();
      } else if (IsName("in")) {
        op = "in";
        Next();
      } else if (IsName("not") && Peek().type == Tok::kName && Peek().text == "in") {
        op = "notin";
        Next();
        Next();
      } else {
        return n ? n : left;
      }
      if (!n) {
        n = Make(NodeKind::kCompare, left->line);
        n->kids.push_back(left);
      }
      n->names.push_back(op);
      n->kids.push_back(ParseMath1());
    }
  }
  NodeP ParseMath1() {
    NodeP left = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      auto n = Make(NodeKind::kBinary, Cur().line);
      n->text = Cur().text;
      Next();
      n->kids = {left, ParseConcat()};
      left = n;
    }
    return left;
  }
  NodeP ParseConcat() {
    NodeP left = ParseMath2();
    while (IsOp("~")) {
      auto n = Make(NodeKind::kConcat, Cur().line);
      Next();
      n->kids = {left, ParseMath2()};
      left = n;
    }
    return left;
  }
  NodeP ParseMath2() {
    NodeP left = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      auto n = Make(NodeKind::kBinary, Cur().line);
      n->text = Cur().text;
      Next();
      n->kids = {left, ParsePow()};
      left = n;
    }
    return left;
  }
  NodeP ParsePow() {
    NodeP left = ParseUnary(true);
    while (IsOp("**")) {
      auto n = Make(NodeKind::kBinary, Cur().line);
      n->text = "**";
      Next();
      n->kids = {left, ParseUnary(true)};
      left = n;
    }
    return left;
  }
  NodeP ParseUnary(bool with_filter) {
    DepthGuard g(this);
    NodeP node;
    if (IsOp("-") || IsOp("+")) {
      auto n = Make(NodeKind::kUnary, Cur().line);
      n->text = Cur().text;
      Next();
      n->kids = {ParseUnary(false)};
      node = n;
    } else {
      node = ParsePostfix(ParsePrimary());
    }
    if (with_filter) node = ParseFilterExpr(node);
    return node;
  }

  NodeP ParsePrimary() {
    const Token& tok = Cur();
    const int line = tok.line;
    if (tok.type == Tok::kName) {
      auto n = Make(NodeKind::kLiteral, line);
      if (tok.text == "true" || tok.text == "True") n->value = Value::Bool(true);
      else if (tok.text == "false" || tok.text == "False") n->value = Value::Bool(false);
      else if (tok.text == "none" || tok.text == "None") n->value = Value::None();
      else {
        n->kind = NodeKind::kName;
        n->text = tok.text;
      }
      Next();
      return n;
    }
    if (tok.type == Tok::kString) {
      std::string s = tok.text;
      Next();
      while (Cur().type == Tok::kString) {  // adjacent literals concatenate
        s += Cur().text;
        Next();
      }
      auto n = Make(NodeKind::kLiteral, line);
      n->value = Value::String(std::move(s));
      return n;
    }
    if (tok.type == Tok::kInt || tok.type == Tok::kFloat) {
      auto n = Make(NodeKind::kLiteral, line);
      n->value = tok.value;
      Next();
      return n;
    }
    if (IsOp("(")) {
      Next();
      if (IsOp(")")) {
        Next();
        return Make(NodeKind::kTuple, line);
      }
      NodeP first = ParseExpr();
      if (IsOp(")")) {
        Next();
        return first;
      }
      auto t = Make(NodeKind::kTuple, line);
      t->kids.push_back(first);
      while (IsOp(",")) {
        Next();
        if (IsOp(")")) break;
        t->kids.push_back(ParseExpr());
      }
      ExpectOp(")");
      return t;
    }
    if (IsOp("[")) {
      Next();
      auto l = Make(NodeKind::kList, line);
      while (!IsOp("]")) {
        l->kids.push_back(ParseExpr());
        if (!IsOp(",")) break;
        Next();
      }
      ExpectOp("]");
      return l;
    }
    if (IsOp("{")) {
      Next();
      auto d = Make(NodeKind::kDict, line);
      while (!IsOp("}")) {
        d->kids.push_back(ParseExpr());
        ExpectOp(":");
        d->kids.push_back(ParseExpr());
        if (!IsOp(",")) break;
        Next();
      }
      ExpectOp("}");
      return d;
    }
    Unexpected("an expression");
  }

  void ParseCallArgs(Node& n) {
    ExpectOp("(");
    std::vector<NodeP> kw;
    while (!IsOp(")")) {
      if (Cur().type == Tok::kName && Peek().type == Tok::kOp && Peek().text == "=") {
        n.kwarg_names.push_back(Cur().text);
        Next();
        Next();
        kw.push_back(ParseExpr());
      } else {
        if (!kw.empty()) Fail("positional argument follows keyword argument", Cur().line);
        n.kids.push_back(ParseExpr());
      }
      if (!IsOp(",")) break;
      Next();
    }
    ExpectOp(")");
    for (auto& k : kw) n.kids.push_back(k);
  }

  NodeP ParsePostfix(NodeP node) {
    for (;;) {
      const int line = Cur().line;
      if (IsOp(".")) {
        Next();
        auto n = Make(NodeKind::kGetAttr, line);
        if (Cur().type == Tok::kInt) {
          n->kind = NodeKind::kGetItem;
          auto idx = Make(NodeKind::kLiteral, line);
          idx->value = Cur().value;
          Next();
          n->kids = {node, idx};
        } else {
          n->text = ExpectName();
          n->kids = {node};
        }
        node = n;
      } else if (IsOp("[")) {
        Next();
        node = ParseSubscript(node, line);
      } else if (IsOp("(")) {
        auto n = Make(NodeKind::kCall, line);
        n->kids.push_back(node);
        ParseCallArgs(*n);
        node = n;
      } else {
        return node;
      }
    }
  }

  NodeP ParseSubscript(NodeP target, int line) {
    NodeP parts[3];
    int mask = 0;
    bool is_slice = false;
    auto at_end = [&] { return IsOp(":") || IsOp("]"); };
    if (!at_end()) { parts[0] = ParseExpr(); mask |= 1; }
    if (IsOp(":")) {
      is_slice = true;
      Next();
      if (!at_end()) { parts[1] = ParseExpr(); mask |= 2; }
      if (IsOp(":")) {
        Next();
        if (!IsOp("]")) { parts[2] = ParseExpr(); mask |= 4; }
      }
    }
    ExpectOp("]");
    if (!is_slice) {
      if (!parts[0]) Unexpected("a subscript");
      auto n = Make(NodeKind::kGetItem, line);
      n->kids = {target, parts[0]};
      return n;
    }
    auto n = Make(NodeKind::kSlice, line);
    n->slice_mask = mask;
    n->kids = {target, parts[0], parts[1], parts[2]};
    return n;
  }

  // name[.name](args) after a '|'; `input` may be null (filter blocks, set blocks).
  NodeP ParseFilterCall(NodeP input) {
    auto n = Make(NodeKind::kFilter, Cur().line);
    n->text = ExpectName();
    while (IsOp(".")) {
      Next();
      n->text += "." + ExpectName();
    }
    n->kids.push_back(input);
    if (IsOp("(")) ParseCallArgs(*n);
    return n;
  }

  NodeP ParseFilterExpr(NodeP node) {
    for (;;) {
      if (IsOp("|")) {
        Next();
        node = ParseFilterCall(node);
      } else if (IsName("is")) {
        const int line = Cur().line;
        Next();
        bool negated = false;
        if (IsName("not")) {
          negated = true;
          Next();
        }
        auto n = Make(NodeKind::kTest, line);
        n->text = ExpectName();
        while (IsOp(".")) {
          Next();
          n->text += "." + ExpectName();
        }
        n->kids.push_back(node);
        if (IsOp("(")) {
          ParseCallArgs(*n);
        } else if ((Cur().type == Tok::kName || Cur().type == Tok::kString || Cur().type == Tok::kInt ||
                    Cur().type == Tok::kFloat || IsOp("[") || IsOp("{")) &&
                   !IsName("else") && !IsName("or") && !IsName("and") && !IsName("if") &&
                   !IsName("is") && !IsName("in") && !IsName("not")) {
          n->kids.push_back(ParsePostfix(ParsePrimary()));
        }
        node = n;
        if (negated) {
          auto nn = Make(NodeKind::kNot, line);
          nn->kids = {node};
          node = nn;
        }
      } else if (IsOp("(")) {
        auto n = Make(NodeKind::kCall, Cur().line);
        n->kids.push_back(node);
        ParseCallArgs(*n);
        node = n;
      } else {
        return node;
      }
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  const Limits& limits_;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

NodeP ParseTemplate(std::string_view source, const Limits& limits) {
  if (source.size() > limits.max_template_bytes) {
    Fail("template of " + std::to_string(source.size()) + " bytes exceeds the limit of " +
             std::to_string(limits.max_template_bytes),
         1);
  }
  if (!utf8::IsValid(source)) Fail("template is not valid UTF-8", 1);
  Parser parser(Lex(source), limits);
  return parser.ParseAll();
}

}  // namespace rote::inference::jinja

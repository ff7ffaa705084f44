// The JSON and RE2 reply grammars, and the lookup by name.
#include <string_view>

#include "inference/grammar/builtin.h"
#include "inference/grammar/grammar.h"

namespace rote::inference::grammar {

const char kJsonGrammar[] = R"GRAMMAR(
# A JSON value (RFC 8259); strings hold valid UTF-8.
%start value
%ignore WS
WS = /[ \t\n\r]+/
STRING = /"([ !#-\[\]-~]|\\(["\\\/bfnrt]|u[0-9a-fA-F]{4})|[\xc2-\xdf][\x80-\xbf]|\xe0[\xa0-\xbf][\x80-\xbf]|[\xe1-\xec\xee\xef][\x80-\xbf][\x80-\xbf]|\xed[\x80-\x9f][\x80-\xbf]|\xf0[\x90-\xbf][\x80-\xbf][\x80-\xbf]|[\xf1-\xf3][\x80-\xbf][\x80-\xbf][\x80-\xbf]|\xf4[\x80-\x8f][\x80-\xbf][\x80-\xbf])*"/
NUMBER = /-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/
value ::= object | array | STRING | NUMBER | "true" | "false" | "null"
object ::= "{" (member ("," member)*)? "}"
member ::= STRING ":" value
array ::= "[" (value ("," value)*)? "]"
)GRAMMAR";

namespace {

// Printable ASCII that is a literal both inside and outside a character class.
constexpr std::string_view kPlain = " !\"#%&',/0123456789:;<=>@ABCDEFGHIJKLMNOPQRSTUVWXYZ_`abcdefghijklmnopqrstuvwxyz~";

std::string Hex(char c) {
  static const char* kDigits = "0123456789abcdef";
  const auto b = static_cast<unsigned char>(c);
  return std::string("\\x") + kDigits[b >> 4] + kDigits[b & 15];
}

// x-y for plain x <= y (RANGE) and for x > y (BACKWARD_RANGE, three literals outside a class).
std::string Ranges(bool backward) {
  std::string out;
  for (char lo : kPlain) {
    std::string hi;
    for (char c : kPlain) if (backward ? c < lo : c >= lo) hi += Hex(c);
    if (hi.empty()) continue;
    if (!out.empty()) out += " | ";
    out += "/" + Hex(lo) + "-[" + hi + "]/";
  }
  return out;
}

// {n}, {n,} and {n,m} with n <= m <= 1000 and no leading zeros, n < 100.
std::string Repeats() {
  std::string out = "/\\{(0|[1-9][0-9]{0,2}|1000)(,)?\\}/";
  out += " | /\\{(0|[1-9][0-9]?),([1-9][0-9][0-9]|1000)\\}/";  // m has three digits or more
  for (int n = 0; n <= 99; ++n) {
    // two-digit (or one-digit) m >= n
    std::string ms;
    for (int m = std::max(n, 1); m <= 99; ++m) {
      if (!ms.empty()) ms += "|";
      ms += std::to_string(m);
    }
    if (n == 0) ms = "0|" + ms;
    out += " | /\\{" + std::to_string(n) + ",(" + ms + ")\\}/";
  }
  return out;
}

}  // namespace

const std::string& Re2ReplyGrammar() {
  static const std::string* text = [] {
    auto* s = new std::string(R"GRAMMAR(
# A reply for an RE2 generation point: one fenced block holding one line, a pattern RE2
# accepts: no lookaround, no backreferences. Inside a class only plain printable characters
# form ranges (a-z); [a-] is a or '-'. Duplicate group names are left to RE2.
%start reply
FENCE_OPEN = "```re2\n"
FENCE_CLOSE = "\n```"
PLAIN = /[ !"#%&',\/0-9:;<=>@A-Z_`a-z~]/
UTF8 = /[\xc2-\xdf][\x80-\xbf]|\xe0[\xa0-\xbf][\x80-\xbf]|[\xe1-\xec\xee\xef][\x80-\xbf][\x80-\xbf]|\xed[\x80-\x9f][\x80-\xbf]|\xf0[\x90-\xbf][\x80-\xbf][\x80-\xbf]|[\xf1-\xf3][\x80-\xbf][\x80-\xbf][\x80-\xbf]|\xf4[\x80-\x8f][\x80-\xbf][\x80-\xbf]/
DASHED = /[ !"#%&',\/0-9:;<=>@A-Z_`a-z~]-/
ESCAPED = /\\[!-\/:-@\[-`{-~]/ | /\\[afnrtv]/ | /\\x[0-9A-Fa-f][0-9A-Fa-f]/ | /\\x\{(10|0?[0-9A-Fa-f])?[0-9A-Fa-f]{1,4}\}/
PERL_CLASS = /\\[dDsSwW]/ | /\\[pP][LMNPSZC]/ | /\\[pP]\{\^?(L|Lu|Ll|Lt|Lm|Lo|M|Mn|Mc|Me|N|Nd|Nl|No|P|Pc|Pd|Ps|Pe|Pi|Pf|Po|S|Sm|Sc|Sk|So|Z|Zs|Zl|Zp|C|Cc|Cf|Co|Greek|Latin|Cyrillic|Han|Arabic|Hebrew|Hiragana|Katakana|Hangul|Thai|Any)\}/
POSIX_CLASS = /\[:\^?(alnum|alpha|ascii|blank|cntrl|digit|graph|lower|print|punct|space|upper|word|xdigit):\]/
ASSERTION = /\\[bBAz]/
NAMED_GROUP = /\(\?P<[A-Za-z_][A-Za-z0-9_]*>/
FLAG_GROUP = /\(\?(im?s?U?|ms?U?|sU?|U)(-(im?s?U?|ms?U?|sU?|U))?:/ | /\(\?-(im?s?U?|ms?U?|sU?|U):/
FLAG_SET = /\(\?(im?s?U?|ms?U?|sU?|U)(-(im?s?U?|ms?U?|sU?|U))?\)/ | /\(\?-(im?s?U?|ms?U?|sU?|U)\)/
)GRAMMAR");
    *s += "RANGE = " + Ranges(false) + "\n";
    *s += "BACKWARD_RANGE = " + Ranges(true) + "\n";
    *s += "REPEAT = " + Repeats() + "\n";
    *s += R"GRAMMAR(
reply ::= FENCE_OPEN pattern FENCE_CLOSE
pattern ::= piece+ ("|" piece*)*
alternation ::= piece* ("|" piece*)*
piece ::= atom quantifier? | "^" | "$" | ASSERTION | FLAG_SET
quantifier ::= ("*" | "+" | "?" | REPEAT) "?"?
# x-y outside a class is three literals; the quantifier binds to the last.
atom ::= PLAIN | UTF8 | DASHED | RANGE | BACKWARD_RANGE | "-" | "]" | "}" | ESCAPED | PERL_CLASS | "."
       | "(" alternation ")" | "(?:" alternation ")" | NAMED_GROUP alternation ")" | FLAG_GROUP alternation ")"
       | class
class ::= "[" "^"? class_item+ DASHED? "]" | "[" "^"? DASHED "]"
class_item ::= PLAIN | UTF8 | RANGE | ESCAPED | PERL_CLASS | POSIX_CLASS
             | "." | "*" | "+" | "?" | "(" | ")" | "|" | "{" | "}" | "$" | "^"
)GRAMMAR";
    return s;
  }();
  return *text;
}

namespace {

// The Lua grammar started at any chunk (no fence, no required final function): for checking
// whole blueprint files.
const std::string& LuaChunkGrammar() {
  static const std::string* text = [] {
    std::string s = kLuaReplyGrammar;
    const std::string from = "%start reply";
    s.replace(s.find(from), from.size(), "%start lua_chunk\n%ignore_leading");
    return new std::string(s + "lua_chunk ::= block\n");
  }();
  return *text;
}

}  // namespace

std::string_view BuiltinGrammar(std::string_view name) {
  if (name == "lua_reply") return kLuaReplyGrammar;
  if (name == "lua_chunk") return LuaChunkGrammar();
  if (name == "re2_reply") return Re2ReplyGrammar();
  if (name == "json") return kJsonGrammar;
  return {};
}

}  // namespace rote::inference::grammar

// The reply grammar of a Lua generation point.
#include "inference/grammar/builtin.h"

namespace rote::inference::grammar {

// What luac still checks beyond this grammar (not context-free, left to compilation): break
// outside a loop, goto without a visible label, '...' outside a vararg function, attributes
// other than <const> and <close>, assignment to a <const> local, more than one <close> in a
// local list, the limits on locals and upvalues. (An attribute cannot be one lexeme: "<c"
// would then start one in `i<count`, and the lexer does not backtrack.)
// Long brackets are accepted at levels 0 to 4 ([[ ]] to [====[ ]====]).
const char kLuaReplyGrammar[] = R"GRAMMAR(
# A reply for a Lua generation point: one fenced block holding a Lua 5.4 chunk whose last
# statement returns a function.
%start reply
%ignore WS COMMENT LONG_COMMENT

FENCE_OPEN = "```lua\n"
FENCE_CLOSE = /[ \t\r\n]*\n```/
WS = /[ \t\r\n\f\v]+/
# A line comment may not start like a long bracket; those are LONG_COMMENT.
COMMENT = /--([^\[\n][^\n]*)?/ | /--\[=*([^\[=\n][^\n]*)?/
LONG_COMMENT = /--\[\[(?until:]])/ | /--\[=\[(?until:]=])/ | /--\[==\[(?until:]==])/ | /--\[===\[(?until:]===])/ | /--\[====\[(?until:]====])/
NAME = /[A-Za-z_][A-Za-z0-9_]*/
NUMBER = /[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?/ | /\.[0-9]+([eE][+-]?[0-9]+)?/ | /0[xX]([0-9a-fA-F]+(\.[0-9a-fA-F]*)?|\.[0-9a-fA-F]+)([pP][+-]?[0-9]+)?/
# What Lua's lexer reads as one numeral (digits, letters, dots, exponent signs, one trailing
# letter) when it is not a valid one: no rule uses it, so "1..2" or "3x" are rejected as Lua does.
MALFORMED_NUMBER = /[0-9]([0-9a-fA-F.]|[eE][+-])*[A-Za-z_]?/ | /\.[0-9]([0-9a-fA-F.]|[eE][+-])*[A-Za-z_]?/ | /0[xX]([0-9a-fA-F.]|[pP][+-]?)*[A-Za-z_]?/
# Short strings: escapes \a \b \f \n \r \t \v \\ \" \' \<newline> \z \xXX \ddd (<= 255) \u{X}.
# A one- or two-digit decimal escape may not be followed by a digit (Lua would read three).
STRING = /"([^"\\\r\n]|\\([abfnrtv\\"'\n]|\r\n?|z[ \t\r\n\f\v]*|x[0-9A-Fa-f][0-9A-Fa-f]|u\{0*([0-9A-Fa-f]{1,7}|[0-7][0-9A-Fa-f]{7})\}|[01][0-9][0-9]|2[0-4][0-9]|25[0-5])|(\\[0-9][0-9]?)+([^"\\\r\n0-9]|\\([abfnrtv\\"'\n]|\r\n?|z[ \t\r\n\f\v]*|x[0-9A-Fa-f][0-9A-Fa-f]|u\{0*([0-9A-Fa-f]{1,7}|[0-7][0-9A-Fa-f]{7})\}|[01][0-9][0-9]|2[0-4][0-9]|25[0-5])))*(\\[0-9][0-9]?)*"/ | /'([^'\\\r\n]|\\([abfnrtv\\"'\n]|\r\n?|z[ \t\r\n\f\v]*|x[0-9A-Fa-f][0-9A-Fa-f]|u\{0*([0-9A-Fa-f]{1,7}|[0-7][0-9A-Fa-f]{7})\}|[01][0-9][0-9]|2[0-4][0-9]|25[0-5])|(\\[0-9][0-9]?)+([^'\\\r\n0-9]|\\([abfnrtv\\"'\n]|\r\n?|z[ \t\r\n\f\v]*|x[0-9A-Fa-f][0-9A-Fa-f]|u\{0*([0-9A-Fa-f]{1,7}|[0-7][0-9A-Fa-f]{7})\}|[01][0-9][0-9]|2[0-4][0-9]|25[0-5])))*(\\[0-9][0-9]?)*'/
LONG_STRING = /\[\[(?until:]])/ | /\[=\[(?until:]=])/ | /\[==\[(?until:]==])/ | /\[===\[(?until:]===])/ | /\[====\[(?until:]====])/

reply ::= FENCE_OPEN chunk FENCE_CLOSE
chunk ::= stat* "return" "function" funcbody ";"?
block ::= stat* retstat?
retstat ::= "return" explist? ";"?
stat ::= ";"
       | varlist "=" explist
       | call
       | "::" NAME "::"
       | "break"
       | "goto" NAME
       | "do" block "end"
       | "while" exp "do" block "end"
       | "repeat" block "until" exp
       | "if" exp "then" block ("elseif" exp "then" block)* ("else" block)? "end"
       | "for" NAME@decl "=" exp "," exp ("," exp)? "do" block "end"
       | "for" NAME@decl ("," NAME@decl)* "in" explist "do" block "end"
       | "function" funcname funcbody
       | "local" "function" NAME@decl funcbody
       | "local" NAME@decl attrib? ("," NAME@decl attrib?)* ("=" explist)?
# Lua knows the attributes const and close; which name is written is left to luac.
attrib ::= "<" NAME ">"
funcname ::= NAME@decl | NAME@ref ("." NAME)+ (":" NAME)? | NAME@ref ":" NAME
# An assignment to a bare name declares it (a global the chunk owns).
varlist ::= var ("," var)*
var ::= NAME@decl | prefixexp "[" exp "]" | prefixexp "." NAME
prefixexp ::= NAME@ref | prefixexp "[" exp "]" | prefixexp "." NAME | call | "(" exp ")"
call ::= prefixexp args | prefixexp ":" NAME args
args ::= "(" explist? ")" | table | STRING | LONG_STRING
funcbody ::= "(" params? ")" block "end"
params ::= NAME@decl ("," NAME@decl)* ("," "...")? | "..."
explist ::= exp ("," exp)*
table ::= "{" (field (fieldsep field)* fieldsep?)? "}"
field ::= "[" exp "]" "=" exp | NAME "=" exp | exp
fieldsep ::= "," | ";"

# Operators from the lowest precedence to the highest; .. and ^ are right associative.
exp ::= exp "or" e_and | e_and
e_and ::= e_and "and" e_cmp | e_cmp
e_cmp ::= e_cmp ("<" | ">" | "<=" | ">=" | "~=" | "==") e_bor | e_bor
e_bor ::= e_bor "|" e_bxor | e_bxor
e_bxor ::= e_bxor "~" e_band | e_band
e_band ::= e_band "&" e_shift | e_shift
e_shift ::= e_shift ("<<" | ">>") e_cat | e_cat
e_cat ::= e_add ".." e_cat | e_add
e_add ::= e_add ("+" | "-") e_mul | e_mul
e_mul ::= e_mul ("*" | "/" | "//" | "%") e_unary | e_unary
e_unary ::= ("not" | "#" | "-" | "~") e_unary | e_pow
e_pow ::= simple "^" e_unary | simple
simple ::= "nil" | "false" | "true" | NUMBER | STRING | LONG_STRING | "..."
         | "function" funcbody | prefixexp | table
)GRAMMAR";

}  // namespace rote::inference::grammar

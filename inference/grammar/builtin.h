// Texts of the grammars rote ships (grammar.h: BuiltinGrammar).
#pragma once

#include <string>

namespace rote::inference::grammar {

extern const char kLuaReplyGrammar[];
extern const char kJsonGrammar[];
// Built once: the RE2 grammar enumerates valid class ranges and repeat counts.
const std::string& Re2ReplyGrammar();

}  // namespace rote::inference::grammar

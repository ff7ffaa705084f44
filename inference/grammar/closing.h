// Closing a constrained reply before its token budget runs out. A grammar mask keeps every
// token on a path to a valid reply, but not every path ends soon: a model can keep a block,
// a string or an expression open until max_tokens, and the truncated reply is as useless as an
// invalid one. Near the end of its budget the engine plans a closing (bytes that complete the
// text to a sentence) and from then on allows only the tokens that follow the plan, so every
// constrained reply that gets the room to close does close.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "inference/grammar/grammar.h"

namespace rote::inference::grammar {

// The pieces a closing is assembled from for a shipped grammar ("lua_reply", "re2_reply",
// "json"), most closing first; empty for any other grammar (its replies are not closed early).
const std::vector<std::string>& ClosingPieces(std::string_view builtin_name);

// Bytes that, accepted after the matcher's text, make it a whole sentence, at most max_bytes of
// them; nullopt when none was found. A deterministic search (a function of the matcher's text,
// the pieces and max_bytes): walks that append, at each step, the first piece the grammar takes
// or a piece chosen by a fixed pseudo-random sequence; the first walk that closes wins.
std::optional<std::string> PlanClosing(const Matcher& matcher, const std::vector<std::string>& pieces,
                                       size_t max_bytes);

}  // namespace rote::inference::grammar

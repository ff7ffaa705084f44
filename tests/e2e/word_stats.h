// A small blueprint with one pattern and one function, used across the end-to-end tests.
#pragma once

namespace rote::e2e {

inline constexpr char kWordStats[] = R"lua(local bp = rote.blueprint { name = "word_stats", version = "1.0.0" }

local words = bp:regex {
  name = "words",
  task = "Words: runs of ASCII letters.",
  examples = { { "hi there", { "hi", "there" } }, { "42", {} } },
}

local shout = bp:lua {
  name = "shout",
  task = "Upper-case a word.",
  signature = "function(word) -> string",
  tests = { { "hi", "HI" } },
}

function bp.run(input)
  local all = words:find_all(input.text)
  rote.log("found", #all, "words")
  return { count = #all, loud = shout:map(all), first = shout(all[1] or "") }
end

return bp
)lua";

inline constexpr char kWordStatsLock[] = R"(format = 1
blueprint = "word_stats"

[[point]]
name = "words"
kind = "re2_pattern"
source = '[A-Za-z]+'

[[point]]
name = "shout"
kind = "lua_function"
source = '''
return function(word) return string.upper(word) end
'''
)";

}  // namespace rote::e2e

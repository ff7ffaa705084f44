// A blueprint whose runs take a while and journal a step per round, for tests that stop servers
// with runs in flight (drain, replicas). Input: {"rounds": N, "spin": M, "word": "w"}.
#pragma once

namespace rote::e2e {

// Busy work between artifact calls, so a run takes a while and journals a step per round.
inline constexpr char kSlowWords[] = R"lua(local bp = rote.blueprint { name = "slow_words", version = "1" }

local shout = bp:lua {
  name = "shout",
  task = "Upper-case a word.",
  signature = "function(word) -> string",
  tests = { { "hi", "HI" } },
}

function bp.run(input)
  local out = {}
  for i = 1, input.rounds do
    local x = 0
    for j = 1, input.spin do x = (x + j * i) % 7919 end
    out[#out + 1] = shout(input.word .. x)
  end
  return { words = out }
end

return bp
)lua";

inline constexpr char kSlowWordsLock[] = R"(format = 1
blueprint = "slow_words"

[[point]]
name = "shout"
kind = "lua_function"
source = '''
return function(word) return string.upper(word) end
'''
)";

}  // namespace rote::e2e

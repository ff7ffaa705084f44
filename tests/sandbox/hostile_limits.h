// The limits the hostile suites run under: tight, so the suites are fast, and the same
// deterministic limits as in production.
#pragma once

#include "sandbox/lua_runtime.h"

namespace rote::sandbox {

inline Limits HostileLimits() {
  Limits l;
  l.max_instructions = 5'000'000;
  l.max_memory_bytes = 32ull << 20;
  l.max_output_bytes = 64 << 10;
  return l;
}

}  // namespace rote::sandbox

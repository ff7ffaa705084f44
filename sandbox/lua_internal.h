// Internals shared by the files of the Lua runtime; not part of the module's interface.
//
// The runtime's files, by concern:
//   lua_runtime.h       the interface: LuaState, Limits, Usage, RunFunctionArtifact
//   lua_runtime.cc      LuaState: creation, limits and charging, environments, Load, Call
//   lua_allocator.*     the heap arena and the allocation function (memory limit, hash seed)
//   lua_profile.*       what scripts see: the allow-listed libraries, the per-call
//                       environment, read-only tables, the deterministic tostring
//   lua_iteration.cc    pairs and next in sorted key order, charged by table size
//   lua_library.cc      string, table, utf8 and coroutine functions that charge for their loops
//   lua_patterns.cc     string patterns with a step counter
//   lua_value_codec.*   Lua values to and from Value and the binary value encoding
//   lua_artifact.cc     RunFunctionArtifact: one function artifact over a batch of inputs
//
// Dependencies go one way: the profile and the codec are C code running under the limits like
// any host function, so they use LuaState's public charging calls; the runtime uses them to
// build states and move values. None of these files includes worker_protocol.h, which sits
// above the runtime.
#pragma once

#include <cstdint>
#include <lua.hpp>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "sandbox/lua_allocator.h"
#include "sandbox/lua_runtime.h"

namespace rote::sandbox {

// Grants the runtime's free functions (the allocator, the count hook) access to LuaState's
// counters.
struct LuaStateAccess {
  static uint64_t& instructions(LuaState* s) { return s->instructions_; }
  static const Limits& limits(LuaState* s) { return s->limits_; }
  static absl::Status& limit_status(LuaState* s) { return s->limit_status_; }
  static bool& deadline_hit(LuaState* s) { return s->deadline_hit_; }
  static void RaiseLimit(LuaState* s, lua_State* L) { s->RaiseLimit(L); }
  static uint64_t& heap(LuaState* s) { return s->heap_bytes_; }
  static internal::LuaArena& arena(LuaState* s) { return *s->arena_; }
  static void*& lg_block(LuaState* s) { return s->lg_block_; }
  static size_t& lg_size(LuaState* s) { return s->lg_size_; }
  static bool& seed_checked(LuaState* s) { return s->seed_checked_; }
  static bool& seed_pinned(LuaState* s) { return s->seed_pinned_; }
  static uint64_t& peak(LuaState* s) { return s->peak_heap_bytes_; }
  static bool& enforce_memory(LuaState* s) { return s->enforce_memory_; }
  static bool metering(LuaState* s) { return s->metering_; }
  static bool ChargeAllocation(LuaState* s, uint64_t bytes) { return s->ChargeAllocation(bytes); }
  static void CheckDeadline(LuaState* s, lua_State* L) { s->CheckDeadline(L); }
  static lua_State* main(LuaState* s) { return s->L_; }
};

namespace internal {

// Work units charged per byte copied or read: one per this many (LuaState::Charge).
inline constexpr unsigned kBytesPerCharge = 16;

// Whether the call is over: a limit or the deadline was hit, or the host asked it to stop.
bool StopRequested(LuaState* s);

}  // namespace internal
}  // namespace rote::sandbox

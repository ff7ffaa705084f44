// In-process deterministic Lua 5.4: the one place where the sandbox profile is defined.
//
// Everything a script can observe depends only on the script and its input: not on addresses,
// hash seeds, time, locale, allocation order or the host. docs/sandbox.md lists every source of
// nondeterminism in stock Lua and how it is closed here; in short:
//   - allow-listed standard library only (no io, os, debug, package/require, load, dofile,
//     collectgarbage, string.dump/pack/unpack, transcendental math);
//   - pairs/next iterate in sorted key order (numbers, then strings bytewise, then false, true);
//   - tostring/print/string.format("%s") name tables and functions by a per-call sequence
//     number ("table: 3"), never an address; "%p" and "%a" are refused;
//   - table.sort is a stable merge sort (the stock quicksort picks pivots from the clock);
//   - math.random is reseeded with a fixed seed before every call;
//   - string comparison and number formatting run under the "C" locale (uselocale);
//   - setmetatable refuses __gc and __mode (finalizer order, weak-table contents);
//   - shared library tables and the string metatable are read-only; each call gets a fresh
//     global environment.
//
// Limits (instructions, Lua heap bytes, print output bytes) are deterministic: hitting one
// raises an error naming the limit, and the call fails with RESOURCE_EXHAUSTED whatever the
// script does afterwards (pcall, xpcall, coroutines, tail calls, __close): after the first hit
// every further instruction and library call raises it again, nothing in the Lua heap grows,
// and Call reports the limit even when the script's function returned. Work inside C functions
// is charged to the instruction budget: every library function whose loop count the script
// controls charges at least one unit per iteration before it runs, one unit per 16 bytes it
// reads, and every byte the call allocates is charged too (one unit per 16), so no C call can
// outrun the budget. The wall-clock deadline is only a safety net: hitting it gives
// DEADLINE_EXCEEDED, which callers must treat as an infrastructure failure; it is checked by the
// count hook and by every charge, so it also stops a call that is inside a long C loop.
//
// Stopping a call from another thread: install a count hook on the main thread with
// lua_sethook(raw(), hook, LUA_MASKCOUNT, 1) (the one Lua function that may be called
// asynchronously; lua.c does it on SIGINT) whose function raises an error. The runtime honours
// such a host hook where a plain hook would miss it: its own hook runs it in coroutines (which
// keep their own hooks), every charge and Poll inside C functions runs it, and xpcall message
// handlers and coroutine.close run no Lua code once it is installed.
//
// Status codes: INVALID_ARGUMENT for compile errors and values that cannot be converted,
// FAILED_PRECONDITION for runtime errors raised by the script ("name.lua:12: message"),
// RESOURCE_EXHAUSTED for limits, DEADLINE_EXCEEDED for the wall clock.
//
// Hosts (the orchestrator's blueprint runner) extend the environment before loading a chunk:
//
//   auto st = LuaState::Create(limits);                  // fresh state, profile installed
//   lua_State* L = (*st)->raw();
//   lua_newtable(L); ...push C functions...;             // e.g. the `rote` table
//   (*st)->SetGlobal("rote", /*read_only=*/true);        // visible in every environment
//   (*st)->NewEnvironment();                             // fresh globals for this run
//   RETURN_IF_ERROR((*st)->Load(source, "blueprint.lua"));   // pushes the chunk
//   RETURN_IF_ERROR((*st)->Call(0, 1));                  // runs it under the limits
//   lua_getfield(L, -1, "run");  (*st)->Push(input);  (*st)->Call(1, 1);
//   auto out = ToValue(L, -1);
//
// To run a prepared blueprint on many inputs, call TakeSnapshot() after loading it and
// RestoreSnapshot() before each input: every run then starts from the identical heap.
// Always enter Lua through Call/Push (not raw lua_pcall): they set the C locale and map limit
// errors to statuses.
//
// C functions installed by the host run under the same limits; they should call
// LuaState::Charge(L, n) for work proportional to their input (at least one unit per loop
// iteration), call LuaState::Poll(L) every few thousand iterations of a long loop, and must
// raise errors with luaL_error (never longjmp across C++ frames holding resources).
//
// Dependencies go one way: value.h <- value_encoding.h <- lua_value_codec.h <- lua_runtime.h
// <- worker_protocol.h <- worker_pool.h. lua_internal.h lists the files that implement this
// header.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sandbox/lua_value_codec.h"
#include "sandbox/value.h"

struct lua_State;

namespace rote::sandbox {

namespace internal {
struct LuaArena;
}  // namespace internal

struct Limits {
  uint64_t max_instructions = 100'000'000;  // VM instructions plus charged C work
  uint64_t max_memory_bytes = 64ull << 20;  // Lua heap of the state, garbage not yet collected included
  uint64_t max_output_bytes = 1ull << 20;   // bytes written by print
};

// Counters of one call, reset by LuaState::ResetBudget.
struct Usage {
  uint64_t instructions = 0;  // granularity: kInstructionQuantum, plus exact C charges
  uint64_t peak_memory_bytes = 0;
  uint64_t output_bytes = 0;
};

// The count hook fires every this many VM instructions; limits are checked at that granularity.
inline constexpr int kInstructionQuantum = 1000;

// Name and version of the profile, recorded with every run so replays can check they execute
// under the same rules. The version changes with anything a script can observe: results,
// charges, limits.
inline constexpr std::string_view kProfileName = "rote-lua5.4-deterministic/2";

class LuaState {
 public:
  using Clock = std::chrono::steady_clock;

  static absl::StatusOr<std::unique_ptr<LuaState>> Create(const Limits& limits);
  ~LuaState();
  LuaState(const LuaState&) = delete;
  LuaState& operator=(const LuaState&) = delete;

  lua_State* raw() const { return L_; }
  // Whether the string hash seed was pinned to a constant (see lua_allocator.cc); with it the
  // internal hash layout of tables is the same in every process.
  bool seed_pinned() const { return seed_pinned_; }
  static LuaState* From(lua_State* L);

  // Pops the value on top of the stack and makes it a global of every environment created
  // afterwards. read_only wraps a table in a read-only proxy (pairs still sees its contents).
  void SetGlobal(const char* name, bool read_only);

  // Starts a new call: a fresh global table whose misses fall through to the shared library,
  // a reseeded math.random, fresh tostring sequence numbers, an empty output buffer and zeroed
  // counters, then a full collection so the heap starts from the same baseline each time.
  // Hosts that run many calls from one prepared point should prefer Take/RestoreSnapshot.
  absl::Status NewEnvironment();

  // Compiles source text (binary chunks are refused) with chunk name "=<chunkname>" so errors
  // read "<chunkname>:LINE: message", binds it to the current environment and pushes it.
  absl::Status Load(std::string_view source, std::string_view chunkname);

  // Sets upvalue 1 (_ENV of a main chunk) of the function at idx to the current environment,
  // so one compiled chunk can be run again in a fresh environment.
  void BindToEnvironment(int idx);

  // lua_pcall under the limits, with the results left on the stack as lua_call would.
  absl::Status Call(int nargs, int nresults);

  // Pushes a Value (in protected mode, so hitting the memory limit is an error, not a panic).
  absl::Status Push(const Value& v);
  // Pushes a value in the binary value encoding (sandbox/value_encoding.h).
  absl::Status PushEncoded(std::string_view bytes);

  void ResetBudget();
  const Limits& limits() const { return limits_; }
  // A wall-clock safety net for the next calls; nullopt disables it.
  void set_deadline(std::optional<Clock::time_point> deadline) { deadline_ = deadline; }
  Usage usage() const;
  // Records the entire Lua heap (which lives in one private arena) and the counters, so that
  // RestoreSnapshot returns the state to exactly this point: same objects at the same
  // addresses, same garbage-collector debt, same string table. Cheap (one memcpy of the used
  // part of the arena, typically 20-40 KB); this is how every input of a batch starts from the
  // identical heap without paying for a new state or a full collection.
  void TakeSnapshot();
  // Requires a prior TakeSnapshot. Clears output and counters like ResetBudget.
  void RestoreSnapshot();

  const std::string& output() const { return output_; }
  std::string TakeOutput() { return std::move(output_); }

  // Charges n units of C-side work to the instruction budget; raises a Lua error (does not
  // return) when the budget is spent, when a limit was already hit, when the deadline has
  // passed (the clock is read once per kInstructionQuantum units) or when the host asked the
  // state to stop. For C functions that the host installs.
  static void Charge(lua_State* L, uint64_t n);
  // Raises (does not return) when the call must stop: a limit was hit, the deadline passed
  // (reads the clock), or the host installed a stop hook. For C loops that charged for all
  // their iterations up front: call it every few thousand iterations.
  static void Poll(lua_State* L);
  // Appends to the print buffer under the output limit; raises a Lua error when exceeded.
  static void AppendOutput(lua_State* L, std::string_view bytes);
  // The deterministic tostring (pushes the result). Used by print and string.format("%s").
  static void PushToString(lua_State* L, int idx);

 private:
  LuaState();
  struct Snapshot;
  friend struct LuaStateAccess;
  [[noreturn]] void RaiseLimit(lua_State* L);
  // Raises when a limit or the deadline was hit; runs the host's stop hook if one is installed.
  void StopIfAsked(lua_State* L);
  void CheckDeadline(lua_State* L);
  // Charges heap growth during a call; false (and the limit is hit) when the budget is spent.
  bool ChargeAllocation(uint64_t bytes);
  // The limit or deadline status once one was hit, else OK.
  absl::Status StoppedStatus() const;

  lua_State* L_ = nullptr;
  Limits limits_;
  std::optional<Clock::time_point> deadline_;
  uint64_t heap_bytes_ = 0;
  uint64_t peak_heap_bytes_ = 0;
  uint64_t instructions_ = 0;
  bool enforce_memory_ = false;  // off while the profile itself is being built
  bool metering_ = false;        // inside Call: heap growth is charged to the instruction budget
  uint64_t alloc_carry_ = 0;     // bytes allocated and not yet charged (< kBytesPerCharge)
  uint64_t unpolled_ = 0;        // units charged since the clock was last read
  bool deadline_hit_ = false;
  absl::Status limit_status_;  // sticky once a deterministic limit is hit
  std::string output_;
  int env_ref_ = -1;           // registry ref of the current global table
  void* lg_block_ = nullptr;   // lua_newstate's first block (main thread + global state)
  size_t lg_size_ = 0;
  bool seed_checked_ = false;
  bool seed_pinned_ = false;
  std::unique_ptr<internal::LuaArena> arena_;
  std::unique_ptr<Snapshot> snapshot_;
};

// Values cross into and out of Lua through lua_value_codec.h, included above: ToValue,
// EncodeLuaValue, PushValueUnprotected.

// One input's outcome when a function artifact is applied to a batch.
struct CallResult {
  absl::Status status;  // OK, FAILED_PRECONDITION (script error), RESOURCE_EXHAUSTED (limit), ...
  Value value;          // the function's first result when status is OK
  std::string output;   // what the function printed
  Usage usage;
};

// Runs a function artifact: a chunk that returns a function. For every input the chunk is
// executed again in a fresh environment (so upvalues and globals never carry over from one
// input to the next) and the function it returns is called with the input. Every input starts
// from a restored snapshot of the heap taken right after the chunk was compiled, byte for byte
// the state a fresh process would have, so results, instruction counts and memory peaks never
// depend on the batch around an input.
// A compile error is returned for the whole batch; everything else is per input. This is
// exactly what worker processes execute.
absl::StatusOr<std::vector<CallResult>> RunFunctionArtifact(
    std::string_view source, std::string_view chunkname, const std::vector<Value>& inputs,
    const Limits& limits, std::optional<LuaState::Clock::time_point> deadline = std::nullopt);

// RunFunctionArtifact for the worker: inputs and results stay in the binary encoding, so no
// Value is built in between. The sink gets each input's outcome in order (the encoded value is
// empty when status is not OK). A compile error is returned for the whole batch.
using EncodedResultSink = std::function<void(size_t index, const absl::Status& status, std::string_view value,
                                             std::string_view output, const Usage& usage)>;
// Keeps the last compiled artifact and its heap snapshot, so a worker that gets the same
// (source, chunkname, limits) again skips creating and compiling: every input still starts
// from the snapshot, the same bytes a fresh state would have.
class ArtifactCache {
 public:
  ArtifactCache();
  ~ArtifactCache();
  struct Entry;
  std::unique_ptr<Entry> entry;
};

absl::Status RunFunctionArtifactEncoded(std::string_view source, std::string_view chunkname,
                                        const std::vector<std::string_view>& inputs, const Limits& limits,
                                        const EncodedResultSink& sink, ArtifactCache* cache = nullptr);

}  // namespace rote::sandbox

// LuaState: creating a state with the profile installed, the limits and their charging, the
// count hook, per-call environments, compiling and calling. lua_internal.h maps the runtime's
// other files.
#include "sandbox/lua_runtime.h"

#include <locale.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <lua.hpp>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sandbox/lua_allocator.h"
#include "sandbox/lua_internal.h"
#include "sandbox/lua_profile.h"
#include "sandbox/lua_value_codec.h"

namespace rote::sandbox {

struct LuaState::Snapshot {
  std::vector<char> image;
  internal::LuaArena::Meta meta;
  uint64_t heap_bytes;
  int env_ref;
};

namespace {

using A = LuaStateAccess;

locale_t CLocale() {
  static locale_t loc = newlocale(LC_ALL_MASK, "C", static_cast<locale_t>(nullptr));
  return loc;
}

// Switches the calling thread to the C locale for string comparison (strcoll) and number
// formatting/parsing, restoring the host's locale on exit.
class ScopedCLocale {
 public:
  ScopedCLocale() : previous_(uselocale(CLocale())) {}
  ~ScopedCLocale() { uselocale(previous_); }

 private:
  locale_t previous_;
};

absl::Status InstructionLimitError(uint64_t max_instructions) {
  return absl::ResourceExhaustedError(
      absl::StrCat("instruction limit exceeded (max_instructions=", max_instructions, ")"));
}

void Hook(lua_State* L, lua_Debug* ar);

// The host's stop hook: a count hook other than ours on the main thread (lua_runtime.h,
// "Stopping a call from another thread"), or null.
lua_Hook HostStopHook(lua_State* main) {
  lua_Hook h = lua_gethook(main);
  return h == Hook ? nullptr : h;
}

// The VM runs a hook only on the thread it is installed on, and only between instructions:
// this runs the host's stop hook for coroutines and inside C loops. `ar` is null in C code.
void RunHostStopHook(lua_State* main, lua_State* L, lua_Debug* ar) {
  lua_Hook h = HostStopHook(main);
  if (h == nullptr) return;
  lua_Debug here{};
  if (ar == nullptr) {
    lua_getstack(L, 0, &here);
    here.event = LUA_HOOKCOUNT;
    ar = &here;
  }
  h(L, ar);
}

void Hook(lua_State* L, lua_Debug* ar) {
  LuaState* s = LuaState::From(L);
  if (!A::limit_status(s).ok() || A::deadline_hit(s)) A::RaiseLimit(s, L);
  if (L != A::main(s)) RunHostStopHook(A::main(s), L, ar);
  uint64_t& used = A::instructions(s);
  used += kInstructionQuantum;
  if (used > A::limits(s).max_instructions) {
    A::limit_status(s) = InstructionLimitError(A::limits(s).max_instructions);
    A::RaiseLimit(s, L);
  }
  A::CheckDeadline(s, L);
}

std::string ErrorText(lua_State* L) {
  int t = lua_type(L, -1);
  if (t == LUA_TSTRING || t == LUA_TNUMBER) {
    size_t len;
    const char* s = lua_tolstring(L, -1, &len);
    return std::string(s, len);
  }
  return absl::StrCat("(error object is a ", luaL_typename(L, -1), " value)");
}

}  // namespace

bool internal::StopRequested(LuaState* s) {
  return !A::limit_status(s).ok() || A::deadline_hit(s) || HostStopHook(A::main(s)) != nullptr;
}

LuaState* LuaState::From(lua_State* L) {
  return *static_cast<LuaState**>(lua_getextraspace(L));
}

LuaState::LuaState() = default;

absl::StatusOr<std::unique_ptr<LuaState>> LuaState::Create(const Limits& limits) {
  std::unique_ptr<LuaState> s(new LuaState());
  s->limits_ = limits;
  // Room for the limit plus size-class rounding; virtual only (MAP_NORESERVE) until touched.
  uint64_t cap = std::min<uint64_t>(limits.max_memory_bytes, 4ull << 30) * 2 + (4u << 20);
  s->arena_ = std::make_unique<internal::LuaArena>();
  if (!s->arena_->Init(cap)) return absl::ResourceExhaustedError("cannot map the Lua heap arena");
  s->L_ = lua_newstate(internal::Allocate, s.get());
  if (s->L_ == nullptr) return absl::ResourceExhaustedError("cannot create a Lua state");
  *static_cast<LuaState**>(lua_getextraspace(s->L_)) = s.get();
  lua_State* L = s->L_;
  ScopedCLocale locale;
  lua_pushcfunction(L, [](lua_State* L2) -> int {
    internal::InstallProfile(L2);
    return 0;
  });
  if (lua_pcall(L, 0, 0, 0) != LUA_OK) {
    return absl::InternalError(absl::StrCat("building the Lua profile: ", ErrorText(L)));
  }
  s->enforce_memory_ = true;
  s->ResetBudget();
  return s;
}

LuaState::~LuaState() {
  if (L_ != nullptr) {
    enforce_memory_ = false;
    lua_close(L_);
  }
}

void LuaState::RaiseLimit(lua_State* L) {
  // After the first hit every instruction raises again, so no Lua code can make progress. A
  // host's stop hook on the main thread stays (it raises at every instruction too).
  for (lua_State* T : {L, L_}) {
    lua_Hook keep = T == L_ && HostStopHook(L_) != nullptr ? lua_gethook(L_) : Hook;
    lua_sethook(T, keep, LUA_MASKCOUNT, 1);
  }
  if (deadline_hit_) {
    lua_pushliteral(L, "wall-clock deadline exceeded");
  } else {
    const std::string& m = std::string(limit_status_.message());
    lua_pushlstring(L, m.data(), m.size());
  }
  lua_error(L);
  abort();  // unreachable
}

void LuaState::Charge(lua_State* L, uint64_t n) {
  LuaState* s = From(L);
  s->StopIfAsked(L);
  if (n > s->limits_.max_instructions - std::min(s->instructions_, s->limits_.max_instructions)) {
    // Usage reports the budget as spent, not the (possibly absurd) size of the refused charge.
    s->instructions_ = s->limits_.max_instructions + 1;
    s->limit_status_ = InstructionLimitError(s->limits_.max_instructions);
    s->RaiseLimit(L);
  }
  s->instructions_ += n;
  s->unpolled_ += n;
  if (s->unpolled_ >= kInstructionQuantum) {
    s->unpolled_ = 0;
    s->CheckDeadline(L);
  }
}

void LuaState::Poll(lua_State* L) {
  LuaState* s = From(L);
  s->StopIfAsked(L);
  s->CheckDeadline(L);
}

void LuaState::StopIfAsked(lua_State* L) {
  if (!limit_status_.ok() || deadline_hit_) RaiseLimit(L);
  RunHostStopHook(L_, L, nullptr);
}

void LuaState::CheckDeadline(lua_State* L) {
  if (deadline_ && Clock::now() > *deadline_) {
    deadline_hit_ = true;
    RaiseLimit(L);
  }
}

bool LuaState::ChargeAllocation(uint64_t bytes) {
  if (!limit_status_.ok() || deadline_hit_) return false;
  alloc_carry_ += bytes;
  uint64_t units = alloc_carry_ / internal::kBytesPerCharge;
  alloc_carry_ %= internal::kBytesPerCharge;
  if (units > limits_.max_instructions - std::min(instructions_, limits_.max_instructions)) {
    instructions_ = limits_.max_instructions + 1;
    limit_status_ = InstructionLimitError(limits_.max_instructions);
    // The allocation fails ("not enough memory"); the hook raises the limit at the next
    // instruction and every charge raises it before.
    lua_sethook(L_, lua_gethook(L_), LUA_MASKCOUNT, 1);
    return false;
  }
  instructions_ += units;
  unpolled_ += units;
  return true;
}

absl::Status LuaState::StoppedStatus() const {
  if (deadline_hit_) return absl::DeadlineExceededError("infrastructure timeout: wall-clock deadline exceeded");
  return limit_status_;
}

void LuaState::AppendOutput(lua_State* L, std::string_view bytes) {
  LuaState* s = From(L);
  if (s->output_.size() + bytes.size() > s->limits_.max_output_bytes) {
    if (s->limit_status_.ok()) {
      s->limit_status_ = absl::ResourceExhaustedError(absl::StrCat(
          "output limit exceeded (max_output_bytes=", s->limits_.max_output_bytes, ")"));
    }
    s->RaiseLimit(L);
  }
  Charge(L, 1 + bytes.size() / internal::kBytesPerCharge);
  s->output_.append(bytes);
}

void LuaState::SetGlobal(const char* name, bool read_only) {
  ScopedCLocale locale;
  lua_pushglobaltable(L_);  // base
  lua_insert(L_, -2);
  if (read_only && lua_type(L_, -1) == LUA_TTABLE) {
    internal::PushReadOnlyProxy(L_, -1);
    lua_remove(L_, -2);
  }
  lua_setfield(L_, -2, name);
  lua_pop(L_, 1);
}

void LuaState::ResetBudget() {
  instructions_ = 0;
  alloc_carry_ = 0;
  unpolled_ = 0;
  limit_status_ = absl::OkStatus();
  deadline_hit_ = false;
  output_.clear();
  peak_heap_bytes_ = heap_bytes_;
  lua_sethook(L_, Hook, LUA_MASKCOUNT, kInstructionQuantum);
}

void LuaState::TakeSnapshot() {
  snapshot_ = std::make_unique<Snapshot>();
  snapshot_->image.assign(arena_->base, arena_->base + arena_->meta.bump);
  snapshot_->meta = arena_->meta;
  snapshot_->heap_bytes = heap_bytes_;
  snapshot_->env_ref = env_ref_;
}

void LuaState::RestoreSnapshot() {
  std::memcpy(arena_->base, snapshot_->image.data(), snapshot_->image.size());
  arena_->meta = snapshot_->meta;
  heap_bytes_ = snapshot_->heap_bytes;
  env_ref_ = snapshot_->env_ref;
  ResetBudget();
}

Usage LuaState::usage() const {
  return Usage{instructions_, peak_heap_bytes_, static_cast<uint64_t>(output_.size())};
}

absl::Status LuaState::NewEnvironment() {
  ScopedCLocale locale;
  lua_settop(L_, 0);
  ResetBudget();  // a limit hit by the previous call must not fire while building this one
  enforce_memory_ = false;
  lua_pushcfunction(L_, internal::NewCallEnvironment);
  int rc = lua_pcall(L_, 0, 1, 0);
  if (rc != LUA_OK) {
    std::string msg = ErrorText(L_);
    lua_settop(L_, 0);
    enforce_memory_ = true;
    return absl::ResourceExhaustedError(absl::StrCat("creating the environment: ", msg));
  }
  if (env_ref_ >= 0) luaL_unref(L_, LUA_REGISTRYINDEX, env_ref_);
  env_ref_ = luaL_ref(L_, LUA_REGISTRYINDEX);
  // The heap (and with it the garbage collector's pacing) starts every call from the same
  // baseline, whatever earlier calls left behind.
  lua_gc(L_, LUA_GCCOLLECT);
  enforce_memory_ = true;
  ResetBudget();
  return absl::OkStatus();
}

absl::Status LuaState::Load(std::string_view source, std::string_view chunkname) {
  ScopedCLocale locale;
  if (!source.empty() && source[0] == LUA_SIGNATURE[0]) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(chunkname), ": binary chunks are not accepted"));
  }
  std::string name = "=" + std::string(chunkname);
  int rc = luaL_loadbufferx(L_, source.data(), source.size(), name.c_str(), "t");
  if (rc != LUA_OK) {
    std::string msg = ErrorText(L_);
    lua_pop(L_, 1);
    if (rc == LUA_ERRMEM || !limit_status_.ok()) {
      return limit_status_.ok() ? absl::ResourceExhaustedError("memory limit exceeded while compiling")
                                : limit_status_;
    }
    return absl::InvalidArgumentError(absl::StrCat("compile error: ", msg));
  }
  if (env_ref_ < 0) {
    lua_pop(L_, 1);
    return absl::FailedPreconditionError("LuaState::Load before NewEnvironment");
  }
  BindToEnvironment(-1);
  return absl::OkStatus();
}

void LuaState::BindToEnvironment(int idx) {
  idx = lua_absindex(L_, idx);
  lua_rawgeti(L_, LUA_REGISTRYINDEX, env_ref_);
  if (lua_setupvalue(L_, idx, 1) == nullptr) lua_pop(L_, 1);
}

absl::Status LuaState::Call(int nargs, int nresults) {
  ScopedCLocale locale;
  int base = lua_gettop(L_) - nargs - 1;
  bool was_metering = metering_;
  metering_ = true;
  int rc = lua_pcall(L_, nargs, nresults, 0);
  metering_ = was_metering;
  if (rc == LUA_OK) {
    // A limit is final whatever the script did after it: `return pcall(f)` (a tail call) or a
    // coroutine can hand pcall's `false` back without running another instruction.
    if (absl::Status stopped = StoppedStatus(); !stopped.ok()) {
      lua_settop(L_, base);
      return stopped;
    }
    return absl::OkStatus();
  }
  std::string msg = ErrorText(L_);
  lua_pop(L_, 1);
  if (absl::Status stopped = StoppedStatus(); !stopped.ok()) return stopped;
  if (rc == LUA_ERRMEM) return absl::ResourceExhaustedError("memory limit exceeded");
  return absl::FailedPreconditionError(msg);
}

namespace {

int PushValueTrampoline(lua_State* L) {
  const auto* v = static_cast<const Value*>(lua_touserdata(L, 1));
  lua_pop(L, 1);
  PushValueUnprotected(L, *v);
  return 1;
}

int PushEncodedTrampoline(lua_State* L) {
  const auto* bytes = static_cast<const std::string_view*>(lua_touserdata(L, 1));
  lua_pop(L, 1);
  internal::PushEncodedUnprotected(L, *bytes);
  return 1;
}

// Runs a push trampoline on `arg` in protected mode, so hitting the memory limit is a status.
absl::Status PushProtected(LuaState* s, lua_CFunction trampoline, const void* arg) {
  ScopedCLocale locale;
  lua_State* L = s->raw();
  lua_pushcfunction(L, trampoline);
  lua_pushlightuserdata(L, const_cast<void*>(arg));
  int rc = lua_pcall(L, 1, 1, 0);
  if (rc == LUA_OK) return absl::OkStatus();
  std::string msg = ErrorText(L);
  lua_pop(L, 1);
  if (!A::limit_status(s).ok()) return A::limit_status(s);
  return absl::ResourceExhaustedError(absl::StrCat("pushing a value: ", msg));
}

}  // namespace

absl::Status LuaState::Push(const Value& v) { return PushProtected(this, PushValueTrampoline, &v); }

absl::Status LuaState::PushEncoded(std::string_view bytes) {
  return PushProtected(this, PushEncodedTrampoline, &bytes);
}

}  // namespace rote::sandbox

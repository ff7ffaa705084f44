// RunFunctionArtifact: a function artifact applied to a batch of inputs, every input from the
// same heap snapshot (lua_runtime.h).
#include <functional>
#include <lua.hpp>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "sandbox/lua_runtime.h"

namespace rote::sandbox {

struct ArtifactCache::Entry {
  std::string key;
  std::unique_ptr<LuaState> state;
  int chunk_ref = LUA_NOREF;
};
ArtifactCache::ArtifactCache() = default;
ArtifactCache::~ArtifactCache() = default;

namespace {

// The loop both entry points share: a state with the chunk compiled, a snapshot, and per
// input: restore, run the chunk, check it returned a function, push the input, call, convert.
absl::Status RunArtifactLoop(
    std::string_view source, std::string_view chunkname, size_t count, const Limits& limits,
    std::optional<LuaState::Clock::time_point> deadline, ArtifactCache* cache,
    const std::function<absl::Status(LuaState&, size_t)>& push_input,
    const std::function<void(size_t, absl::Status, lua_State*, std::string, const Usage&)>& finish) {
  std::string key = absl::StrCat(limits.max_instructions, ":", limits.max_memory_bytes, ":", limits.max_output_bytes,
                                 ":", chunkname.size(), ":", std::string(chunkname), ":", std::string(source));
  std::unique_ptr<ArtifactCache::Entry> local;
  ArtifactCache::Entry* entry = nullptr;
  if (cache != nullptr && cache->entry != nullptr && cache->entry->key == key) {
    entry = cache->entry.get();
  } else {
    auto st = LuaState::Create(limits);
    if (!st.ok()) return st.status();
    local = std::make_unique<ArtifactCache::Entry>();
    local->state = *std::move(st);
    LuaState& state = *local->state;
    if (auto e = state.NewEnvironment(); !e.ok()) return e;
    if (auto e = state.Load(source, chunkname); !e.ok()) return e;
    local->chunk_ref = luaL_ref(state.raw(), LUA_REGISTRYINDEX);
    if (auto e = state.NewEnvironment(); !e.ok()) return e;
    // Every input starts from exactly this heap.
    state.TakeSnapshot();
    local->key = std::move(key);
    if (cache != nullptr) {
      cache->entry = std::move(local);
      entry = cache->entry.get();
    } else {
      entry = local.get();
    }
  }
  LuaState& state = *entry->state;
  lua_State* L = state.raw();
  state.set_deadline(deadline);
  for (size_t i = 0; i < count; ++i) {
    state.RestoreSnapshot();
    lua_rawgeti(L, LUA_REGISTRYINDEX, entry->chunk_ref);
    state.BindToEnvironment(-1);
    absl::Status status = state.Call(0, 1);
    if (status.ok() && lua_type(L, -1) != LUA_TFUNCTION) {
      status = absl::FailedPreconditionError(absl::StrCat(
          std::string(chunkname), ": the chunk must return a function, it returned a ", luaL_typename(L, -1)));
    }
    if (status.ok()) status = push_input(state, i);
    if (status.ok()) status = state.Call(1, 1);
    if (absl::IsDeadlineExceeded(status)) {
      if (cache != nullptr) cache->entry.reset();
      return status;
    }
    finish(i, status, status.ok() ? L : nullptr, state.TakeOutput(), state.usage());
    lua_settop(L, 0);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<CallResult>> RunFunctionArtifact(
    std::string_view source, std::string_view chunkname, const std::vector<Value>& inputs,
    const Limits& limits, std::optional<LuaState::Clock::time_point> deadline) {
  std::vector<CallResult> results(inputs.size());
  absl::Status s = RunArtifactLoop(
      source, chunkname, inputs.size(), limits, deadline, nullptr,
      [&](LuaState& st, size_t i) { return st.Push(inputs[i]); },
      [&](size_t i, absl::Status status, lua_State* L, std::string output, const Usage& usage) {
        CallResult& r = results[i];
        if (status.ok()) {
          auto v = ToValue(L, -1);
          if (v.ok()) r.value = *std::move(v);
          else status = absl::InvalidArgumentError(absl::StrCat("result: ", v.status().message()));
        }
        r.status = std::move(status);
        r.output = std::move(output);
        r.usage = usage;
      });
  if (!s.ok()) return s;
  return results;
}

absl::Status RunFunctionArtifactEncoded(
    std::string_view source, std::string_view chunkname, const std::vector<std::string_view>& inputs,
    const Limits& limits, const EncodedResultSink& sink, ArtifactCache* cache) {
  std::string value;
  return RunArtifactLoop(
      source, chunkname, inputs.size(), limits, std::nullopt, cache,
      [&](LuaState& st, size_t i) { return st.PushEncoded(inputs[i]); },
      [&](size_t i, absl::Status status, lua_State* L, std::string output, const Usage& usage) {
        value.clear();
        if (status.ok()) {
          absl::Status conv = EncodeLuaValue(L, -1, value);
          if (!conv.ok()) status = absl::InvalidArgumentError(absl::StrCat("result: ", conv.message()));
        }
        sink(i, status, value, output, usage);
      });
}

}  // namespace rote::sandbox

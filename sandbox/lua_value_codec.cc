#include "sandbox/lua_value_codec.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <lua.hpp>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sandbox/lua_profile.h"
#include "sandbox/lua_runtime.h"
#include "sandbox/value_encoding.h"

namespace rote::sandbox {

namespace {

// Lua value -> the binary value encoding (value_encoding.h), the single implementation of the
// conversion rules (ToValue decodes its output). It never raises a Lua error and never
// allocates in the Lua heap, so it can run outside protected mode: map entries are encoded in
// traversal order and then reordered by key with plain C++ memory.
class LuaEncoder {
 public:
  LuaEncoder(lua_State* L, std::string& out) : L_(L), out_(out) {}

  absl::Status Encode(int idx, int depth) {
    idx = lua_absindex(L_, idx);
    switch (lua_type(L_, idx)) {
      case LUA_TNIL: out_.push_back(static_cast<char>(protocol::kTagNil)); return absl::OkStatus();
      case LUA_TBOOLEAN:
        out_.push_back(static_cast<char>(lua_toboolean(L_, idx) ? protocol::kTagTrue : protocol::kTagFalse));
        return absl::OkStatus();
      case LUA_TNUMBER:
        if (lua_isinteger(L_, idx)) {
          out_.push_back(static_cast<char>(protocol::kTagInt));
          protocol::PutU64(out_, static_cast<uint64_t>(lua_tointeger(L_, idx)));
        } else {
          double d = lua_tonumber(L_, idx);
          uint64_t u;
          std::memcpy(&u, &d, sizeof u);
          out_.push_back(static_cast<char>(protocol::kTagFloat));
          protocol::PutU64(out_, u);
        }
        return absl::OkStatus();
      case LUA_TSTRING: {
        size_t len;
        const char* str = lua_tolstring(L_, idx, &len);
        out_.push_back(static_cast<char>(protocol::kTagString));
        protocol::PutU64(out_, len);
        out_.append(str, len);
        return absl::OkStatus();
      }
      case LUA_TTABLE: return EncodeTable(idx, depth);
      default:
        return Error(absl::StrCat("is a ", luaL_typename(L_, idx), ", which has no value representation"));
    }
  }

 private:
  struct PathElem {
    bool is_index;
    lua_Integer index;
    std::string_view key;
  };

  absl::Status Error(std::string_view what) const {
    std::string path = "$";
    for (const PathElem& e : path_) {
      if (e.is_index) absl::StrAppend(&path, "[", e.index, "]");
      else absl::StrAppend(&path, ".", std::string(e.key));
    }
    return absl::InvalidArgumentError(absl::StrCat("value at ", path, " ", std::string(what)));
  }

  absl::Status EncodeTable(int idx, int depth) {
    if (depth >= kMaxJsonDepth) return Error(absl::StrCat("is nested deeper than ", kMaxJsonDepth));
    const void* id = lua_topointer(L_, idx);  // identity for cycle detection only
    if (std::find(stack_.begin(), stack_.end(), id) != stack_.end()) return Error("contains a cycle");
    if (!lua_checkstack(L_, 6)) return absl::ResourceExhaustedError("Lua stack exhausted converting a value");
    stack_.push_back(id);
    absl::Status s = EncodeTableBody(idx, depth);
    stack_.pop_back();
    return s;
  }

  absl::Status EncodeTableBody(int idx, int depth) {
    size_t n_int = 0, n_str = 0;
    lua_Integer max_int = 0;
    bool non_positive = false;
    lua_pushnil(L_);
    while (lua_next(L_, idx) != 0) {
      lua_pop(L_, 1);
      int kt = lua_type(L_, -1);
      if (kt == LUA_TSTRING) {
        ++n_str;
      } else if (kt == LUA_TNUMBER && lua_isinteger(L_, -1)) {
        ++n_int;
        lua_Integer k = lua_tointeger(L_, -1);
        if (k < 1) non_positive = true;
        max_int = std::max(max_int, k);
      } else {
        std::string what = kt == LUA_TNUMBER ? "float" : luaL_typename(L_, -1);
        lua_pop(L_, 1);
        return Error(absl::StrCat("has a key of type ", what, "; only string keys or integer keys 1..n convert"));
      }
    }
    if (n_int > 0 && n_str > 0) return Error("mixes integer and string keys");
    if (n_int > 0) {
      if (non_positive || static_cast<size_t>(max_int) != n_int) {
        return Error("has integer keys that are not exactly 1..n (a sequence with holes?)");
      }
      out_.push_back(static_cast<char>(protocol::kTagArray));
      protocol::PutU64(out_, n_int);
      for (size_t i = 1; i <= n_int; ++i) {
        lua_rawgeti(L_, idx, static_cast<lua_Integer>(i));
        path_.push_back({true, static_cast<lua_Integer>(i), {}});
        absl::Status s = Encode(-1, depth + 1);
        path_.pop_back();
        lua_pop(L_, 1);
        if (!s.ok()) return s;
      }
      return absl::OkStatus();
    }
    if (n_str == 0) {
      bool marked = false;
      if (lua_getmetatable(L_, idx)) {
        internal::PushArrayMarker(L_);
        marked = lua_rawequal(L_, -1, -2);
        lua_pop(L_, 2);
      }
      out_.push_back(static_cast<char>(marked ? protocol::kTagArray : protocol::kTagMap));
      protocol::PutU64(out_, 0);
      return absl::OkStatus();
    }
    out_.push_back(static_cast<char>(protocol::kTagMap));
    protocol::PutU64(out_, n_str);
    // Entries in traversal order: [u64 key length][key][value]; then reorder by key bytewise.
    struct Entry {
      std::string_view key;
      size_t begin, end;
    };
    std::vector<Entry> entries;
    entries.reserve(n_str);
    size_t region = out_.size();
    lua_pushnil(L_);
    while (lua_next(L_, idx) != 0) {
      size_t len;
      const char* k = lua_tolstring(L_, -2, &len);  // a string key: no conversion happens
      Entry e{std::string_view(k, len), out_.size(), 0};
      protocol::PutU64(out_, len);
      out_.append(k, len);
      path_.push_back({false, 0, e.key});
      absl::Status s = Encode(-1, depth + 1);
      path_.pop_back();
      lua_pop(L_, 1);
      if (!s.ok()) {
        lua_pop(L_, 1);
        return s;
      }
      e.end = out_.size();
      entries.push_back(e);
    }
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.key < b.key; });
    std::string sorted;
    sorted.reserve(out_.size() - region);
    for (const Entry& e : entries) sorted.append(out_, e.begin, e.end - e.begin);
    out_.replace(region, std::string::npos, sorted);
    return absl::OkStatus();
  }

  lua_State* L_;
  std::string& out_;
  std::vector<const void*> stack_;
  std::vector<PathElem> path_;
};

// Pushes a value from the binary encoding; raises a Lua error on malformed bytes (run it
// protected). Mirrors PushValueUnprotected.
struct EncodedCursor {
  const char* p;
  const char* end;
};

uint64_t ReadU64(lua_State* L, EncodedCursor& c) {
  if (c.end - c.p < 8) luaL_error(L, "malformed encoded value");
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(c.p[i])) << (8 * i);
  c.p += 8;
  return v;
}

void PushEncoded(lua_State* L, EncodedCursor& c, int depth) {
  if (depth > kMaxJsonDepth || c.p >= c.end) luaL_error(L, "malformed encoded value");
  luaL_checkstack(L, 4, "value nesting");
  uint8_t tag = static_cast<uint8_t>(*c.p++);
  switch (tag) {
    case protocol::kTagNil: lua_pushnil(L); return;
    case protocol::kTagFalse: lua_pushboolean(L, 0); return;
    case protocol::kTagTrue: lua_pushboolean(L, 1); return;
    case protocol::kTagInt: lua_pushinteger(L, static_cast<lua_Integer>(ReadU64(L, c))); return;
    case protocol::kTagFloat: {
      uint64_t u = ReadU64(L, c);
      double d;
      std::memcpy(&d, &u, sizeof d);
      lua_pushnumber(L, d);
      return;
    }
    case protocol::kTagString: {
      uint64_t n = ReadU64(L, c);
      if (n > static_cast<uint64_t>(c.end - c.p)) luaL_error(L, "malformed encoded value");
      lua_pushlstring(L, c.p, n);
      c.p += n;
      return;
    }
    case protocol::kTagArray: {
      uint64_t n = ReadU64(L, c);
      if (n > static_cast<uint64_t>(c.end - c.p)) luaL_error(L, "malformed encoded value");
      LuaState::Charge(L, 1 + n);
      lua_createtable(L, static_cast<int>(n), 0);
      if (n == 0) {
        internal::PushArrayMarker(L);
        lua_setmetatable(L, -2);
      }
      for (uint64_t i = 1; i <= n; ++i) {
        PushEncoded(L, c, depth + 1);
        if (lua_isnil(L, -1)) lua_pop(L, 1);
        else lua_rawseti(L, -2, static_cast<lua_Integer>(i));
      }
      return;
    }
    case protocol::kTagMap: {
      uint64_t n = ReadU64(L, c);
      if (n > static_cast<uint64_t>(c.end - c.p)) luaL_error(L, "malformed encoded value");
      LuaState::Charge(L, 1 + n);
      lua_createtable(L, 0, static_cast<int>(n));
      for (uint64_t i = 0; i < n; ++i) {
        uint64_t len = ReadU64(L, c);
        if (len > static_cast<uint64_t>(c.end - c.p)) luaL_error(L, "malformed encoded value");
        lua_pushlstring(L, c.p, len);
        c.p += len;
        PushEncoded(L, c, depth + 1);
        if (lua_isnil(L, -1)) lua_pop(L, 2);
        else lua_rawset(L, -3);
      }
      return;
    }
    default: luaL_error(L, "malformed encoded value");
  }
}

}  // namespace

absl::Status EncodeLuaValue(lua_State* L, int idx, std::string& out) {
  size_t start = out.size();
  absl::Status s = LuaEncoder(L, out).Encode(idx, 0);
  if (!s.ok()) out.resize(start);
  return s;
}

absl::StatusOr<Value> ToValue(lua_State* L, int idx) {
  std::string bytes;
  if (auto s = EncodeLuaValue(L, idx, bytes); !s.ok()) return s;
  return protocol::DecodeValue(bytes);
}

void PushValueUnprotected(lua_State* L, const Value& v) {
  luaL_checkstack(L, 4, "value nesting");
  switch (v.kind()) {
    case Value::Kind::kNil: lua_pushnil(L); return;
    case Value::Kind::kBool: lua_pushboolean(L, v.as_bool()); return;
    case Value::Kind::kInt: lua_pushinteger(L, v.as_int()); return;
    case Value::Kind::kFloat: lua_pushnumber(L, v.as_float()); return;
    case Value::Kind::kString: lua_pushlstring(L, v.as_string().data(), v.as_string().size()); return;
    case Value::Kind::kArray: {
      const Array& a = v.as_array();
      LuaState::Charge(L, 1 + a.size());
      lua_createtable(L, static_cast<int>(std::min<size_t>(a.size(), INT32_MAX)), 0);
      if (a.empty()) {
        internal::PushArrayMarker(L);
        lua_setmetatable(L, -2);
      }
      for (size_t i = 0; i < a.size(); ++i) {
        if (a[i].is_nil()) continue;
        PushValueUnprotected(L, a[i]);
        lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
      }
      return;
    }
    case Value::Kind::kMap: {
      const Map& m = v.as_map();
      LuaState::Charge(L, 1 + m.size());
      lua_createtable(L, 0, static_cast<int>(std::min<size_t>(m.size(), INT32_MAX)));
      for (const auto& [k, e] : m) {
        if (e.is_nil()) continue;
        lua_pushlstring(L, k.data(), k.size());
        PushValueUnprotected(L, e);
        lua_rawset(L, -3);
      }
      return;
    }
  }
}

void internal::PushEncodedUnprotected(lua_State* L, std::string_view bytes) {
  EncodedCursor c{bytes.data(), bytes.data() + bytes.size()};
  PushEncoded(L, c, 0);
  if (c.p != c.end) luaL_error(L, "malformed encoded value");
}

}  // namespace rote::sandbox

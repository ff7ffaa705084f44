#include "sandbox/lua_runtime.h"

#include <locale.h>
#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <lua.hpp>

#include "absl/strings/str_cat.h"
#include "sandbox/lua_internal.h"
#include "sandbox/worker_protocol.h"

namespace rote::sandbox {

// The Lua heap of one state: a private mapping with size-class free lists. Lua passes the old
// size on every free and realloc, so blocks need no headers, and all allocator metadata sits in
// `meta`, which makes a snapshot of (used bytes of the mapping, meta) a complete copy of the
// heap. Freed memory is reused within its size class; the mapping is never returned to the
// system before the state is closed.
struct LuaState::Arena {
  static constexpr size_t kSmallStep = 16;
  static constexpr size_t kSmallMax = 1024;            // 64 classes of 16-byte steps
  static constexpr int kSmallClasses = kSmallMax / kSmallStep + 1;
  static constexpr int kLargeClasses = 48;             // powers of two from 2 KiB
  struct Meta {
    size_t bump = 0;
    void* small[kSmallClasses] = {};
    void* large[kLargeClasses] = {};
  };

  char* base = nullptr;
  size_t capacity = 0;
  Meta meta;

  ~Arena() {
    if (base != nullptr) munmap(base, capacity);
  }
  bool Init(size_t cap) {
    void* p = mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    base = static_cast<char*>(p);
    capacity = cap;
    return true;
  }
  // Class index and block size for a request of n bytes (n > 0).
  static void ClassOf(size_t n, bool* small, int* index, size_t* block) {
    if (n <= kSmallMax) {
      *small = true;
      *index = static_cast<int>((n + kSmallStep - 1) / kSmallStep);
      *block = static_cast<size_t>(*index) * kSmallStep;
      return;
    }
    *small = false;
    int k = 11;
    while ((size_t{1} << k) < n) ++k;
    *index = k - 11;
    *block = size_t{1} << k;
  }
  void* Alloc(size_t n) {
    bool small;
    int idx;
    size_t block;
    ClassOf(n, &small, &idx, &block);
    if (!small && idx >= kLargeClasses) return nullptr;
    void** head = small ? &meta.small[idx] : &meta.large[idx];
    if (*head != nullptr) {
      void* p = *head;
      std::memcpy(head, p, sizeof(void*));
      return p;
    }
    if (block > capacity - meta.bump) return nullptr;
    void* p = base + meta.bump;
    meta.bump += block;
    return p;
  }
  void Free(void* p, size_t n) {
    bool small;
    int idx;
    size_t block;
    ClassOf(n, &small, &idx, &block);
    void** head = small ? &meta.small[idx] : &meta.large[idx];
    std::memcpy(p, head, sizeof(void*));
    *head = p;
  }
  void* Realloc(void* p, size_t old_size, size_t n) {
    bool s1, s2;
    int i1, i2;
    size_t b1, b2;
    ClassOf(old_size, &s1, &i1, &b1);
    ClassOf(n, &s2, &i2, &b2);
    if (s1 == s2 && i1 == i2) return p;
    void* q = Alloc(n);
    if (q == nullptr) {
      // Lua requires shrinking to succeed; the block stays where it is (it is larger than
      // its new class, which is harmless when it is freed into that class later).
      return n < old_size ? p : nullptr;
    }
    std::memcpy(q, p, std::min(old_size, n));
    Free(p, old_size);
    return q;
  }
};

struct LuaState::Snapshot {
  std::vector<char> image;
  Arena::Meta meta;
  uint64_t heap_bytes;
  int env_ref;
};

// Grants the file-local C functions access to LuaState's counters.
struct LuaStateAccess {
  static uint64_t& instructions(LuaState* s) { return s->instructions_; }
  static const Limits& limits(LuaState* s) { return s->limits_; }
  static absl::Status& limit_status(LuaState* s) { return s->limit_status_; }
  static std::string& output(LuaState* s) { return s->output_; }
  static std::optional<LuaState::Clock::time_point>& deadline(LuaState* s) { return s->deadline_; }
  static bool& deadline_hit(LuaState* s) { return s->deadline_hit_; }
  static void RaiseLimit(LuaState* s, lua_State* L) { s->RaiseLimit(L); }
  static uint64_t& heap(LuaState* s) { return s->heap_bytes_; }
  static LuaState::Arena& arena(LuaState* s) { return *s->arena_; }
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

namespace {

using A = LuaStateAccess;

// Registry keys: addresses of these objects, used as light userdata (never observable).
char kProxiesKey;      // proxy table -> real table, for read-only library tables
char kIdsKey;          // weak-keyed object -> tostring sequence number, per call
char kNextIdKey;       // integer counter for the above
char kEnvMetaKey;      // metatable of every per-call global table
char kArrayMarkerKey;  // metatable marking an empty table as an empty array
char kRandomSeedKey;   // the stock math.randomseed, for reseeding per call

constexpr lua_Integer kRandomSeed = 0x726f7465;  // "rote"

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

void* Allocate(void* ud, void* ptr, size_t osize, size_t nsize);

// The string hash seed. Debian's liblua computes it in lua_newstate from time() and addresses,
// so the hash layout of every table (stock next order; when a rehash happens, and with it the
// border '#' finds in a table with holes) differs per process. The seed is a field of the
// global state, which lua_newstate allocates through our allocator in its first call and fills
// (frealloc, ud, totalbytes, the empty string table, nil registry, then the seed) before its
// second allocation, the first one that hashes anything. At that second call we find the
// global state by its frealloc/ud pair, check every field around the seed against what
// lua_newstate has just written, and overwrite the seed with a constant. If anything does not
// match (another Lua build), nothing is written and seed_pinned() reports it.
constexpr unsigned int kStringHashSeed = 0x726f7465;  // "rote"

struct TValueLayout {  // lobject.h: a Value union and a type tag, padded to 16 bytes
  uint64_t value;
  uint8_t tag;
};

struct GlobalStatePrefix {  // lstate.h of Lua 5.4.0-5.4.6, up to and including `seed`
  lua_Alloc frealloc;
  void* ud;
  int64_t totalbytes;
  int64_t gc_debt;
  uint64_t gc_estimate;
  uint64_t last_atomic;
  void* strt_hash;
  int strt_nuse;
  int strt_size;
  TValueLayout l_registry;
  TValueLayout nilvalue;
  unsigned int seed;
};
static_assert(offsetof(GlobalStatePrefix, seed) == 96, "global_State layout of Lua 5.4 on LP64");

bool PinSeed(void* lg, size_t lg_size, void* ud) {
  auto* bytes = static_cast<char*>(lg);
  for (size_t off = 0; off + sizeof(GlobalStatePrefix) <= lg_size; off += alignof(void*)) {
    GlobalStatePrefix g;
    std::memcpy(&g, bytes + off, sizeof g);
    if (g.frealloc != &Allocate || g.ud != ud) continue;
    // What lua_newstate has written by now: totalbytes = sizeof(LG), an empty string table, a
    // nil registry, and nilvalue set to integer 0 ("state not yet built", tag LUA_VNUMINT).
    bool as_expected = g.totalbytes == static_cast<int64_t>(lg_size) && g.gc_debt == 0 && g.last_atomic == 0 &&
                       g.strt_hash == nullptr && g.strt_nuse == 0 && g.strt_size == 0 &&
                       g.l_registry.tag == LUA_TNIL && g.nilvalue.tag == LUA_TNUMBER && g.nilvalue.value == 0;
    if (!as_expected) return false;
    unsigned int seed = kStringHashSeed;
    std::memcpy(bytes + off + offsetof(GlobalStatePrefix, seed), &seed, sizeof seed);
    return true;
  }
  return false;
}

absl::Status InstructionLimitError(uint64_t max_instructions) {
  return absl::ResourceExhaustedError(
      absl::StrCat("instruction limit exceeded (max_instructions=", max_instructions, ")"));
}

void* Allocate(void* ud, void* ptr, size_t osize, size_t nsize) {
  auto* s = static_cast<LuaState*>(ud);
  if (A::lg_block(s) == nullptr && ptr == nullptr && nsize > 0) {
    // lua_newstate's first allocation: the block holding the main thread and global state.
    void* p = A::arena(s).Alloc(nsize);
    A::lg_block(s) = p;
    A::lg_size(s) = nsize;
    A::heap(s) += nsize;
    A::peak(s) = A::heap(s);
    return p;
  }
  if (!A::seed_checked(s) && A::lg_block(s) != nullptr) {
    A::seed_checked(s) = true;
    A::seed_pinned(s) = PinSeed(A::lg_block(s), A::lg_size(s), ud);
  }
  uint64_t& heap = A::heap(s);
  size_t old = ptr ? osize : 0;
  if (nsize == 0) {
    heap -= old;
    if (ptr != nullptr) A::arena(s).Free(ptr, osize);
    return nullptr;
  }
  if (nsize > old && A::enforce_memory(s)) {
    uint64_t grow = nsize - old;
    const Limits& lim = A::limits(s);
    if (heap + grow > lim.max_memory_bytes) {
      // Sticky: the script may catch "not enough memory" with pcall, but the hook raises the
      // limit again at its next instruction, so the call fails the same way every time.
      if (A::limit_status(s).ok()) {
        A::limit_status(s) = absl::ResourceExhaustedError(
            absl::StrCat("memory limit exceeded (max_memory_bytes=", lim.max_memory_bytes, ")"));
        lua_sethook(A::main(s), lua_gethook(A::main(s)), LUA_MASKCOUNT, 1);
      }
      return nullptr;
    }
    // During a call, heap growth is work the script asked for (a concatenation, a buffer, a
    // table, a deeper stack) and is charged like any other; once a limit is hit nothing grows
    // any more, so C code that allocates in a loop stops at its next allocation.
    if (A::metering(s) && !A::ChargeAllocation(s, grow)) return nullptr;
  }
  void* p = ptr == nullptr ? A::arena(s).Alloc(nsize) : A::arena(s).Realloc(ptr, osize, nsize);
  if (p == nullptr) {
    if (nsize > old && A::enforce_memory(s) && A::limit_status(s).ok()) {
      A::limit_status(s) = absl::ResourceExhaustedError(absl::StrCat(
          "memory limit exceeded (the arena of ", A::arena(s).capacity, " bytes is full)"));
      lua_sethook(A::main(s), lua_gethook(A::main(s)), LUA_MASKCOUNT, 1);
    }
    return nullptr;
  }
  heap = heap - old + nsize;
  if (heap > A::peak(s)) A::peak(s) = heap;
  return p;
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

// Whether the call is over: a limit or the deadline was hit, or the host asked it to stop.
bool StopRequested(LuaState* s) {
  return !A::limit_status(s).ok() || A::deadline_hit(s) || HostStopHook(A::main(s)) != nullptr;
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

int ReadOnlyError(lua_State* L) { return luaL_error(L, "attempt to modify a read-only table"); }

// Returns a proxy for the table at idx: reads fall through, writes raise, the metatable is
// protected, and the deterministic pairs/next see the real table's contents.
void PushReadOnlyProxy(lua_State* L, int idx) {
  idx = lua_absindex(L, idx);
  lua_newtable(L);  // proxy
  lua_createtable(L, 0, 3);
  lua_pushvalue(L, idx);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, ReadOnlyError);
  lua_setfield(L, -2, "__newindex");
  lua_pushliteral(L, "read-only table");
  lua_setfield(L, -2, "__metatable");
  lua_setmetatable(L, -2);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &kProxiesKey);
  lua_pushvalue(L, -2);
  lua_pushvalue(L, idx);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

// If the table at idx is a read-only proxy, replaces it in place with the real table.
void UnwrapProxy(lua_State* L, int idx) {
  idx = lua_absindex(L, idx);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &kProxiesKey);
  lua_pushvalue(L, idx);
  if (lua_rawget(L, -2) == LUA_TTABLE) lua_replace(L, idx);
  else lua_pop(L, 1);
  lua_pop(L, 1);
}

bool IsProxy(lua_State* L, int idx) {
  idx = lua_absindex(L, idx);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &kProxiesKey);
  lua_pushvalue(L, idx);
  bool found = lua_rawget(L, -2) != LUA_TNIL;
  lua_pop(L, 2);
  return found;
}

// ---- Table sizes. lua_next visits every slot of a table's array and hash parts, empty ones
// included, so what a traversal costs is the table's allocated size, not its key count: a table
// whose million elements were set to nil keeps its million slots until it is next rehashed, and
// next() over it would otherwise be one unit for a million steps. The size is read from the
// Table itself, whose layout is lobject.h's in Lua 5.4.0 to 5.4.8; VerifyTableLayout checks it
// against tables of known sizes when a state is created, and refuses other builds.
struct TableLayout {
  void* next;
  uint8_t tt;
  uint8_t marked;
  uint8_t flags;      // bit 7 set: `alimit` is less than the array part's real size
  uint8_t lsizenode;  // log2 of the hash part's size
  unsigned int alimit;
  void* array;
  void* node;
  void* lastfree;  // null for the shared empty hash part
  void* metatable;
  void* gclist;
};
static_assert(offsetof(TableLayout, alimit) == 12 && offsetof(TableLayout, lastfree) == 32,
              "Table layout of Lua 5.4 on LP64");

TableLayout ReadTable(lua_State* L, int idx) {
  TableLayout t;
  std::memcpy(&t, lua_topointer(L, idx), sizeof t);
  return t;
}

// Slots in the array and hash parts of the table at idx (ltable.c's luaH_realasize and
// allocsizenode).
uint64_t TableSlots(lua_State* L, int idx) {
  TableLayout t = ReadTable(L, idx);
  uint64_t array = t.alimit;
  if ((t.flags & 0x80) != 0 && (array & (array - 1)) != 0) array = std::bit_ceil(array);
  uint64_t hash = t.lastfree == nullptr ? 0 : uint64_t{1} << t.lsizenode;
  return array + hash;
}

bool VerifyTableLayout(lua_State* L) {
  lua_createtable(L, 0, 0);
  lua_createtable(L, 5, 9);  // an array part of 5 and a hash part of 16
  TableLayout e = ReadTable(L, -2), t = ReadTable(L, -1);
  bool ok = e.tt == LUA_TTABLE && e.alimit == 0 && e.lastfree == nullptr && e.array == nullptr &&
            t.tt == LUA_TTABLE && t.alimit == 5 && t.lsizenode == 4 && (t.flags & 0x80) == 0 &&
            t.array != nullptr && t.node != nullptr && t.lastfree != nullptr && e.node != t.node &&
            TableSlots(L, -2) == 0 && TableSlots(L, -1) == 21;
  lua_pop(L, 2);
  return ok;
}

// ---- Deterministic key order: numbers (integers and floats numerically), then strings
// bytewise, then false, then true. Tables, functions and other keys have no order that does
// not depend on addresses, so iterating a table that has them is an error.
struct SortKey {
  int kind;  // 0 number, 1 string, 2 boolean
  bool is_int;
  lua_Integer i;
  double d;
  const char* s;
  size_t len;
};

bool MakeSortKey(lua_State* L, int idx, SortKey* k) {
  switch (lua_type(L, idx)) {
    case LUA_TNUMBER:
      k->kind = 0;
      k->is_int = lua_isinteger(L, idx);
      if (k->is_int) k->i = lua_tointeger(L, idx);
      else k->d = lua_tonumber(L, idx);
      return true;
    case LUA_TSTRING:
      k->kind = 1;
      k->s = lua_tolstring(L, idx, &k->len);
      return true;
    case LUA_TBOOLEAN:
      k->kind = 2;
      k->i = lua_toboolean(L, idx);
      return true;
    default:
      return false;
  }
}

// Integer vs non-integral float (float keys with integral values are normalized to integers
// by Lua, so the two are never equal).
bool IntLessFloat(lua_Integer i, double d) {
  if (d >= 9223372036854775808.0) return true;
  if (d < -9223372036854775808.0) return false;
  return i <= static_cast<lua_Integer>(std::floor(d));
}

// What comparing keys cost: one unit per comparison and one per 16 bytes of strings compared.
struct CompareCost {
  uint64_t comparisons = 0;
  uint64_t bytes = 0;
  uint64_t units() const { return comparisons + bytes / internal::kBytesPerCharge; }
};

bool KeyLess(const SortKey& a, const SortKey& b, CompareCost* cost) {
  ++cost->comparisons;
  if (a.kind != b.kind) return a.kind < b.kind;
  switch (a.kind) {
    case 0:
      if (a.is_int && b.is_int) return a.i < b.i;
      if (!a.is_int && !b.is_int) return a.d < b.d;
      if (a.is_int) return IntLessFloat(a.i, b.d);
      return !IntLessFloat(b.i, a.d);
    case 1: {
      size_t n = std::min(a.len, b.len);
      cost->bytes += n;
      int c = std::memcmp(a.s, b.s, n);
      return c != 0 ? c < 0 : a.len < b.len;
    }
    default: return a.i < b.i;
  }
}

[[noreturn]] void UnorderableKey(lua_State* L, int idx, const char* fn) {
  luaL_error(L, "%s: table has a key of type %s; only number, string and boolean keys have a "
             "deterministic iteration order", fn, luaL_typename(L, idx));
  abort();  // unreachable: luaL_error does not return
}

// Charged before a function walks the table at t with lua_next `walks` times.
void ChargeWalks(lua_State* L, int t, uint64_t walks) {
  LuaState::Charge(L, internal::SaturatingAdd(1, walks * TableSlots(L, t)));
}

int CountKeys(lua_State* L, int t) {
  int n = 0;
  lua_pushnil(L);
  while (lua_next(L, t) != 0) {
    lua_pop(L, 1);
    ++n;
  }
  return n;
}

// next(t, k): the smallest key greater than k (or the smallest key when k is nil). O(n) per
// step, but it never depends on the hash layout.
int DeterministicNext(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 2);
  UnwrapProxy(L, 1);
  SortKey after{};
  bool have_after = !lua_isnil(L, 2);
  if (have_after && !MakeSortKey(L, 2, &after)) UnorderableKey(L, 2, "next");
  ChargeWalks(L, 1, 1);
  CompareCost cost;
  bool found = false;
  SortKey best{};
  lua_pushnil(L);  // slot 3: best key so far
  lua_pushnil(L);  // iteration key
  while (lua_next(L, 1) != 0) {
    lua_pop(L, 1);
    SortKey k{};
    if (!MakeSortKey(L, -1, &k)) UnorderableKey(L, -1, "next");
    if ((!have_after || KeyLess(after, k, &cost)) && (!found || KeyLess(k, best, &cost))) {
      found = true;
      best = k;
      lua_pushvalue(L, -1);
      lua_replace(L, 3);
    }
  }
  LuaState::Charge(L, cost.units());
  if (!found) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushvalue(L, 3);
  lua_rawget(L, 1);
  return 2;
}

// Iterator closure of pairs: upvalue 1 = the table, 2 = sorted keys, 3 = position.
int PairsStep(lua_State* L) {
  lua_Integer pos = lua_tointeger(L, lua_upvalueindex(3));
  lua_Integer n = static_cast<lua_Integer>(lua_rawlen(L, lua_upvalueindex(2)));
  while (pos < n) {
    ++pos;
    lua_rawgeti(L, lua_upvalueindex(2), pos);
    lua_pushvalue(L, -1);
    if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) {  // skip keys removed meanwhile
      lua_pushinteger(L, pos);
      lua_replace(L, lua_upvalueindex(3));
      return 2;
    }
    lua_pop(L, 2);
  }
  lua_pushinteger(L, pos);
  lua_replace(L, lua_upvalueindex(3));
  lua_pushnil(L);
  return 1;
}

// pairs(t): snapshots the keys, sorts them, iterates the snapshot. __pairs is not honoured
// (a metamethod could reintroduce any order). Assigning to existing fields during the
// traversal is fine; keys added during it are not visited.
int DeterministicPairs(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  UnwrapProxy(L, 1);
  ChargeWalks(L, 1, 2);
  int n = CountKeys(L, 1);
  LuaState::Charge(L, static_cast<uint64_t>(n));  // each key is copied twice and looked up once
  // Scratch space as userdata so that a Lua error (memory limit) cannot leak it.
  auto* keys = static_cast<SortKey*>(lua_newuserdatauv(L, sizeof(SortKey) * (n ? n : 1), 0));
  CompareCost cost;
  int i = 0;
  lua_pushnil(L);
  while (lua_next(L, 1) != 0) {
    lua_pop(L, 1);
    if (!MakeSortKey(L, -1, &keys[i])) UnorderableKey(L, -1, "pairs");
    if (keys[i].kind == 1) cost.bytes += keys[i].len;  // hashed and compared again by PairsStep
    ++i;
  }
  std::sort(keys, keys + n, [&cost](const SortKey& a, const SortKey& b) { return KeyLess(a, b, &cost); });
  LuaState::Charge(L, cost.units());
  lua_pushvalue(L, 1);            // upvalue 1
  lua_createtable(L, n, 0);       // upvalue 2
  for (i = 0; i < n; ++i) {
    const SortKey& k = keys[i];
    if (k.kind == 0) {
      if (k.is_int) lua_pushinteger(L, k.i);
      else lua_pushnumber(L, k.d);
    } else if (k.kind == 1) {
      lua_pushlstring(L, k.s, k.len);
    } else {
      lua_pushboolean(L, static_cast<int>(k.i));
    }
    lua_rawseti(L, -2, i + 1);
  }
  lua_pushinteger(L, 0);          // upvalue 3
  lua_pushcclosure(L, PairsStep, 3);
  lua_pushvalue(L, 1);
  lua_pushnil(L);
  return 3;
}

int Tostring(lua_State* L) {
  luaL_checkany(L, 1);
  LuaState::PushToString(L, 1);
  return 1;
}

int Print(lua_State* L) {
  int n = lua_gettop(L);
  for (int i = 1; i <= n; ++i) {
    LuaState::PushToString(L, i);
    size_t len;
    const char* s = lua_tolstring(L, -1, &len);
    if (i > 1) LuaState::AppendOutput(L, "\t");
    LuaState::AppendOutput(L, std::string_view(s, len));
    lua_pop(L, 1);
  }
  LuaState::AppendOutput(L, "\n");
  return 0;
}
// ---- Library functions implemented in C. Each one whose work the script can make large is
// wrapped (or replaced) so that it charges before it runs: at least one unit per iteration of
// its loop, whatever the iteration does (string.rep of an empty string still loops n times),
// and one unit per 16 bytes it reads (internal::ChargeCall). Bytes it writes are charged as
// they are allocated (Allocate). A wrapper holds the stock function as its last upvalue, after
// the stock function's own upvalues (math.random's generator state), and runs it in its own
// frame: same arguments, same upvalues, same function name and stack levels in error messages,
// and yields work as they do unwrapped.

constexpr int kAllArgs = INT_MAX;

lua_CFunction Stock(lua_State* L) {
  int i = 1;
  while (lua_type(L, lua_upvalueindex(i + 1)) != LUA_TNONE) ++i;
  return lua_tocfunction(L, lua_upvalueindex(i));
}

int CallStock(lua_State* L) { return Stock(L)(L); }

// Replaces field `name` of the table on top of the stack with `wrapper` around it.
void WrapField(lua_State* L, const char* name, lua_CFunction wrapper) {
  lua_getfield(L, -1, name);
  int stock = lua_gettop(L);
  int n = 0;
  while (lua_getupvalue(L, stock, n + 1) != nullptr) ++n;
  lua_pushvalue(L, stock);
  lua_pushcclosure(L, wrapper, n + 1);
  lua_setfield(L, -3, name);
  lua_pop(L, 1);
}

// The stock function after ChargeCall(L, 0, First, Last).
template <int First, int Last>
int Charged(lua_State* L) {
  internal::ChargeCall(L, 0, First, Last);
  return CallStock(L);
}

// The iterations of `for (i = from; i < to; ++i)` (or down from `to` to `from`), for any two
// integers: a __len can answer anything.
uint64_t Iterations(lua_Integer from, lua_Integer to) {
  return to > from ? static_cast<lua_Unsigned>(to) - static_cast<lua_Unsigned>(from) : 0;
}

// Units for a loop over the indices first..last.
uint64_t RangeUnits(lua_Integer first, lua_Integer last) {
  if (last < first) return 0;
  lua_Unsigned span = static_cast<lua_Unsigned>(last) - static_cast<lua_Unsigned>(first);
  return span > (1ull << 60) ? (1ull << 60) : span + 1;
}

int GuardedSetmetatable(lua_State* L) {
  if (lua_type(L, 2) == LUA_TTABLE) {
    for (const char* field : {"__gc", "__mode"}) {
      if (lua_getfield(L, 2, field) != LUA_TNIL) {
        return luaL_error(L, "setmetatable: %s is not available in the deterministic profile "
                          "(it depends on when the garbage collector runs)", field);
      }
      lua_pop(L, 1);
    }
  }
  return CallStock(L);
}

int GuardedRawset(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  if (IsProxy(L, 1)) return ReadOnlyError(L);
  internal::ChargeCall(L, 0, 2, 2);  // a long string key is hashed and compared
  return CallStock(L);
}

// The message handler of xpcall. Once a call is over (a limit, the deadline, a host stop) the
// user's handler is skipped and the error passes through unchanged: the error may have been
// raised from a count hook, and Lua runs message handlers before unwinding, while hooks are
// still disabled, so a handler that loops would never be stopped.
int XpcallHandler(lua_State* L) {
  if (StopRequested(LuaState::From(L))) return 1;
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

int GuardedXpcall(lua_State* L) {
  luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_pushvalue(L, 2);
  lua_pushcclosure(L, XpcallHandler, 1);
  lua_replace(L, 2);
  return CallStock(L);
}

// error(message, level): adding the position walks `level` frames up the call stack.
int ChargedError(lua_State* L) {
  lua_Integer level = luaL_optinteger(L, 2, 1);
  internal::ChargeCall(L, level > 0 ? static_cast<uint64_t>(level) : 0, 2, 2);
  return CallStock(L);
}

int RandomSeed(lua_State* L) {
  internal::ChargeCall(L, 0, 1, 2);
  lua_Integer a = luaL_checkinteger(L, 1);
  lua_Integer b = luaL_optinteger(L, 2, 0);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &kRandomSeedKey);
  lua_pushinteger(L, a);
  lua_pushinteger(L, b);
  lua_call(L, 2, 0);
  return 0;
}

// string.rep(s, n, sep): one unit per copy, also of an empty string (the loop runs n times
// whatever it copies), charged before anything is built.
int StringRep(lua_State* L) {
  size_t l, lsep;
  const char* s = luaL_checklstring(L, 1, &l);
  lua_Integer n = luaL_checkinteger(L, 2);
  const char* sep = luaL_optlstring(L, 3, "", &lsep);
  internal::ChargeCall(L, n > 0 ? static_cast<uint64_t>(n) : 0, 2, 2);
  if (n <= 0) {
    lua_pushliteral(L, "");
    return 1;
  }
  constexpr size_t kMaxResult = INT_MAX;  // lstrlib.c's MAXSIZE
  if (l + lsep < l || l + lsep > kMaxResult / static_cast<size_t>(n)) {
    return luaL_error(L, "resulting string too large");
  }
  size_t total = static_cast<size_t>(n) * l + static_cast<size_t>(n - 1) * lsep;
  luaL_Buffer b;
  char* p = luaL_buffinitsize(L, &b, total);
  for (lua_Integer i = 1; i < n; ++i) {
    if (i % internal::kIterationsPerPoll == 0) LuaState::Poll(L);
    std::memcpy(p, s, l);
    p += l;
    if (lsep > 0) {
      std::memcpy(p, sep, lsep);
      p += lsep;
    }
  }
  std::memcpy(p, s, l);
  luaL_pushresultsize(&b, total);
  return 1;
}

// string.byte(s, i, j): one unit per byte returned.
int StringByte(lua_State* L) {
  size_t l;
  luaL_checklstring(L, 1, &l);
  lua_Integer pi = luaL_optinteger(L, 2, 1);
  size_t posi = internal::PosRelatI(pi, l);
  size_t pose = internal::GetEndPos(L, 3, pi, l);
  internal::ChargeCall(L, posi <= pose ? pose - posi + 1 : 0, 2, 3);
  return CallStock(L);
}

// string.format: "%s" goes through the deterministic tostring (the stock one prints
// addresses for tables), "%p" and "%a" are refused. One unit per conversion on top of the
// bytes (widths and precisions are at most two digits: the stock function refuses more).
int StringFormat(lua_State* L) {
  size_t len;
  const char* fmt = luaL_checklstring(L, 1, &len);
  int top = lua_gettop(L);
  int arg = 1;
  uint64_t conversions = 0;
  for (size_t i = 0; i < len; ++i) {
    if (fmt[i] != '%') continue;
    if (++i < len && fmt[i] == '%') continue;
    ++arg;
    ++conversions;
    while (i < len && std::strchr("-+ #0123456789.", fmt[i]) != nullptr) ++i;
    if (i >= len) break;  // the stock function reports the malformed format
    char conv = fmt[i];
    if (conv == 'p') {
      return luaL_error(L, "string.format: '%%p' is not available in the deterministic profile "
                        "(addresses differ between runs)");
    }
    if (conv == 'a' || conv == 'A') {
      return luaL_error(L, "string.format: '%%%c' is not available in the deterministic profile "
                        "(hexadecimal float output differs between C libraries)", conv);
    }
    if (conv == 'q' && arg <= top && lua_type(L, arg) == LUA_TNUMBER && !lua_isinteger(L, arg)) {
      return luaL_error(L, "string.format: '%%q' of a float is not available in the deterministic profile "
                        "(it writes hexadecimal floats, whose text differs between C libraries)");
    }
    if (conv == 's' && arg <= top && lua_type(L, arg) != LUA_TSTRING && lua_type(L, arg) != LUA_TNUMBER) {
      LuaState::PushToString(L, arg);
      lua_replace(L, arg);
    }
  }
  internal::ChargeCall(L, conversions, 1, kAllArgs);
  return CallStock(L);
}

// ---- table: concat, insert, remove and move are ltablib.c's, with the length read once (a
// __len that answers differently the second time must not decide the loop after the charge)
// and a Poll in their loops, which can run for as many iterations as the budget allows.

void AddField(lua_State* L, luaL_Buffer* b, lua_Integer i) {
  lua_geti(L, 1, i);
  if (!lua_isstring(L, -1)) {
    luaL_error(L, "invalid value (%s) at index %I in table for 'concat'", luaL_typename(L, -1),
               static_cast<LUAI_UACINT>(i));
  }
  luaL_addvalue(b);
}

int TableConcat(lua_State* L) {
  internal::ChargeCall(L, 0, 3, 4);
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer last = luaL_len(L, 1);
  size_t lsep;
  const char* sep = luaL_optlstring(L, 2, "", &lsep);
  lua_Integer i = luaL_optinteger(L, 3, 1);
  last = luaL_optinteger(L, 4, last);
  LuaState::Charge(L, RangeUnits(i, last));
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (uint64_t k = 1; i < last; ++i, ++k) {
    if (k % internal::kIterationsPerPoll == 0) LuaState::Poll(L);
    AddField(L, &b, i);
    luaL_addlstring(&b, sep, lsep);
  }
  if (i == last) AddField(L, &b, i);
  luaL_pushresult(&b);
  return 1;
}

int TableUnpack(lua_State* L) {
  internal::ChargeCall(L, 0, 2, 3);
  lua_Integer i = luaL_optinteger(L, 2, 1);
  lua_Integer e = luaL_opt(L, luaL_checkinteger, 3, luaL_len(L, 1));
  if (i > e) return 0;
  LuaState::Charge(L, RangeUnits(i, e));
  lua_Unsigned n = static_cast<lua_Unsigned>(e) - static_cast<lua_Unsigned>(i);
  if (n >= static_cast<unsigned int>(INT_MAX) || !lua_checkstack(L, static_cast<int>(++n))) {
    return luaL_error(L, "too many results to unpack");
  }
  for (; i < e; ++i) lua_geti(L, 1, i);
  lua_geti(L, 1, e);
  return static_cast<int>(n);
}

int TableInsert(lua_State* L) {
  internal::ChargeCall(L, 0, 2, lua_gettop(L) == 3 ? 2 : 0);
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer e = luaL_intop(+, luaL_len(L, 1), 1);  // first empty element
  lua_Integer pos;
  switch (lua_gettop(L)) {
    case 2:
      pos = e;
      break;
    case 3: {
      pos = luaL_checkinteger(L, 2);
      luaL_argcheck(L, static_cast<lua_Unsigned>(pos) - 1u < static_cast<lua_Unsigned>(e), 2,
                    "position out of bounds");
      LuaState::Charge(L, Iterations(pos, e));
      uint64_t k = 0;
      for (lua_Integer i = e; i > pos; --i) {  // move up elements
        if (++k % internal::kIterationsPerPoll == 0) LuaState::Poll(L);
        lua_geti(L, 1, i - 1);
        lua_seti(L, 1, i);
      }
      break;
    }
    default:
      return luaL_error(L, "wrong number of arguments to 'insert'");
  }
  lua_seti(L, 1, pos);
  return 0;
}

int TableRemove(lua_State* L) {
  internal::ChargeCall(L, 0, 2, 2);
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer size = luaL_len(L, 1);
  lua_Integer pos = luaL_optinteger(L, 2, size);
  if (pos != size) {  // validate 'pos' if given; the stock message names argument 1
    luaL_argcheck(L, static_cast<lua_Unsigned>(pos) - 1u <= static_cast<lua_Unsigned>(size), 1,
                  "position out of bounds");
  }
  LuaState::Charge(L, Iterations(pos, size));
  lua_geti(L, 1, pos);
  for (uint64_t k = 1; pos < size; ++pos, ++k) {
    if (k % internal::kIterationsPerPoll == 0) LuaState::Poll(L);
    lua_geti(L, 1, pos + 1);
    lua_seti(L, 1, pos);
  }
  lua_pushnil(L);
  lua_seti(L, 1, pos);
  return 1;
}

int TableMove(lua_State* L) {
  internal::ChargeCall(L, 0, 2, 4);
  lua_Integer f = luaL_checkinteger(L, 2);
  lua_Integer e = luaL_checkinteger(L, 3);
  lua_Integer t = luaL_checkinteger(L, 4);
  int tt = !lua_isnoneornil(L, 5) ? 5 : 1;  // destination table
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, tt, LUA_TTABLE);
  if (e >= f) {
    luaL_argcheck(L, f > 0 || e < LUA_MAXINTEGER + f, 3, "too many elements to move");
    lua_Integer n = e - f + 1;
    luaL_argcheck(L, t <= LUA_MAXINTEGER - n + 1, 4, "destination wrap around");
    LuaState::Charge(L, RangeUnits(f, e));
    bool forward = t > e || t <= f || (tt != 1 && !lua_compare(L, 1, tt, LUA_OPEQ));
    for (lua_Integer k = 0; k < n; ++k) {
      if ((k + 1) % static_cast<lua_Integer>(internal::kIterationsPerPoll) == 0) LuaState::Poll(L);
      lua_Integer i = forward ? k : n - 1 - k;
      lua_geti(L, 1, f + i);
      lua_seti(L, tt, t + i);
    }
  }
  lua_pushvalue(L, tt);
  return 1;
}

// table.sort: a stable bottom-up merge sort. The stock sort is a quicksort whose pivot choice
// for large arrays mixes in clock() and time(), so with equal elements or an inconsistent
// comparator its result differs from run to run. Any comparator gives one fixed result here.
// One unit per comparison; two strings are compared here, bytewise as the C locale's strcoll
// does (Lua's l_strcmp), and charged one unit per 16 bytes compared.
bool SortLess(lua_State* L, bool has_comparator, int a, int b) {
  a = lua_absindex(L, a);
  b = lua_absindex(L, b);
  if (has_comparator) {
    LuaState::Charge(L, 1);
    lua_pushvalue(L, 2);
    lua_pushvalue(L, a);
    lua_pushvalue(L, b);
    lua_call(L, 2, 1);
    bool r = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return r;
  }
  if (lua_type(L, a) == LUA_TSTRING && lua_type(L, b) == LUA_TSTRING) {
    size_t la, lb;
    const char* sa = lua_tolstring(L, a, &la);
    const char* sb = lua_tolstring(L, b, &lb);
    size_t n = std::min(la, lb);
    LuaState::Charge(L, 1 + n / internal::kBytesPerCharge);
    int c = std::memcmp(sa, sb, n);
    return c != 0 ? c < 0 : la < lb;
  }
  LuaState::Charge(L, 1);
  return lua_compare(L, a, b, LUA_OPLT);
}

int TableSort(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer n = luaL_len(L, 1);
  if (n > INT32_MAX) return luaL_argerror(L, 1, "array too big");
  bool has_comparator = !lua_isnoneornil(L, 2);
  if (has_comparator) luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_settop(L, 2);
  if (n < 2) return 0;
  LuaState::Charge(L, static_cast<uint64_t>(n));
  lua_createtable(L, static_cast<int>(n), 0);  // 3: source run
  lua_createtable(L, static_cast<int>(n), 0);  // 4: destination run
  for (lua_Integer i = 1; i <= n; ++i) {
    lua_geti(L, 1, i);
    lua_rawseti(L, 3, i);
  }
  int src = 3, dst = 4;
  for (lua_Integer width = 1; width < n; width *= 2) {
    LuaState::Charge(L, static_cast<uint64_t>(n));  // every element is copied once per pass
    for (lua_Integer lo = 1; lo <= n; lo += 2 * width) {
      lua_Integer mid = std::min(lo + width, n + 1), hi = std::min(lo + 2 * width, n + 1);
      lua_Integer i = lo, j = mid, k = lo;
      while (i < mid && j < hi) {
        lua_rawgeti(L, src, i);
        lua_rawgeti(L, src, j);
        // Take from the right run only when it is strictly less: keeps the sort stable.
        if (SortLess(L, has_comparator, -1, -2)) {
          lua_rawseti(L, dst, k++);
          lua_pop(L, 1);
          ++j;
        } else {
          lua_pop(L, 1);
          lua_rawseti(L, dst, k++);
          ++i;
        }
      }
      for (; i < mid; ++i) { lua_rawgeti(L, src, i); lua_rawseti(L, dst, k++); }
      for (; j < hi; ++j) { lua_rawgeti(L, src, j); lua_rawseti(L, dst, k++); }
    }
    std::swap(src, dst);
  }
  for (lua_Integer i = 1; i <= n; ++i) {
    lua_rawgeti(L, src, i);
    lua_seti(L, 1, i);
  }
  return 0;
}

// ---- utf8

lua_Integer Utf8Position(lua_Integer pos, size_t len) {  // lutf8lib.c's u_posrelat
  if (pos >= 0) return pos;
  if (0u - static_cast<size_t>(pos) > len) return 0;
  return static_cast<lua_Integer>(len) + pos + 1;
}

// utf8.codepoint(s, i, j): one unit per byte of the range (each decoded character is at
// least one byte and one result).
int Utf8Codepoint(lua_State* L) {
  size_t len;
  luaL_checklstring(L, 1, &len);
  lua_Integer posi = Utf8Position(luaL_optinteger(L, 2, 1), len);
  lua_Integer pose = Utf8Position(luaL_optinteger(L, 3, posi), len);
  bool in_range = posi >= 1 && pose <= static_cast<lua_Integer>(len) && posi <= pose;
  internal::ChargeCall(L, in_range ? static_cast<uint64_t>(pose - posi + 1) : 0, 2, 3);
  return CallStock(L);
}

// utf8.len(s, i, j): the bytes up front and one unit per character counted after the count.
int Utf8Len(lua_State* L) {
  internal::ChargeCall(L, 0, 1, 3);
  int r = CallStock(L);
  if (r == 1 && lua_isinteger(L, -1)) LuaState::Charge(L, static_cast<uint64_t>(lua_tointeger(L, -1)));
  return r;
}

// The iterator that utf8.codes returns: the stock one skips any run of continuation bytes
// before a character, so one step can scan the whole string; charged for what it skipped.
int Utf8CodesStep(lua_State* L) {
  size_t len;
  luaL_checklstring(L, 1, &len);
  lua_Integer from = lua_tointeger(L, 2);
  int r = CallStock(L);
  lua_Integer to = r == 2 ? lua_tointeger(L, -2) : static_cast<lua_Integer>(len);
  LuaState::Charge(L, 1 + static_cast<uint64_t>(std::max<lua_Integer>(0, to - from)) / internal::kBytesPerCharge);
  return r;
}

int Utf8Codes(lua_State* L) {
  internal::ChargeCall(L, 0, 1, 0);
  int r = CallStock(L);  // iterator, s, 0
  lua_pushvalue(L, -r);
  lua_pushcclosure(L, Utf8CodesStep, 1);
  lua_replace(L, -r - 1);
  return r;
}

// ---- coroutine

// coroutine.resume(co, ...): the arguments are moved into the coroutine and its results out.
int CoroutineResume(lua_State* L) {
  internal::ChargeCall(L, 0, 1, 0);
  int r = CallStock(L);
  LuaState::Charge(L, static_cast<uint64_t>(r));
  return r;
}

// The function coroutine.wrap returns (lcorolib.c's auxwrap; upvalue 1 is the coroutine),
// charged like resume, and with one difference: a coroutine that died because the call is over
// (a limit, the deadline, a host stop) is not reset. Resetting runs its pending __close
// handlers, and a coroutine that died inside the count hook has hooks disabled for good, so a
// handler that loops would never be stopped.
int WrappedCoroutineCall(lua_State* L) {
  internal::ChargeCall(L, 0, 1, 0);
  lua_State* co = lua_tothread(L, lua_upvalueindex(1));
  int narg = lua_gettop(L);
  int r = -1;
  if (!lua_checkstack(co, narg)) {
    lua_pushliteral(L, "too many arguments to resume");
  } else {
    lua_xmove(L, co, narg);
    int nres = 0;
    int status = lua_resume(co, L, narg, &nres);
    if (status == LUA_OK || status == LUA_YIELD) {
      if (!lua_checkstack(L, nres + 1)) {
        lua_pop(co, nres);
        lua_pushliteral(L, "too many results to resume");
      } else {
        lua_xmove(co, L, nres);
        r = nres;
      }
    } else {
      lua_xmove(co, L, 1);
    }
  }
  if (r >= 0) {
    LuaState::Charge(L, static_cast<uint64_t>(r));
    return r;
  }
  int stat = lua_status(co);
  if (stat != LUA_OK && stat != LUA_YIELD) {  // the coroutine died of the error
    if (StopRequested(LuaState::From(L))) return lua_error(L);
    stat = lua_resetthread(co);  // close its to-be-closed variables
    lua_xmove(co, L, 1);
  }
  if (stat != LUA_ERRMEM && lua_type(L, -1) == LUA_TSTRING) {
    luaL_where(L, 1);
    lua_insert(L, -2);
    lua_concat(L, 2);
  }
  return lua_error(L);
}

int CoroutineWrap(lua_State* L) {
  internal::ChargeCall(L, 0, 1, 0);
  luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_State* co = lua_newthread(L);
  lua_pushvalue(L, 1);
  lua_xmove(L, co, 1);
  lua_pushcclosure(L, WrappedCoroutineCall, 1);
  return 1;
}

// Removes fields from the table on top of the stack.
void RemoveFields(lua_State* L, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    lua_pushnil(L);
    lua_setfield(L, -2, n);
  }
}

int ArrayMarkerTostring(lua_State* L) {
  lua_pushliteral(L, "array");
  return 1;
}
void SetFunction(lua_State* L, const char* name, lua_CFunction f) {
  lua_pushcfunction(L, f);
  lua_setfield(L, -2, name);
}

// Builds the profile in the state's real global table ("base"), which scripts never see
// directly: each call's global table falls back to it through __index.
void InstallProfile(lua_State* L) {
  if (!VerifyTableLayout(L)) {
    luaL_error(L, "this Lua build's table layout is not Lua 5.4's; the sandbox cannot charge for "
               "traversing tables");
  }
  lua_newtable(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &kProxiesKey);

  luaL_requiref(L, "_G", luaopen_base, 0);  // the global table, now "base"
  RemoveFields(L, {"_G", "collectgarbage", "dofile", "load", "loadfile", "require", "warn",
                   "loadstring", "module", "unpack", "setfenv", "getfenv"});
  SetFunction(L, "pairs", DeterministicPairs);
  SetFunction(L, "next", DeterministicNext);
  SetFunction(L, "tostring", Tostring);
  SetFunction(L, "print", Print);
  WrapField(L, "setmetatable", GuardedSetmetatable);
  WrapField(L, "rawset", GuardedRawset);
  WrapField(L, "xpcall", GuardedXpcall);
  WrapField(L, "error", ChargedError);
  WrapField(L, "select", Charged<1, 1>);
  WrapField(L, "tonumber", Charged<1, kAllArgs>);
  WrapField(L, "assert", Charged<1, 0>);
  WrapField(L, "rawequal", Charged<1, 2>);
  WrapField(L, "rawget", Charged<2, 2>);
  int base = lua_gettop(L);

  luaL_requiref(L, "string", luaopen_string, 0);
  RemoveFields(L, {"dump", "pack", "packsize", "unpack"});
  for (const char* f : {"char", "lower", "upper", "reverse"}) WrapField(L, f, Charged<1, kAllArgs>);
  WrapField(L, "sub", Charged<2, 3>);
  WrapField(L, "byte", StringByte);
  WrapField(L, "rep", StringRep);
  WrapField(L, "format", StringFormat);
  internal::InstallPatternFunctions(L, lua_gettop(L));
  // The string metatable's __index is this real table; protect the metatable itself. Its
  // arithmetic metamethods convert strings to numbers by scanning them.
  lua_pushliteral(L, "");
  lua_getmetatable(L, -1);
  for (const char* f : {"__add", "__sub", "__mul", "__mod", "__pow", "__div", "__idiv", "__unm"}) {
    WrapField(L, f, Charged<1, 2>);
  }
  lua_pushliteral(L, "read-only table");
  lua_setfield(L, -2, "__metatable");
  lua_pop(L, 2);
  PushReadOnlyProxy(L, -1);
  lua_setfield(L, base, "string");
  lua_pop(L, 1);

  luaL_requiref(L, "table", luaopen_table, 0);
  SetFunction(L, "concat", TableConcat);
  SetFunction(L, "unpack", TableUnpack);
  SetFunction(L, "move", TableMove);
  SetFunction(L, "insert", TableInsert);
  SetFunction(L, "remove", TableRemove);
  SetFunction(L, "sort", TableSort);
  WrapField(L, "pack", Charged<1, 0>);
  PushReadOnlyProxy(L, -1);
  lua_setfield(L, base, "table");
  lua_pop(L, 1);

  luaL_requiref(L, "math", luaopen_math, 0);
  // glibc picks FMA or non-FMA variants of these at run time by CPU, and their results are not
  // correctly rounded, so they can differ between machines. sqrt is exact everywhere.
  RemoveFields(L, {"sin", "cos", "tan", "asin", "acos", "atan", "exp", "log", "pow", "ldexp",
                   "frexp", "cosh", "sinh", "tanh", "log10", "atan2"});
  for (const char* f : {"abs", "ceil", "floor", "fmod", "max", "min", "modf", "sqrt", "tointeger", "ult", "random"}) {
    WrapField(L, f, Charged<1, kAllArgs>);
  }
  lua_getfield(L, -1, "randomseed");
  lua_rawsetp(L, LUA_REGISTRYINDEX, &kRandomSeedKey);
  SetFunction(L, "randomseed", RandomSeed);
  PushReadOnlyProxy(L, -1);
  lua_setfield(L, base, "math");
  lua_pop(L, 1);

  luaL_requiref(L, "utf8", luaopen_utf8, 0);
  for (const char* f : {"char", "offset"}) WrapField(L, f, Charged<1, kAllArgs>);
  WrapField(L, "codepoint", Utf8Codepoint);
  WrapField(L, "len", Utf8Len);
  WrapField(L, "codes", Utf8Codes);
  PushReadOnlyProxy(L, -1);
  lua_setfield(L, base, "utf8");
  lua_pop(L, 1);

  luaL_requiref(L, "coroutine", luaopen_coroutine, 0);
  for (const char* f : {"create", "yield", "close"}) WrapField(L, f, Charged<1, 0>);
  WrapField(L, "resume", CoroutineResume);
  SetFunction(L, "wrap", CoroutineWrap);
  PushReadOnlyProxy(L, -1);
  lua_setfield(L, base, "coroutine");
  lua_pop(L, 1);

  // package.loaded (in the registry) still holds the real tables; scripts cannot reach it.
  lua_createtable(L, 0, 2);  // metatable of every per-call global table
  lua_pushvalue(L, base);
  lua_setfield(L, -2, "__index");
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "__metatable");
  lua_rawsetp(L, LUA_REGISTRYINDEX, &kEnvMetaKey);

  lua_createtable(L, 0, 2);
  lua_pushliteral(L, "read-only table");
  lua_setfield(L, -2, "__metatable");
  lua_pushcfunction(L, ArrayMarkerTostring);
  lua_setfield(L, -2, "__name");
  lua_rawsetp(L, LUA_REGISTRYINDEX, &kArrayMarkerKey);

  lua_pop(L, 1);  // base
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

void internal::ChargeCall(lua_State* L, uint64_t extra, int first, int last) {
  int n = lua_gettop(L);
  uint64_t bytes = 0;
  for (int i = std::max(first, 1); i <= std::min(last, n); ++i) {
    if (lua_type(L, i) == LUA_TSTRING) bytes += lua_rawlen(L, i);
  }
  LuaState::Charge(L, SaturatingAdd(SaturatingAdd(1 + static_cast<uint64_t>(n), extra), bytes / kBytesPerCharge));
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
  s->arena_ = std::make_unique<Arena>();
  if (!s->arena_->Init(cap)) return absl::ResourceExhaustedError("cannot map the Lua heap arena");
  s->L_ = lua_newstate(Allocate, s.get());
  if (s->L_ == nullptr) return absl::ResourceExhaustedError("cannot create a Lua state");
  *static_cast<LuaState**>(lua_getextraspace(s->L_)) = s.get();
  lua_State* L = s->L_;
  ScopedCLocale locale;
  lua_pushcfunction(L, [](lua_State* L2) -> int {
    InstallProfile(L2);
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

void LuaState::PushToString(lua_State* L, int idx) {
  idx = lua_absindex(L, idx);
  switch (lua_type(L, idx)) {
    case LUA_TNIL: lua_pushliteral(L, "nil"); return;
    case LUA_TBOOLEAN: lua_pushstring(L, lua_toboolean(L, idx) ? "true" : "false"); return;
    case LUA_TNUMBER:
      lua_pushvalue(L, idx);
      lua_tolstring(L, -1, nullptr);  // converts the copy in place ("%.14g" / "%d", C locale)
      return;
    case LUA_TSTRING: lua_pushvalue(L, idx); return;
    default: break;
  }
  if (luaL_callmeta(L, idx, "__tostring")) {
    if (!lua_isstring(L, -1)) luaL_error(L, "'__tostring' must return a string");
    return;
  }
  // "<type>: <n>", n counting from 1 in order of first use within the call.
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &kIdsKey) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_createtable(L, 0, 0);  // weak keys: an object's number lives as long as the object
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &kIdsKey);
  }
  lua_pushvalue(L, idx);
  lua_Integer id;
  if (lua_rawget(L, -2) == LUA_TNUMBER) {
    id = lua_tointeger(L, -1);
    lua_pop(L, 1);
  } else {
    lua_pop(L, 1);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &kNextIdKey);
    id = lua_tointeger(L, -1) + 1;
    lua_pop(L, 1);
    lua_pushinteger(L, id);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &kNextIdKey);
    lua_pushvalue(L, idx);
    lua_pushinteger(L, id);
    lua_rawset(L, -3);
  }
  lua_pop(L, 1);
  const char* type = luaL_typename(L, idx);
  lua_pushfstring(L, "%s: %I", type, static_cast<LUAI_UACINT>(id));
}

void LuaState::SetGlobal(const char* name, bool read_only) {
  ScopedCLocale locale;
  lua_pushglobaltable(L_);  // base
  lua_insert(L_, -2);
  if (read_only && lua_type(L_, -1) == LUA_TTABLE) {
    PushReadOnlyProxy(L_, -1);
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
  lua_pushcfunction(L_, [](lua_State* L) -> int {
    lua_newtable(L);  // the call's global table
    lua_pushvalue(L, -1);
    lua_setfield(L, -2, "_G");
    lua_rawgetp(L, LUA_REGISTRYINDEX, &kEnvMetaKey);
    lua_setmetatable(L, -2);
    lua_pushnil(L);  // tostring sequence numbers: created on first use
    lua_rawsetp(L, LUA_REGISTRYINDEX, &kIdsKey);
    lua_pushinteger(L, 0);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &kNextIdKey);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &kRandomSeedKey);
    lua_pushinteger(L, kRandomSeed);
    lua_pushinteger(L, 0);
    lua_call(L, 2, 0);
    return 1;
  });
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

}  // namespace

absl::Status LuaState::Push(const Value& v) {
  ScopedCLocale locale;
  lua_pushcfunction(L_, PushValueTrampoline);
  lua_pushlightuserdata(L_, const_cast<Value*>(&v));
  int rc = lua_pcall(L_, 1, 1, 0);
  if (rc == LUA_OK) return absl::OkStatus();
  std::string msg = ErrorText(L_);
  lua_pop(L_, 1);
  if (!limit_status_.ok()) return limit_status_;
  return absl::ResourceExhaustedError(absl::StrCat("pushing a value: ", msg));
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
        lua_rawgetp(L, LUA_REGISTRYINDEX, &kArrayMarkerKey);
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

struct ArtifactCache::Entry {
  std::string key;
  std::unique_ptr<LuaState> state;
  int chunk_ref = LUA_NOREF;
};
ArtifactCache::ArtifactCache() = default;
ArtifactCache::~ArtifactCache() = default;

namespace {

// Lua value -> the worker protocol's binary encoding (sandbox/worker_protocol.h), the single
// implementation of the conversion rules (ToValue decodes its output). It never raises a Lua
// error and never allocates in the Lua heap, so it can run outside protected mode: map entries
// are encoded in traversal order and then reordered by key with plain C++ memory.
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
        lua_rawgetp(L_, LUA_REGISTRYINDEX, &kArrayMarkerKey);
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
        lua_rawgetp(L, LUA_REGISTRYINDEX, &kArrayMarkerKey);
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

int PushEncodedTrampoline(lua_State* L) {
  auto* c = static_cast<EncodedCursor*>(lua_touserdata(L, 1));
  lua_pop(L, 1);
  PushEncoded(L, *c, 0);
  if (c->p != c->end) luaL_error(L, "malformed encoded value");
  return 1;
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

absl::Status LuaState::PushEncoded(std::string_view bytes) {
  ScopedCLocale locale;
  EncodedCursor cursor{bytes.data(), bytes.data() + bytes.size()};
  lua_pushcfunction(L_, PushEncodedTrampoline);
  lua_pushlightuserdata(L_, &cursor);
  int rc = lua_pcall(L_, 1, 1, 0);
  if (rc == LUA_OK) return absl::OkStatus();
  std::string msg = ErrorText(L_);
  lua_pop(L_, 1);
  if (!limit_status_.ok()) return limit_status_;
  return absl::ResourceExhaustedError(absl::StrCat("pushing a value: ", msg));
}

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

#include "sandbox/lua_allocator.h"

#include <cstdint>
#include <lua.hpp>

#include "absl/strings/str_cat.h"
#include "sandbox/lua_internal.h"

namespace rote::sandbox::internal {

namespace {

using A = LuaStateAccess;

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

}  // namespace

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

}  // namespace rote::sandbox::internal

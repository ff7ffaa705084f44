// The Lua heap of a LuaState and the allocation function that enforces its memory limit.
// Internal to the Lua runtime (lua_runtime.h); nothing outside sandbox/lua_*.cc includes it.
//
// Dependencies go one way: lua_allocator.h <- lua_runtime.cc, which hands Allocate to
// lua_newstate with the LuaState as its `ud`.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace rote::sandbox::internal {

// The Lua heap of one state: a private mapping with size-class free lists. Lua passes the old
// size on every free and realloc, so blocks need no headers, and all allocator metadata sits in
// `meta`, which makes a snapshot of (used bytes of the mapping, meta) a complete copy of the
// heap. Freed memory is reused within its size class; the mapping is never returned to the
// system before the state is closed.
struct LuaArena {
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

  ~LuaArena() {
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

// The lua_Alloc of every LuaState (`ud` is the LuaState). It keeps the heap counters, refuses
// growth beyond max_memory_bytes (the limit is sticky: it is hit again at the next instruction
// however the script handles "not enough memory"), charges growth during a call to the
// instruction budget, and pins the string hash seed in lua_newstate's global state.
void* Allocate(void* ud, void* ptr, size_t osize, size_t nsize);

}  // namespace rote::sandbox::internal

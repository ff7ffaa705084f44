// The paged KV cache's bookkeeping: which blocks are free, how many sequences hold each, and the
// prefix cache that lets a new sequence take blocks another one already computed. The engine owns
// this (scheduler thread only); the backend owns the storage the block ids index.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

namespace rote::inference {

class KvBlockManager {
 public:
  explicit KvBlockManager(int32_t num_blocks);

  int32_t num_blocks() const { return static_cast<int32_t>(refs_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_.size() + free_cached_.size()); }

  // A free block with reference count 1; nullopt when none is free. Free blocks the prefix cache
  // does not know go first, lowest id first; only when none is left, the cached free block
  // released longest ago (least recently used). A block taken this way is about to be
  // overwritten, so the prefix cache forgets it (and every block whose key names it as parent).
  // So a cached prefix survives as long as any never-cached block is free: with a KV cache sized
  // to the device, a shared system message outlives the wave of requests that computed it.
  std::optional<int32_t> Allocate();
  void AddRef(int32_t block);
  // Takes a reference on a block that may be free (a cached prefix block whose last user left):
  // a free block leaves the free list with count 1.
  void Revive(int32_t block);
  // Drops one reference; the block is free again at zero (its prefix key stays until it is
  // allocated again). A sequence releases its blocks last first (Scheduler), so its deepest
  // cached block is the least recently used and its first, the parent of the rest, goes last.
  void Release(int32_t block);
  int32_t RefCount(int32_t block) const { return refs_[block]; }

  // Prefix cache. A full block is known by its parent block id (-1 for a sequence's first
  // block) and its kKvBlockSize tokens, so a key names one prefix: equal keys mean equal K/V.
  //
  // Appends to `blocks` the cached blocks that hold the next full blocks of `tokens` after the
  // ones `blocks` already holds (the sequence's first blocks, computed or shared; none at
  // admission), up to `max_blocks` in all, taking a reference on each; stops at the first block
  // not cached. Returns the size of `blocks`.
  int32_t ShareCachedPrefix(std::span<const int32_t> tokens, size_t max_blocks, std::vector<int32_t>* blocks);
  // Records blocks[index], which holds tokens [index * kKvBlockSize, (index + 1) * kKvBlockSize)
  // of a sequence whose block table is `blocks`, as the cached copy of that prefix, unless the
  // block already has a key or another block holds the same prefix (the first one stays).
  // Neither this nor ShareCachedPrefix looks past a released entry (kNoKvBlock, a sliding
  // window's: Scheduler) as a parent.
  void RegisterFullBlock(std::span<const int32_t> tokens, std::span<const int32_t> blocks, size_t index);
  // The number of blocks the prefix cache knows (free or in use).
  size_t cached_blocks() const { return block_keys_.size(); }

 private:
  using Key = std::vector<int32_t>;  // parent block id, then the block's tokens
  static Key BlockKey(std::span<const int32_t> tokens, std::span<const int32_t> blocks, size_t index);
  void ForgetBlock(int32_t block);
  void InsertFree(int32_t block);  // into free_, keeping its order

  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;  // free blocks with no prefix key, sorted descending: back() is the lowest id
  // Free blocks with a prefix key, by release order (a serial number), and each block's serial
  // there (-1: not in it). Deterministic: the order is the engine's sequence of releases.
  std::map<int64_t, int32_t> free_cached_;
  std::vector<int64_t> cached_serial_;
  int64_t next_serial_ = 0;
  // Blocks keep their key after their last user leaves (a cache) until they are allocated again;
  // then their key and every descendant's key are forgotten, so a key never names a block whose
  // content or parent changed.
  std::map<Key, int32_t> prefix_blocks_;
  std::map<int32_t, Key> block_keys_;
  std::multimap<int32_t, int32_t> block_children_;  // parent block -> child blocks with keys
};

}  // namespace rote::inference

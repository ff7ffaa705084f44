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
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }

  // A free block with reference count 1, lowest id first; nullopt when none is free. A block
  // taken this way is about to be overwritten, so the prefix cache forgets it (and every block
  // whose key names it as parent).
  std::optional<int32_t> Allocate();
  void AddRef(int32_t block);
  // Takes a reference on a block that may be free (a cached prefix block whose last user left):
  // a free block leaves the free list with count 1.
  void Revive(int32_t block);
  // Drops one reference; the block is free again at zero (its prefix key stays until it is
  // allocated again).
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
  void RegisterFullBlock(std::span<const int32_t> tokens, std::span<const int32_t> blocks, size_t index);
  // The number of blocks the prefix cache knows (free or in use).
  size_t cached_blocks() const { return block_keys_.size(); }

 private:
  using Key = std::vector<int32_t>;  // parent block id, then the block's tokens
  static Key BlockKey(std::span<const int32_t> tokens, std::span<const int32_t> blocks, size_t index);
  void ForgetBlock(int32_t block);

  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;  // kept sorted descending so back() is the lowest id
  // Blocks keep their key after their last user leaves (a cache) until they are allocated again;
  // then their key and every descendant's key are forgotten, so a key never names a block whose
  // content or parent changed.
  std::map<Key, int32_t> prefix_blocks_;
  std::map<int32_t, Key> block_keys_;
  std::multimap<int32_t, int32_t> block_children_;  // parent block -> child blocks with keys
};

}  // namespace rote::inference

// Which KV-cache blocks are free. The engine owns this; the backend owns the storage.
// Reference counts let a block be shared (prefix sharing) and freed when its last user leaves.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace rote::inference {

class KvBlockManager {
 public:
  explicit KvBlockManager(int32_t num_blocks);

  int32_t num_blocks() const { return static_cast<int32_t>(refs_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }

  // A free block with reference count 1, lowest id first; nullopt when none is free.
  std::optional<int32_t> Allocate();
  void AddRef(int32_t block);
  // Takes a reference on a block that may be free (a cached prefix block whose last user left):
  // a free block leaves the free list with count 1.
  void Revive(int32_t block);
  // Drops one reference; the block is free again at zero.
  void Release(int32_t block);
  int32_t RefCount(int32_t block) const { return refs_[block]; }

 private:
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;  // kept sorted descending so back() is the lowest id
};

}  // namespace rote::inference

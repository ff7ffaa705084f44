#include "inference/kv_block_manager.h"

#include <algorithm>
#include <cstdlib>
#include <functional>

namespace rote::inference {

KvBlockManager::KvBlockManager(int32_t num_blocks) : refs_(num_blocks, 0) {
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

std::optional<int32_t> KvBlockManager::Allocate() {
  if (free_.empty()) return std::nullopt;
  const int32_t b = free_.back();
  free_.pop_back();
  refs_[b] = 1;
  return b;
}

void KvBlockManager::AddRef(int32_t block) {
  if (refs_[block] <= 0) std::abort();  // sharing a free block is a scheduler bug
  ++refs_[block];
}

void KvBlockManager::Revive(int32_t block) {
  if (refs_[block] > 0) {
    ++refs_[block];
    return;
  }
  auto it = std::lower_bound(free_.begin(), free_.end(), block, std::greater<int32_t>());
  if (it == free_.end() || *it != block) std::abort();  // neither used nor free: a bug
  free_.erase(it);
  refs_[block] = 1;
}

void KvBlockManager::Release(int32_t block) {
  if (refs_[block] <= 0) std::abort();  // double free is a scheduler bug
  if (--refs_[block] == 0) {
    free_.insert(std::upper_bound(free_.begin(), free_.end(), block, std::greater<int32_t>()), block);
  }
}

}  // namespace rote::inference

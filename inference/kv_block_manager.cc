#include "inference/kv_block_manager.h"

#include <algorithm>
#include <cstdlib>
#include <functional>

#include "inference/backend.h"

namespace rote::inference {

KvBlockManager::KvBlockManager(int32_t num_blocks) : refs_(num_blocks, 0), cached_serial_(num_blocks, -1) {
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

std::optional<int32_t> KvBlockManager::Allocate() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!free_cached_.empty()) {
    b = free_cached_.begin()->second;
    free_cached_.erase(free_cached_.begin());
    cached_serial_[b] = -1;
  } else {
    return std::nullopt;
  }
  refs_[b] = 1;
  ForgetBlock(b);  // its cached content is about to be overwritten
  return b;
}

void KvBlockManager::InsertFree(int32_t block) {
  free_.insert(std::upper_bound(free_.begin(), free_.end(), block, std::greater<int32_t>()), block);
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
  if (cached_serial_[block] >= 0) {
    free_cached_.erase(cached_serial_[block]);
    cached_serial_[block] = -1;
  } else {
    auto it = std::lower_bound(free_.begin(), free_.end(), block, std::greater<int32_t>());
    if (it == free_.end() || *it != block) std::abort();  // neither used nor free: a bug
    free_.erase(it);
  }
  refs_[block] = 1;
}

void KvBlockManager::Release(int32_t block) {
  if (refs_[block] <= 0) std::abort();  // double free is a scheduler bug
  if (--refs_[block] == 0) {
    if (block_keys_.count(block)) {
      cached_serial_[block] = next_serial_;
      free_cached_.emplace(next_serial_++, block);
    } else {
      InsertFree(block);
    }
  }
}

KvBlockManager::Key KvBlockManager::BlockKey(std::span<const int32_t> tokens, std::span<const int32_t> blocks,
                                             size_t index) {
  Key key;
  key.reserve(kKvBlockSize + 1);
  key.push_back(index == 0 ? -1 : blocks[index - 1]);
  key.insert(key.end(), tokens.begin() + index * kKvBlockSize, tokens.begin() + (index + 1) * kKvBlockSize);
  return key;
}

void KvBlockManager::ForgetBlock(int32_t block) {
  auto it = block_keys_.find(block);
  if (it == block_keys_.end()) return;
  const int32_t parent = it->second[0];
  prefix_blocks_.erase(it->second);
  block_keys_.erase(it);
  if (refs_[block] == 0 && cached_serial_[block] >= 0) {  // free, and nothing to keep any more
    free_cached_.erase(cached_serial_[block]);
    cached_serial_[block] = -1;
    InsertFree(block);
  }
  for (auto [c, end] = block_children_.equal_range(parent); c != end; ++c) {
    if (c->second == block) {
      block_children_.erase(c);
      break;
    }
  }
  std::vector<int32_t> children;
  for (auto [c, end] = block_children_.equal_range(block); c != end; ++c) children.push_back(c->second);
  for (int32_t child : children) ForgetBlock(child);
}

int32_t KvBlockManager::ShareCachedPrefix(std::span<const int32_t> tokens, size_t max_blocks,
                                          std::vector<int32_t>* blocks) {
  for (size_t b = blocks->size(); b < max_blocks; ++b) {
    // A released parent (kNoKvBlock) names no prefix: the key would read as a first block's.
    if (b > 0 && (*blocks)[b - 1] < 0) break;
    auto it = prefix_blocks_.find(BlockKey(tokens, *blocks, b));
    if (it == prefix_blocks_.end()) break;
    Revive(it->second);
    blocks->push_back(it->second);
  }
  return static_cast<int32_t>(blocks->size());
}

void KvBlockManager::RegisterFullBlock(std::span<const int32_t> tokens, std::span<const int32_t> blocks,
                                       size_t index) {
  if (blocks[index] < 0 || (index > 0 && blocks[index - 1] < 0)) return;  // released: no key to give
  if (block_keys_.count(blocks[index])) return;  // already known (a shared block)
  Key key = BlockKey(tokens, blocks, index);
  if (prefix_blocks_.count(key)) return;  // another sequence computed the same prefix first
  prefix_blocks_.emplace(key, blocks[index]);
  block_children_.emplace(key[0], blocks[index]);
  block_keys_.emplace(blocks[index], std::move(key));
}

}  // namespace rote::inference

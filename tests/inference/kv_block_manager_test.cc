// The KV block manager alone: uncached blocks come lowest id first and cached free ones least
// recently released first, reference counts free a block at zero, and the prefix cache finds a
// computed prefix by its parent block and tokens, keeps it after its last user leaves, and
// forgets it (with every block keyed under it) once the block is allocated again.
#include "inference/kv_block_manager.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "inference/backend.h"

namespace rote::inference {
namespace {

// `blocks` full blocks of tokens first, first+1, ...
std::vector<int32_t> Tokens(int32_t blocks, int32_t first = 0) {
  std::vector<int32_t> t(static_cast<size_t>(blocks) * kKvBlockSize);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Allocates one block per full block of `tokens` and registers each in the prefix cache.
std::vector<int32_t> Compute(KvBlockManager& m, const std::vector<int32_t>& tokens) {
  std::vector<int32_t> blocks;
  for (size_t b = 0; b < tokens.size() / kKvBlockSize; ++b) {
    blocks.push_back(*m.Allocate());
    m.RegisterFullBlock(tokens, blocks, b);
  }
  return blocks;
}

TEST(KvBlockManagerTest, AllocatesLowestFirstAndFreesAtZero) {
  KvBlockManager m(3);
  EXPECT_EQ(m.num_blocks(), 3);
  EXPECT_EQ(m.num_free(), 3);
  EXPECT_EQ(m.Allocate(), 0);
  EXPECT_EQ(m.Allocate(), 1);
  EXPECT_EQ(m.Allocate(), 2);
  EXPECT_EQ(m.Allocate(), std::nullopt);
  EXPECT_EQ(m.num_free(), 0);

  m.AddRef(1);
  EXPECT_EQ(m.RefCount(1), 2);
  m.Release(1);
  EXPECT_EQ(m.RefCount(1), 1);
  EXPECT_EQ(m.num_free(), 0);
  m.Release(2);
  m.Release(1);
  EXPECT_EQ(m.num_free(), 2);
  EXPECT_EQ(m.RefCount(1), 0);
  EXPECT_EQ(m.Allocate(), 1);  // the lowest free id, not the last released
  EXPECT_EQ(m.Allocate(), 2);
}

TEST(KvBlockManagerTest, ReviveTakesAFreeBlockOffTheFreeList) {
  KvBlockManager m(4);
  ASSERT_EQ(m.Allocate(), 0);
  m.Revive(2);  // free: leaves the free list with one reference
  EXPECT_EQ(m.RefCount(2), 1);
  EXPECT_EQ(m.num_free(), 2);
  m.Revive(2);  // in use: one more reference
  EXPECT_EQ(m.RefCount(2), 2);
  EXPECT_EQ(m.Allocate(), 1);
  EXPECT_EQ(m.Allocate(), 3);
  EXPECT_EQ(m.Allocate(), std::nullopt);
}

TEST(KvBlockManagerTest, SharesTheLongestCachedPrefix) {
  KvBlockManager m(8);
  const std::vector<int32_t> a = Tokens(3);
  const std::vector<int32_t> a_blocks = Compute(m, a);
  ASSERT_EQ(a_blocks, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(m.cached_blocks(), 3u);

  // Same first two blocks, a different third: two blocks shared, a reference taken on each.
  std::vector<int32_t> b = Tokens(2);
  const std::vector<int32_t> tail = Tokens(1, 1000);
  b.insert(b.end(), tail.begin(), tail.end());
  std::vector<int32_t> b_blocks;
  EXPECT_EQ(m.ShareCachedPrefix(b, 3, &b_blocks), 2);
  EXPECT_EQ(b_blocks, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(m.RefCount(0), 2);
  EXPECT_EQ(m.RefCount(1), 2);
  EXPECT_EQ(m.RefCount(2), 1);

  // At most max_blocks.
  std::vector<int32_t> c_blocks;
  EXPECT_EQ(m.ShareCachedPrefix(a, 1, &c_blocks), 1);
  EXPECT_EQ(c_blocks, (std::vector<int32_t>{0}));

  // A different first block shares nothing, even when later tokens match: keys chain on the parent.
  std::vector<int32_t> d = Tokens(1, 500);
  d.insert(d.end(), a.begin() + kKvBlockSize, a.end());
  std::vector<int32_t> d_blocks;
  EXPECT_EQ(m.ShareCachedPrefix(d, 3, &d_blocks), 0);
  EXPECT_TRUE(d_blocks.empty());
}

TEST(KvBlockManagerTest, ReleasedBlocksStayCachedUntilReallocated) {
  KvBlockManager m(4);
  const std::vector<int32_t> a = Tokens(2);
  for (int32_t b : Compute(m, a)) m.Release(b);
  EXPECT_EQ(m.num_free(), 4);
  EXPECT_EQ(m.cached_blocks(), 2u);

  std::vector<int32_t> again;
  EXPECT_EQ(m.ShareCachedPrefix(a, 2, &again), 2);  // revived from the free list
  EXPECT_EQ(again, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(m.num_free(), 2);
  for (int32_t b : again) m.Release(b);

  // Free blocks the cache does not know go first, so the prefix survives them.
  EXPECT_EQ(m.Allocate(), 2);
  EXPECT_EQ(m.Allocate(), 3);
  EXPECT_EQ(m.cached_blocks(), 2u);
  // Then the cached block released longest ago: block 0 (released before 1 here) overwrites the
  // first block, and its key and its child's go; the orphaned child is free and uncached.
  EXPECT_EQ(m.Allocate(), 0);
  EXPECT_EQ(m.cached_blocks(), 0u);
  std::vector<int32_t> none;
  EXPECT_EQ(m.ShareCachedPrefix(a, 2, &none), 0);
  EXPECT_EQ(m.RefCount(1), 0);  // the orphaned child was not revived
  EXPECT_EQ(m.num_free(), 1);
  EXPECT_EQ(m.Allocate(), 1);
  EXPECT_EQ(m.Allocate(), std::nullopt);
}

// Eviction is least recently released first. Released last block first, as the scheduler
// releases a sequence's blocks, a prefix loses its deepest block first and keeps the blocks it
// hangs from; a block revived and released again is the most recently used.
TEST(KvBlockManagerTest, EvictsTheLeastRecentlyReleasedCachedBlock) {
  KvBlockManager m(5);
  const std::vector<int32_t> a = Tokens(3);
  const std::vector<int32_t> blocks = Compute(m, a);  // 0, 1, 2
  ASSERT_EQ(blocks, (std::vector<int32_t>{0, 1, 2}));
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) m.Release(*b);  // 2, 1, 0
  EXPECT_EQ(m.num_free(), 5);
  EXPECT_EQ(m.Allocate(), 3);  // uncached first
  EXPECT_EQ(m.Allocate(), 4);
  EXPECT_EQ(m.Allocate(), 2);  // then the deepest block, released first
  EXPECT_EQ(m.cached_blocks(), 2u);
  std::vector<int32_t> shared;
  EXPECT_EQ(m.ShareCachedPrefix(a, 3, &shared), 2);  // the first two blocks survive
  EXPECT_EQ(shared, (std::vector<int32_t>{0, 1}));
  m.Release(shared[1]);  // released again, 1 before 0: 1 is now the oldest
  m.Release(shared[0]);
  EXPECT_EQ(m.Allocate(), 1);  // released before 0 this time
  EXPECT_EQ(m.cached_blocks(), 1u);
  std::vector<int32_t> first;
  EXPECT_EQ(m.ShareCachedPrefix(a, 3, &first), 1);
  EXPECT_EQ(first, (std::vector<int32_t>{0}));
}

TEST(KvBlockManagerTest, TheFirstBlockToComputeAPrefixKeepsIt) {
  KvBlockManager m(4);
  const std::vector<int32_t> a = Tokens(1);
  const std::vector<int32_t> first = Compute(m, a);
  const std::vector<int32_t> second = Compute(m, a);  // computed again elsewhere
  ASSERT_EQ(first, (std::vector<int32_t>{0}));
  ASSERT_EQ(second, (std::vector<int32_t>{1}));
  EXPECT_EQ(m.cached_blocks(), 1u);
  std::vector<int32_t> shared;
  EXPECT_EQ(m.ShareCachedPrefix(a, 1, &shared), 1);
  EXPECT_EQ(shared, first);

  // Registering a block again changes nothing.
  m.RegisterFullBlock(a, first, 0);
  EXPECT_EQ(m.cached_blocks(), 1u);
}

// A sliding window's released entry (kNoKvBlock) is no parent: a key built on it would read as a
// sequence's first block, and the block of another prompt with those tokens would be shared.
TEST(KvBlockManagerTest, AReleasedParentNamesNoPrefix) {
  KvBlockManager m(8);
  const std::vector<int32_t> first = Tokens(1, 500);
  ASSERT_EQ(Compute(m, first), (std::vector<int32_t>{0}));  // a prompt that starts with 500..515
  // Another sequence whose second block holds 500..515, its first block released.
  std::vector<int32_t> tokens = Tokens(1);
  tokens.insert(tokens.end(), first.begin(), first.end());
  std::vector<int32_t> blocks = {kNoKvBlock};
  EXPECT_EQ(m.ShareCachedPrefix(tokens, 2, &blocks), 1);
  EXPECT_EQ(blocks, (std::vector<int32_t>{kNoKvBlock}));
  EXPECT_EQ(m.RefCount(0), 1);
  // Nor is a block after a released one registered under it.
  blocks.push_back(*m.Allocate());
  m.RegisterFullBlock(tokens, blocks, 1);
  EXPECT_EQ(m.cached_blocks(), 1u);
  m.RegisterFullBlock(tokens, blocks, 0);  // the released entry itself
  EXPECT_EQ(m.cached_blocks(), 1u);
}

}  // namespace
}  // namespace rote::inference

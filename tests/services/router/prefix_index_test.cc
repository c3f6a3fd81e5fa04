#include "services/router/prefix_index.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace oscarkv::router {
namespace {

using kvformat::BlockKey;

std::vector<BlockKey> RandomKeys(std::mt19937_64& rng, int n) {
  std::vector<BlockKey> keys(n);
  for (BlockKey& k : keys) k = {rng(), rng()};
  return keys;
}

TEST(PrefixIndex, MatchCountsLeadingKeysAndStopsAtFirstMiss) {
  std::mt19937_64 rng(7);
  const std::vector<BlockKey> chain = RandomKeys(rng, 10);
  PrefixIndex index;
  index.Add("w0", std::span(chain).first(6));
  EXPECT_EQ(index.MatchedBlocks("w0", chain), 6);
  EXPECT_EQ(index.MatchedBlocks("w1", chain), 0);
  // A hole at block 2 cuts the usable prefix there, even though later keys are present.
  const BlockKey hole[] = {chain[2]};
  index.Remove("w0", hole);
  EXPECT_EQ(index.MatchedBlocks("w0", chain), 2);
  EXPECT_EQ(index.HolderSize("w0"), 5u);
}

TEST(PrefixIndex, MatchAllListsOnlyHoldersWithAMatch) {
  std::mt19937_64 rng(8);
  const std::vector<BlockKey> chain = RandomKeys(rng, 8);
  const std::vector<BlockKey> other = RandomKeys(rng, 8);
  PrefixIndex index;
  index.Add("a", std::span(chain).first(3));
  index.Add("b", chain);
  index.Add("c", other);
  const auto m = index.MatchAll(chain);
  EXPECT_EQ(m.size(), 2u);
  EXPECT_EQ(m.at("a"), 3);
  EXPECT_EQ(m.at("b"), 8);
  index.Clear("b");
  EXPECT_EQ(index.MatchAll(chain).count("b"), 0u);
}

TEST(PrefixIndex, BoundedPerHolderDropsOldestFirst) {
  std::mt19937_64 rng(9);
  const std::vector<BlockKey> keys = RandomKeys(rng, 100);
  PrefixIndex index(/*max_keys_per_holder=*/32);
  index.Add("w", keys);
  EXPECT_EQ(index.HolderSize("w"), 32u);
  // The newest 32 survive.
  EXPECT_EQ(index.MatchedBlocks("w", std::span(keys).subspan(68)), 32);
  EXPECT_EQ(index.MatchedBlocks("w", keys), 0);
  // Churn (add/remove many times) keeps the bound and the answers right.
  for (int round = 0; round < 50; ++round) {
    const std::vector<BlockKey> batch = RandomKeys(rng, 10);
    index.Add("w", batch);
    index.Remove("w", std::span(batch).first(5));
    EXPECT_LE(index.HolderSize("w"), 32u);
    EXPECT_EQ(index.MatchedBlocks("w", std::span(batch).subspan(5)), 5);
  }
}

}  // namespace
}  // namespace oscarkv::router

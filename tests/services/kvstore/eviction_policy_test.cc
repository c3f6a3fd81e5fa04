#include "services/kvstore/eviction_policy.h"

#include "gtest/gtest.h"

namespace oscarkv::kvstore {
namespace {

kvformat::BlockKey K(uint64_t i) { return {i, ~i}; }
bool Any(const kvformat::BlockKey&) { return true; }

TEST(LruEvictionPolicy, EvictsLeastRecentlyUsedFirst) {
  LruEvictionPolicy lru;
  for (uint64_t i = 1; i <= 4; ++i) lru.OnInsert(K(i));
  EXPECT_EQ(lru.NextVictim(Any), K(1));
  lru.OnAccess(K(1));  // 2 3 4 1
  EXPECT_EQ(lru.NextVictim(Any), K(2));
  lru.OnRemove(K(2));  // 3 4 1
  EXPECT_EQ(lru.NextVictim(Any), K(3));
  lru.OnInsert(K(3));  // re-insert refreshes: 4 1 3
  EXPECT_EQ(lru.NextVictim(Any), K(4));
  EXPECT_EQ(lru.size(), 3u);
}

TEST(LruEvictionPolicy, SkipsKeysThePredicateRefuses) {
  LruEvictionPolicy lru;
  for (uint64_t i = 1; i <= 3; ++i) lru.OnInsert(K(i));
  auto not_one_or_two = [](const kvformat::BlockKey& k) { return k.lo > 2; };
  EXPECT_EQ(lru.NextVictim(not_one_or_two), K(3));
  auto none = [](const kvformat::BlockKey&) { return false; };
  EXPECT_FALSE(lru.NextVictim(none).has_value());
  lru.OnRemove(K(99));  // unknown: ignored
  lru.OnAccess(K(99));
  EXPECT_EQ(lru.size(), 3u);
}

}  // namespace
}  // namespace oscarkv::kvstore

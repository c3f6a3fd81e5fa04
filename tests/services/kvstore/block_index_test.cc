#include "services/kvstore/block_index.h"

#include "gtest/gtest.h"

namespace oscarkv::kvstore {
namespace {

kvformat::BlockKey K(uint64_t i) { return {i, i + 100}; }
BlockMeta Meta(uint64_t i, kvformat::CodecId codec = kvformat::CodecId::kOscar,
               uint64_t payload = 1000) {
  BlockMeta m;
  m.key = K(i);
  m.codec = codec;
  m.payload_bytes = payload;
  return m;
}

TEST(BlockIndex, LongestCommittedPrefixStopsAtFirstGapOrReservation) {
  BlockIndex index;
  const absl::Time t = absl::InfiniteFuture();
  for (uint64_t i = 1; i <= 5; ++i) ASSERT_TRUE(index.Reserve(Meta(i), {i * 4096, 4096}, t).ok());
  for (uint64_t i : {1, 2, 3, 5}) ASSERT_TRUE(index.Commit(K(i), 0).ok());
  const std::vector<kvformat::BlockKey> chain = {K(1), K(2), K(3), K(4), K(5)};
  EXPECT_EQ(index.LongestCommittedPrefix(chain), 3u);  // 4 is only reserved
  const std::vector<kvformat::BlockKey> other = {K(9), K(1)};
  EXPECT_EQ(index.LongestCommittedPrefix(other), 0u);
  EXPECT_EQ(index.committed_blocks(), 4u);
  EXPECT_EQ(index.reserved_blocks(), 1u);
}

TEST(BlockIndex, StatesAndErrors) {
  BlockIndex index;
  ASSERT_TRUE(index.Reserve(Meta(1), {0, 2048}, absl::InfiniteFuture()).ok());
  EXPECT_EQ(index.Reserve(Meta(1), {0, 2048}, absl::InfiniteFuture()).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(index.Commit(K(2), 0).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(index.Commit(K(1), 0).ok());
  EXPECT_EQ(index.Commit(K(1), 0).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_NE(index.Find(K(1)), nullptr);
  EXPECT_EQ(index.Find(K(1))->state, EntryState::kCommitted);
  auto removed = index.Remove(K(1));
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(removed->slot.length, 2048u);
  EXPECT_EQ(index.Find(K(1)), nullptr);
  EXPECT_EQ(index.Remove(K(1)).status().code(), absl::StatusCode::kNotFound);
}

TEST(BlockIndex, ExpiredReservationsAndCodecTotals) {
  BlockIndex index;
  const absl::Time now = absl::FromUnixSeconds(100);
  ASSERT_TRUE(index.Reserve(Meta(1, kvformat::CodecId::kOscar, 1000), {0, 1}, now).ok());
  ASSERT_TRUE(
      index.Reserve(Meta(2, kvformat::CodecId::kKivi2, 3000), {1, 1}, now + absl::Seconds(5))
          .ok());
  ASSERT_TRUE(index.Reserve(Meta(3, kvformat::CodecId::kOscar, 500), {2, 1}, now).ok());
  ASSERT_TRUE(index.Commit(K(3), 9000).ok());
  const auto expired = index.ExpiredReservations(now);
  ASSERT_EQ(expired.size(), 1u);  // K(3) is committed, K(2) not yet expired
  EXPECT_EQ(expired[0], K(1));
  ASSERT_TRUE(index.Commit(K(2), 20000).ok());
  EXPECT_EQ(index.totals(kvformat::CodecId::kOscar).blocks, 1u);
  EXPECT_EQ(index.totals(kvformat::CodecId::kOscar).stored_bytes, 128u + 500u);
  EXPECT_EQ(index.totals(kvformat::CodecId::kOscar).bf16_equivalent_bytes, 9000u);
  EXPECT_EQ(index.totals(kvformat::CodecId::kKivi2).stored_bytes, 128u + 3000u);
  ASSERT_TRUE(index.Remove(K(2)).ok());
  EXPECT_EQ(index.totals(kvformat::CodecId::kKivi2).blocks, 0u);
  EXPECT_EQ(index.totals(kvformat::CodecId::kKivi2).stored_bytes, 0u);
}

}  // namespace
}  // namespace oscarkv::kvstore

#include "services/kvstore/lease_table.h"

#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"

namespace oscarkv::kvstore {
namespace {

kvformat::BlockKey K(uint64_t i) { return {i, i * 7}; }

TEST(LeaseTable, ExpiredPinIsReleased) {
  oscarkv::testing::FakeClock clock;
  LeaseTable table;
  const std::vector<kvformat::BlockKey> keys = {K(1), K(2)};
  table.Pin("s1", keys, absl::Seconds(30), clock.Now());
  EXPECT_TRUE(table.IsProtected(K(1), clock.Now()));
  clock.Advance(absl::Seconds(29));
  EXPECT_TRUE(table.IsProtected(K(2), clock.Now()));
  clock.Advance(absl::Seconds(1));
  EXPECT_FALSE(table.IsProtected(K(1), clock.Now()));  // TTL ends exactly at 30 s
  EXPECT_EQ(table.pin_count(), 2u);
  table.ExpireUntil(clock.Now());
  EXPECT_EQ(table.pin_count(), 0u);
}

TEST(LeaseTable, RepinExtendsAndReleaseEndsEarly) {
  oscarkv::testing::FakeClock clock;
  LeaseTable table;
  const std::vector<kvformat::BlockKey> keys = {K(1), K(2), K(3)};
  table.Pin("s1", keys, absl::Seconds(10), clock.Now());
  table.Pin("s1", std::vector{K(1)}, absl::Seconds(100), clock.Now());
  table.Pin("s2", std::vector{K(3)}, absl::Seconds(100), clock.Now());
  clock.Advance(absl::Seconds(50));
  EXPECT_TRUE(table.IsProtected(K(1), clock.Now()));
  EXPECT_FALSE(table.IsProtected(K(2), clock.Now()));
  EXPECT_TRUE(table.IsProtected(K(3), clock.Now()));  // s2's pin
  EXPECT_EQ(table.ReleasePins("s1", std::vector{K(1)}), 1u);
  EXPECT_FALSE(table.IsProtected(K(1), clock.Now()));
  EXPECT_EQ(table.ReleasePins("s2", {}), 1u);
  EXPECT_FALSE(table.IsProtected(K(3), clock.Now()));
  EXPECT_EQ(table.ReleasePins("nobody", {}), 0u);
}

TEST(LeaseTable, ReadLeasesProtectUntilReleasedOrExpired) {
  oscarkv::testing::FakeClock clock;
  LeaseTable table;
  const uint64_t a = table.AddReadLease(std::vector{K(1), K(2)}, absl::Seconds(5), clock.Now());
  const uint64_t b = table.AddReadLease(std::vector{K(2)}, absl::Seconds(60), clock.Now());
  EXPECT_NE(a, b);
  EXPECT_TRUE(table.IsProtected(K(1), clock.Now()));
  EXPECT_TRUE(table.ReleaseReadLease(a));
  EXPECT_FALSE(table.ReleaseReadLease(a));
  EXPECT_FALSE(table.IsProtected(K(1), clock.Now()));
  EXPECT_TRUE(table.IsProtected(K(2), clock.Now()));
  clock.Advance(absl::Seconds(61));
  EXPECT_FALSE(table.IsProtected(K(2), clock.Now()));
  table.ExpireUntil(clock.Now());
  EXPECT_EQ(table.read_lease_count(), 0u);
}

TEST(LeaseTable, ForgetKeyDropsItsPinsAndLeases) {
  oscarkv::testing::FakeClock clock;
  LeaseTable table;
  table.Pin("s", std::vector{K(1), K(2)}, absl::Seconds(10), clock.Now());
  table.AddReadLease(std::vector{K(1)}, absl::Seconds(10), clock.Now());
  table.ForgetKey(K(1));
  EXPECT_FALSE(table.IsProtected(K(1), clock.Now()));
  EXPECT_TRUE(table.IsProtected(K(2), clock.Now()));
  EXPECT_EQ(table.pin_count(), 1u);
}

}  // namespace
}  // namespace oscarkv::kvstore

// OutboxRing: entries never overlap, the oldest go first, alignment holds, expiry drops.
#include "services/prefill/outbox_ring.h"

#include <map>
#include <random>

#include <gtest/gtest.h>

namespace oscarkv::prefill {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(OutboxRingTest, PlacesInOrderAndWrapsDroppingTheOldest) {
  OutboxRing ring(1000, 128);
  EXPECT_EQ(ring.Place(1, 250, kT0 + absl::Seconds(10)), 0u);
  EXPECT_EQ(ring.Place(2, 250, kT0 + absl::Seconds(10)), 256u);  // aligned up from 250
  EXPECT_EQ(ring.Place(3, 300, kT0 + absl::Seconds(10)), 512u);
  // 896 + 200 > 1000: wraps to 0 and drops entry 1 (the only one in [0, 200)).
  EXPECT_EQ(ring.Place(4, 200, kT0 + absl::Seconds(10)), 0u);
  EXPECT_FALSE(ring.Contains(1));
  EXPECT_TRUE(ring.Contains(2));
  EXPECT_TRUE(ring.Contains(3));
  EXPECT_EQ(ring.used_bytes(), 750u);
  EXPECT_EQ(ring.Place(5, 1001, kT0), std::nullopt);
  EXPECT_EQ(ring.Place(6, 0, kT0), std::nullopt);
  // The whole ring: everything else goes.
  EXPECT_EQ(ring.Place(7, 1000, kT0 + absl::Seconds(10)), 0u);
  EXPECT_EQ(ring.entries(), 1u);
}

TEST(OutboxRingTest, ExpiredEntriesAreDropped) {
  OutboxRing ring(1000);
  ring.Place(1, 100, kT0 + absl::Seconds(1));
  ring.Place(2, 100, kT0 + absl::Seconds(5));
  EXPECT_EQ(ring.DropExpired(kT0 + absl::Seconds(2)), 1);
  EXPECT_FALSE(ring.Contains(1));
  EXPECT_TRUE(ring.Contains(2));
}

TEST(OutboxRingTest, RandomPlacementsNeverOverlapLiveEntries) {
  std::mt19937 rng(3);
  OutboxRing ring(1 << 20, 256);
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> placed;  // id -> [offset, end)
  for (uint64_t id = 1; id <= 2000; ++id) {
    const uint64_t bytes = 1 + rng() % (300 << 10);
    std::optional<uint64_t> at = ring.Place(id, bytes, kT0 + absl::Hours(1));
    ASSERT_TRUE(at.has_value());
    EXPECT_EQ(*at % 256, 0u);
    EXPECT_LE(*at + bytes, uint64_t{1} << 20);
    placed[id] = {*at, *at + bytes};
    for (const auto& [other, range] : placed) {
      if (other == id || !ring.Contains(other)) continue;
      EXPECT_TRUE(range.second <= *at || *at + bytes <= range.first)
          << "entry " << id << " overlaps live entry " << other;
    }
  }
}

}  // namespace
}  // namespace oscarkv::prefill

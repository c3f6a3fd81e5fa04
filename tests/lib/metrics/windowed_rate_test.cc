#include "lib/metrics/windowed_rate.h"

#include "gtest/gtest.h"

namespace oscarkv::metrics {
namespace {

TEST(WindowedRate, ZeroUntilTwoSamples) {
  WindowedRate rate(absl::Seconds(10));
  EXPECT_EQ(rate.PerSecond(), 0);
  rate.Sample(100, absl::UnixEpoch());
  EXPECT_EQ(rate.PerSecond(), 0);
  rate.Sample(150, absl::UnixEpoch() + absl::Seconds(1));
  EXPECT_DOUBLE_EQ(rate.PerSecond(), 50);
}

// The rate covers the last window only, whoever reads it and how often.
TEST(WindowedRate, CoversTheLastWindow) {
  WindowedRate rate(absl::Seconds(10));
  const absl::Time t0 = absl::UnixEpoch();
  uint64_t count = 0;
  for (int s = 0; s <= 30; ++s) {
    rate.Sample(count, t0 + absl::Seconds(s));
    count += s < 20 ? 100 : 10;  // 100/s for 20 s, then 10/s
    if (s == 0) continue;
    EXPECT_GT(rate.PerSecond(), 0) << s;  // reading does not reset anything
    EXPECT_GT(rate.PerSecond(), 0) << s;
  }
  EXPECT_DOUBLE_EQ(rate.PerSecond(), 10);  // seconds 20..30
}

TEST(WindowedRate, IdleAfterWorkReadsZero) {
  WindowedRate rate(absl::Seconds(5));
  const absl::Time t0 = absl::UnixEpoch();
  rate.Sample(0, t0);
  rate.Sample(500, t0 + absl::Seconds(1));
  for (int s = 2; s <= 8; ++s) rate.Sample(500, t0 + absl::Seconds(s));
  EXPECT_EQ(rate.PerSecond(), 0);
}

}  // namespace
}  // namespace oscarkv::metrics

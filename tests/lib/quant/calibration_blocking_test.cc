// Eigen blocks its matrix products by the cache sizes it reads from the CPU, and the blocking
// decides how the sums over 2048 tokens are grouped: an Intel Xeon's sizes gave other calibration
// bytes than an AMD EPYC's (docs/DECISIONS.md 2026-12-07). lib/quant pins fixed sizes before its
// products. This binary (its own process: the pin is set once) reports other sizes first, as
// another CPU would, and checks that calibration puts the fixed ones back.
#include <Eigen/Core>

#include "gtest/gtest.h"
#include "lib/quant/calibration.h"

namespace oscarkv::quant {
namespace {

TEST(CalibrationBlocking, AccumulatorPinsEigenCacheSizes) {
  Eigen::setCpuCacheSizes(std::ptrdiff_t{48} << 10, std::ptrdiff_t{2} << 20,
                          std::ptrdiff_t{105} << 20);
  ASSERT_EQ(Eigen::l1CacheSize(), std::ptrdiff_t{48} << 10);
  auto acc = CovarianceAccumulator::Create(/*q_heads=*/9, /*kv_heads=*/3, /*head_dim=*/64);
  ASSERT_TRUE(acc.ok()) << acc.status();
  EXPECT_EQ(Eigen::l1CacheSize(), std::ptrdiff_t{32} << 10);
  EXPECT_EQ(Eigen::l2CacheSize(), std::ptrdiff_t{512} << 10);
  EXPECT_EQ(Eigen::l3CacheSize(), std::ptrdiff_t{256} << 20);
}

}  // namespace
}  // namespace oscarkv::quant

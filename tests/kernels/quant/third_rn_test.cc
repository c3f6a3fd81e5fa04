// ThirdRn (kernels/quant/third_rn.h) against the IEEE division x / 3.0f, bit for bit: every
// mantissa of the binades at both ends of its range and of [1, 2) (its steps scale by powers of
// two in between), and the fp16 scale above the range, where the kernels clamp.
#include "kernels/quant/third_rn.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "gtest/gtest.h"
#include "lib/kvformat/float16.h"

namespace oscarkv::kernels::int2_bounds {
namespace {

using kvformat::BitsFloat;
using kvformat::FloatBits;

// Mismatches of ThirdRn over every float of the binade that holds `in`.
int64_t BinadeMismatches(float in) {
  const uint32_t first = FloatBits(in) & 0xff800000u;
  int64_t bad = 0;
  for (uint32_t m = 0; m < (1u << 23); ++m) {
    const float x = BitsFloat(first | m);
    if (FloatBits(ThirdRn(x)) != FloatBits(x / 3.0f)) ++bad;
  }
  return bad;
}

TEST(ThirdRn, MatchesDivisionOnEveryMantissa) {
  EXPECT_EQ(BinadeMismatches(kThirdRnMin), 0);
  EXPECT_EQ(BinadeMismatches(1.0f), 0);
  EXPECT_EQ(BinadeMismatches(kThirdRnMax), 0);
}

TEST(ThirdRn, NaiveReciprocalIsNotEnough) {
  // The correction step matters: x * fl(1/3) alone is off for some mantissas.
  int64_t off = 0;
  for (uint32_t m = 0; m < (1u << 23); ++m) {
    const float x = BitsFloat(0x3f800000u | m);
    if (FloatBits(x * 0x1.555556p-2f) != FloatBits(x / 3.0f)) ++off;
  }
  EXPECT_GT(off, 0);
}

TEST(ThirdRn, ScaleAboveTheRangeIsAnFp16InfEitherWay) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(kvformat::FloatToHalfBits(ThirdRn(kThirdRnMax)), kvformat::FloatToHalfBits(inf / 3.0f));
  EXPECT_EQ(kvformat::FloatToHalfBits(ThirdRn(kThirdRnMax)), 0x7c00u);
}

}  // namespace
}  // namespace oscarkv::kernels::int2_bounds

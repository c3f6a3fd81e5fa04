// GpuDecodePlanConfig's choices on the H200's 132 SMs (a host function: no GPU needed). The
// thresholds come from same-run measurements (bench/NOTES.md "v14 plan", "v15 plan"); this pins
// the shapes those runs decided.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/attention/decode_attention.h"
#include "kernels/attention/decode_attention_cuda.h"

namespace oscarkv::kernels {
namespace {

constexpr int kSms = 132;

DecodePlan Plan(int b, int hq, int hkv, int d, int int2_tokens) {
  const DecodePlanConfig config = GpuDecodePlanConfig(b, hkv, hq, d, int2_tokens, kSms);
  const std::vector<int32_t> bf16(b, 320), int2(b, int2_tokens);
  return PlanDecodeAttention(config, b, bf16.data(), int2.data());
}

bool Fused(const DecodePlan& plan) {
  return plan.work.front().tier == static_cast<int32_t>(Tier::kInt2WithBf16);
}

TEST(GpuDecodePlan, FewPairsFuseTheBf16TierUnlessTheSplitsAreBalanced) {
  // D=128, Hq=32, Hkv=8, B=1: 8 pairs, a wave of 2 CTAs per SM = 33 CTAs per pair.
  const DecodePlan short_ctx = Plan(1, 32, 8, 128, 8192 - 320);
  EXPECT_TRUE(Fused(short_ctx));  // the BF16 split would be the long pole
  const DecodePlan mid = Plan(1, 32, 8, 128, 32768 - 320);
  EXPECT_FALSE(Fused(mid));  // separate splits are balanced
  EXPECT_EQ(mid.num_work(), 31 + 2);
  const DecodePlan long_ctx = Plan(1, 32, 8, 128, 131072 - 320);
  EXPECT_TRUE(Fused(long_ctx));  // every CTA streams INT2
  EXPECT_EQ(long_ctx.num_work(), 33);
  // D=64, Hq=9, Hkv=3 (the default model): fused at 32k, separate at 128k.
  EXPECT_TRUE(Fused(Plan(1, 9, 3, 64, 32768 - 320)));
  EXPECT_FALSE(Fused(Plan(1, 9, 3, 64, 131072 - 320)));
}

TEST(GpuDecodePlan, ManyPairsGetOneFusedSplitPerSequence) {
  const DecodePlan plan = Plan(32, 32, 8, 128, 8192 - 320);
  EXPECT_TRUE(Fused(plan));
  EXPECT_TRUE(plan.OneSplitPerSequence());
  EXPECT_FALSE(Plan(1, 32, 8, 128, 8192 - 320).OneSplitPerSequence());
}

}  // namespace
}  // namespace oscarkv::kernels

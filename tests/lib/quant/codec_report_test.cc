// Tests of MeasureReconstruction and SyntheticActivations (lib/quant/codec_report.h,
// lib/quant/synthetic_activations.h).
#include "lib/quant/codec_report.h"

#include "gtest/gtest.h"
#include "lib/quant/synthetic_activations.h"

namespace oscarkv::quant {
namespace {

TEST(SyntheticActivations, DeterministicAndShaped) {
  const LayerActivations a = SyntheticActivations(40, 6, 2, 64, 9);
  const LayerActivations b = SyntheticActivations(40, 6, 2, 64, 9);
  EXPECT_EQ(a.q.size(), 40u * 6 * 64);
  EXPECT_EQ(a.k.size(), 40u * 2 * 64);
  EXPECT_EQ(a.q, b.q);
  EXPECT_EQ(a.v, b.v);
  EXPECT_NE(SyntheticActivations(40, 6, 2, 64, 10).k, a.k);
}

TEST(MeasureReconstruction, OrdersCodecsAsExpectedOnSyntheticK) {
  const LayerActivations a = SyntheticActivations(256, 4, 2, 128, 4);
  auto measure = [&](std::string_view name) {
    auto codec = Codec::Create(name, 128);
    EXPECT_TRUE(codec.ok()) << codec.status();
    auto e = MeasureReconstruction(**codec, KvSide::kKey, a.k, a.tokens, a.kv_heads);
    EXPECT_TRUE(e.ok()) << e.status();
    return *e;
  };
  const ReconstructionError bf16 = measure("bf16");
  const ReconstructionError naive = measure("int2-naive");
  const ReconstructionError hclip = measure("oscar-hadamard");
  const ReconstructionError tns = measure("oscar-tns");
  EXPECT_LT(bf16.rel_frobenius, 4e-3);
  EXPECT_GT(bf16.mean_cosine, 0.9999);
  EXPECT_EQ(bf16.bits_per_element, 16.0);
  EXPECT_EQ(naive.bits_per_element, 2.25);
  EXPECT_EQ(tns.bits_per_element, 3.0);
  EXPECT_EQ(naive.tokens, 256);
  // Rotation + clip beats naive per-token INT2 on K with offset channels (quant.md A.10 shape).
  EXPECT_LT(hclip.rel_frobenius, naive.rel_frobenius);
  EXPECT_GT(hclip.mean_cosine, naive.mean_cosine);
  EXPECT_GT(naive.max_abs, 0.0);
  auto codec = Codec::Create("int2-naive", 128);
  EXPECT_FALSE(MeasureReconstruction(**codec, KvSide::kKey, std::span(a.k).first(100), 16, 2).ok());
}

}  // namespace
}  // namespace oscarkv::quant

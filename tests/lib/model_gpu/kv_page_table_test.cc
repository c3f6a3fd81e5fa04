#include "lib/model_gpu/kv_page_table.h"

#include <set>

#include "gtest/gtest.h"
#include "lib/quant/codec_spec.h"
#include "lib/quant/three_tier_cache.h"

namespace oscarkv::model_gpu {
namespace {

KvPageTableConfig Windowed(int64_t budget = int64_t{1} << 30) {
  KvPageTableConfig c;
  c.num_layers = 4;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.windowed = true;
  c.budget_bytes = budget;
  c.bf16_pages = 1000;
  c.int2_pages = 4000;
  return c;
}

TEST(KvPageTableTest, PageBytesFollowTheUnitLayout) {
  const KvPageTableConfig c = Windowed();
  EXPECT_EQ(Bf16PageBytes(c), 4 * 2 * 2 * 8 * 64 * 2);       // L*Hkv*(K+V)*8 tokens*D*2 B
  EXPECT_EQ(Int2PageBytes(c), 4 * 2 * 2 * (8 * 16 + 8 * 4));  // codes + fp16 scale/min
}

// The tiers after prefill + token-by-token decode equal lib/quant's windows for oscar.
TEST(KvPageTableTest, TiersMatchThreeTierWindows) {
  const quant::CodecSpec& oscar = quant::GetCodecSpec(kvformat::CodecId::kOscar);
  for (int prompt : {1, 63, 64, 65, 319, 320, 327, 328, 700}) {
    auto table = KvPageTable::Create(Windowed());
    ASSERT_TRUE(table.ok());
    ASSERT_TRUE(table->Admit(1, prompt + 300).ok());
    auto plan = table->Append(1, prompt);
    ASSERT_TRUE(plan.ok()) << plan.status();
    int64_t demoted_pages = 0;
    for (int n = prompt; n <= prompt + 300; ++n) {
      const SeqPages& s = table->seq(1);
      const quant::TierWindows w = quant::WindowsAt(oscar, n);
      ASSERT_EQ(s.length, n);
      ASSERT_EQ(s.int2_tokens, w.k_quant_end - w.quant_begin) << "prompt " << prompt << " n " << n;
      ASSERT_EQ(s.bf16_tokens, n - s.int2_tokens);
      ASSERT_EQ(static_cast<int64_t>(s.int2.size()) * 8, s.int2_tokens);
      ASSERT_GE(static_cast<int64_t>(s.bf16.size()) * 8, s.bf16_tokens);
      ASSERT_LT(static_cast<int64_t>(s.bf16.size()) * 8, s.bf16_tokens + 8);
      // The page counts follow from the length alone, however the sequence got there (a packed
      // sequence moved to another GPU is re-admitted with a prefill plan of its length).
      const PageCount by_length = PagesHeld(table->config(), n);
      ASSERT_EQ(by_length.bf16, static_cast<int32_t>(s.bf16.size())) << "n " << n;
      ASSERT_EQ(by_length.int2, static_cast<int32_t>(s.int2.size())) << "n " << n;
      if (n == prompt + 300) break;
      auto step = table->Append(1, 1);
      ASSERT_TRUE(step.ok()) << step.status();
      ASSERT_EQ(step->bf16_page.size(), 1u);
      demoted_pages += static_cast<int64_t>(step->demote_src.size());
      table->ReleaseDemoted();
    }
    const int64_t hist_after_prefill = (std::max(0, prompt - 64 - 256) / 8) * 8;
    EXPECT_EQ(demoted_pages * 8 + hist_after_prefill, table->seq(1).int2_tokens);
  }
}

TEST(KvPageTableTest, PrefillPlacesRowsByTier) {
  auto table = KvPageTable::Create(Windowed());
  ASSERT_TRUE(table.ok());
  ASSERT_TRUE(table->Admit(7, 400).ok());
  auto plan = table->Append(7, 400);  // sink 64, history 80 (10 pages), recent 256
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->hist_begin, 64);
  EXPECT_EQ(plan->hist_pages.size(), 10u);
  ASSERT_EQ(plan->token_index.size(), 64u + 256u);
  EXPECT_EQ(plan->token_index[63], 63);
  EXPECT_EQ(plan->token_index[64], 144);  // first recent token
  EXPECT_EQ(plan->bf16_row[64], 0);       // the recent window starts on a page boundary
  std::set<std::pair<int32_t, int32_t>> slots;
  for (size_t i = 0; i < plan->token_index.size(); ++i) {
    EXPECT_TRUE(slots.insert({plan->bf16_page[i], plan->bf16_row[i]}).second);
  }
}

TEST(KvPageTableTest, AllBf16CodecKeepsEveryTokenInBf16Pages) {
  KvPageTableConfig c = Windowed();
  c.windowed = false;
  c.int2_pages = 0;
  auto table = KvPageTable::Create(c);
  ASSERT_TRUE(table.ok());
  ASSERT_TRUE(table->Admit(1, 1000).ok());
  ASSERT_TRUE(table->Append(1, 500).ok());
  for (int i = 0; i < 100; ++i) {
    auto step = table->Append(1, 1);
    ASSERT_TRUE(step.ok());
    EXPECT_TRUE(step->demote_src.empty());
  }
  EXPECT_EQ(table->seq(1).bf16_tokens, 600);
  EXPECT_EQ(table->seq(1).int2_tokens, 0);
}

TEST(KvPageTableTest, BudgetAdmitsBySizeAndFreesOnRemove) {
  KvPageTableConfig c = Windowed();
  const int64_t one = PagesForTokens(c, 4096).bf16 * Bf16PageBytes(c) +
                      PagesForTokens(c, 4096).int2 * Int2PageBytes(c);
  c.budget_bytes = 3 * one + one / 2;
  auto table = KvPageTable::Create(c);
  ASSERT_TRUE(table.ok());
  for (int id = 0; id < 3; ++id) ASSERT_TRUE(table->Admit(id, 4096).ok());
  EXPECT_FALSE(table->CanAdmit(4096));
  EXPECT_EQ(table->Admit(3, 4096).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(table->Admit(4, 40960).code(), absl::StatusCode::kInvalidArgument);  // never fits
  EXPECT_EQ(table->Admit(0, 10).code(), absl::StatusCode::kInvalidArgument);     // id taken
  table->Remove(1);
  EXPECT_TRUE(table->Admit(3, 4096).ok());
  EXPECT_EQ(table->used_bytes(), 3 * one);
}

TEST(KvPageTableTest, SameBudgetHoldsAboutSixTimesMoreInt2Tokens) {
  // The same bytes hold ~6x more tokens of a long sequence with INT2 history than with BF16.
  KvPageTableConfig w = Windowed();
  w.head_dim = 128;
  KvPageTableConfig b = w;
  b.windowed = false;
  const int64_t tokens = 32768;
  const PageCount pw = PagesForTokens(w, tokens), pb = PagesForTokens(b, tokens);
  const double bytes_w = pw.bf16 * Bf16PageBytes(w) + pw.int2 * Int2PageBytes(w);
  const double bytes_b = pb.bf16 * Bf16PageBytes(b);
  EXPECT_GT(bytes_b / bytes_w, 6.0);
  EXPECT_LT(bytes_b / bytes_w, 7.2);
}

TEST(KvPageTableTest, GrowingPastTheReservationIsRefused) {
  auto table = KvPageTable::Create(Windowed());
  ASSERT_TRUE(table.ok());
  ASSERT_TRUE(table->Admit(1, 16).ok());
  ASSERT_TRUE(table->Append(1, 16).ok());
  EXPECT_EQ(table->Append(1, 1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(table->Append(2, 1).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace oscarkv::model_gpu

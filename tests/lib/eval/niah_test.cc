// BuildNiahCases with the default model's tokenizer on real text (skipped when the model or
// data/text is absent): every case is the context length, the needle sits where the protocol
// says (outside sink and recent window, at its depth, inside an unbroken haystack), the cases are
// deterministic in the seed, and bad settings are refused.
#include "lib/eval/niah.h"

#include <algorithm>
#include <fstream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lib/model/gguf_file.h"
#include "lib/model/model.h"
#include "lib/model/tokenizer.h"

namespace oscarkv::eval {
namespace {

class NiahTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!model::DefaultModelAvailable()) return;
    auto path = model::ResolveModelPath("default");
    ASSERT_TRUE(path.ok()) << path.status();
    auto gguf = model::GgufFile::Open(*path);
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    auto tok = model::Tokenizer::FromGguf(**gguf);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = tok->release();
    for (const char* rel : {"data/text/austen/emma.txt", "data/text/moby/mobydick.txt"}) {
      std::ifstream in(std::string(OSCARKV_TEST_SOURCE_DIR) + "/" + rel);
      if (!in) return;
      std::stringstream ss;
      ss << in.rdbuf();
      // A slice keeps the test fast; 60k characters is > 8192 + 512 tokens.
      texts_->push_back(tokenizer_->Encode(ss.str().substr(0, 60000), false, false));
    }
  }
  void SetUp() override {
    if (tokenizer_ == nullptr) GTEST_SKIP() << "default model not installed";
    if (texts_->size() < 2) GTEST_SKIP() << "data/text not present";
  }
  static std::vector<std::span<const int32_t>> Spans() { return {texts_->begin(), texts_->end()}; }
  static model::Tokenizer* tokenizer_;
  static std::vector<std::vector<int32_t>>* texts_;
};
model::Tokenizer* NiahTest::tokenizer_ = nullptr;
std::vector<std::vector<int32_t>>* NiahTest::texts_ = new std::vector<std::vector<int32_t>>();

TEST_F(NiahTest, CasesFollowTheProtocol) {
  NiahOptions o;
  o.contexts = {1024, 2048};
  o.depths = {0, 10, 50, 90, 100};
  o.trials = 2;
  auto set = BuildNiahCases(*tokenizer_, Spans(), o);
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_EQ(set->cases.size(), 2u * 5 * 2);
  EXPECT_EQ(tokenizer_->Decode(set->question),
            "\n\nWhat is the secret pass key? The secret pass key is");
  size_t i = 0;
  for (int len : o.contexts) {
    int last_position = -1;
    for (int depth : o.depths) {
      for (int trial = 0; trial < o.trials; ++trial, ++i) {
        const NiahCase& c = set->cases[i];
        SCOPED_TRACE(absl::StrCat("context ", len, " depth ", depth, " trial ", trial));
        // Nesting order contexts x depths x trials; the text rule.
        EXPECT_EQ(c.context, len);
        EXPECT_EQ(c.depth_percent, depth);
        EXPECT_EQ(c.trial, trial);
        EXPECT_EQ(c.text_index, (trial + depth / 10) % 2);
        // The full sequence is exactly the context.
        EXPECT_EQ(c.prompt.size() + set->question.size() + c.answer.size(),
                  static_cast<size_t>(len));
        ASSERT_EQ(c.passkey.size(), 5u);
        EXPECT_EQ(tokenizer_->Decode(c.answer), " " + c.passkey);
        // The needle: where the case says, outside the sink and the recent window.
        const std::vector<int32_t> needle = tokenizer_->Encode(
            absl::StrCat(" The secret pass key is ", c.passkey,
                         ". Remember it. The secret pass key is ", c.passkey, ". "),
            false, false);
        ASSERT_LE(c.needle_position + needle.size(), c.prompt.size());
        EXPECT_TRUE(std::equal(needle.begin(), needle.end(), c.prompt.begin() + c.needle_position));
        EXPECT_GE(c.needle_position, 64);
        EXPECT_LE(c.needle_position + static_cast<int>(needle.size()), len - 256);
        // Depths 0 and 100 are the ends of the allowed range [64, len - 256 - |needle|].
        if (depth == 0) {
          EXPECT_EQ(c.needle_position, 64);
        }
        if (depth == 100) {
          EXPECT_EQ(c.needle_position + static_cast<int>(needle.size()), len - 256);
        }
        if (trial == 0) {
          EXPECT_GE(c.needle_position, last_position);  // deeper needle, later position
          last_position = c.needle_position;
        }
        // The haystack is one unbroken run of the text around the needle.
        const std::vector<int32_t>& text = (*texts_)[c.text_index];
        const size_t hay = c.prompt.size() - needle.size();
        ASSERT_LE(c.text_offset + hay, text.size());
        EXPECT_GE(c.text_offset, 256);
        EXPECT_TRUE(std::equal(c.prompt.begin(), c.prompt.begin() + c.needle_position,
                               text.begin() + c.text_offset));
        EXPECT_TRUE(std::equal(c.prompt.begin() + c.needle_position + needle.size(), c.prompt.end(),
                               text.begin() + c.text_offset + c.needle_position));
      }
    }
  }
}

TEST_F(NiahTest, SameSeedSameCasesOtherSeedOtherPasskeys) {
  NiahOptions o;
  o.contexts = {1024};
  o.depths = {30, 70};
  o.trials = 3;
  auto a = BuildNiahCases(*tokenizer_, Spans(), o);
  auto b = BuildNiahCases(*tokenizer_, Spans(), o);
  o.seed += 1;
  auto c = BuildNiahCases(*tokenizer_, Spans(), o);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  int same_key = 0;
  for (size_t i = 0; i < a->cases.size(); ++i) {
    EXPECT_EQ(a->cases[i].prompt, b->cases[i].prompt);
    EXPECT_EQ(a->cases[i].passkey, b->cases[i].passkey);
    same_key += a->cases[i].passkey == c->cases[i].passkey;
  }
  EXPECT_LT(same_key, 2);
  // Trials of one depth are different haystacks.
  EXPECT_NE(a->cases[0].text_offset, a->cases[1].text_offset);
}

TEST_F(NiahTest, ForcedTokensAreQuestionThenAnswerButLast) {
  NiahOptions o;
  o.contexts = {1024};
  o.depths = {50};
  auto set = BuildNiahCases(*tokenizer_, Spans(), o);
  ASSERT_TRUE(set.ok()) << set.status();
  const NiahCase& c = set->cases[0];
  const std::vector<int32_t> forced = NiahForcedTokens(*set, c);
  ASSERT_EQ(forced.size(), set->question.size() + c.answer.size() - 1);
  EXPECT_TRUE(std::equal(set->question.begin(), set->question.end(), forced.begin()));
  EXPECT_TRUE(
      std::equal(c.answer.begin(), c.answer.end() - 1, forced.begin() + set->question.size()));
}

TEST_F(NiahTest, BadSettingsAreRefused) {
  NiahOptions o;
  o.contexts = {300};  // no room between sink and recent window
  EXPECT_EQ(BuildNiahCases(*tokenizer_, Spans(), o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.contexts = {1024};
  o.depths = {120};
  EXPECT_EQ(BuildNiahCases(*tokenizer_, Spans(), o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.depths = {50};
  o.trials = 0;
  EXPECT_EQ(BuildNiahCases(*tokenizer_, Spans(), o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.trials = 1;
  o.contexts = {1 << 20};  // longer than the texts
  EXPECT_EQ(BuildNiahCases(*tokenizer_, Spans(), o).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildNiahCases(*tokenizer_, {}, NiahOptions{}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace oscarkv::eval

// Tokenizer of the real default model: round trip on real text, pre-tokenizer splits, special
// tokens and the ChatML template.
#include "lib/model/tokenizer.h"

#include <fstream>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "lib/model/model.h"

namespace oscarkv::model {
namespace {

class RealTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto path = ResolveModelPath("default");
    if (!path.ok()) return;
    auto f = GgufFile::Open(*path);
    ASSERT_TRUE(f.ok()) << f.status();
    auto t = Tokenizer::FromGguf(**f);
    ASSERT_TRUE(t.ok()) << t.status();
    tok_ = t->release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  void SetUp() override {
    if (tok_ == nullptr) GTEST_SKIP() << "default model file absent (run scripts/setup.sh)";
  }
  static Tokenizer* tok_;
};
Tokenizer* RealTokenizer::tok_ = nullptr;

TEST_F(RealTokenizer, RoundTripsAustenLines) {
  int lines = 0;
  size_t total_bytes = 0, total_tokens = 0;
  for (const char* name : {"emma", "persuasion", "prideprejudice"}) {
    std::ifstream in(std::string("data/text/austen/") + name + ".txt");
    if (!in) GTEST_SKIP() << "data/text/austen absent (run scripts/setup.sh)";
    std::string line;
    int taken = 0;
    while (std::getline(in, line) && taken < 400) {
      if (line.empty()) continue;
      ++taken;
      ++lines;
      const std::vector<int32_t> ids = tok_->Encode(line, false);
      ASSERT_EQ(tok_->Decode(ids), line);
      total_bytes += line.size();
      total_tokens += ids.size();
    }
  }
  EXPECT_GT(lines, 1000);
  // BPE compresses English prose to well under half a token per byte.
  EXPECT_LT(total_tokens * 3, total_bytes);
}

// Valid UTF-8 only: SmolLM2's vocabulary has no tokens for bytes that never occur in UTF-8
// (0xF5-0xFF), so such bytes cannot be encoded (they are dropped).
TEST_F(RealTokenizer, RoundTripsUnicode) {
  for (std::string s : {std::string("naïve café — “quoted” 東京 😀"), std::string("a\n\n  b\t\tc   "),
                        std::string("  leading and 12345 digits")}) {
    EXPECT_EQ(tok_->Decode(tok_->Encode(s, false)), s);
  }
}

TEST_F(RealTokenizer, SmolLmPreTokenizerSplitsDigitsAndWords) {
  EXPECT_EQ(tok_->pre_tokenizer(), PreTokenizer::kSmolLm);
  EXPECT_EQ(tok_->PreTokenize("Hello world, it's 2024!\n\n  ok"),
            (std::vector<std::string>{"Hello", " world", ",", " it", "'s", " ", "2", "0", "2", "4",
                                      "!", "\n\n ", " ok"}));
  const std::vector<int32_t> hello = tok_->Encode("Hello", false);
  ASSERT_EQ(hello.size(), 1u);
  EXPECT_EQ(tok_->TokenToPiece(hello[0]), "Hello");
}

TEST_F(RealTokenizer, SpecialTokensAndChatTemplate) {
  const int32_t im_start = tok_->TokenId("<|im_start|>");
  const int32_t im_end = tok_->TokenId("<|im_end|>");
  ASSERT_GE(im_start, 0);
  ASSERT_GE(im_end, 0);
  EXPECT_TRUE(tok_->IsEndOfGeneration(im_end));
  const std::vector<int32_t> ids = tok_->Encode("<|im_start|>user\nHi<|im_end|>", true);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), im_start);
  EXPECT_EQ(ids.back(), im_end);
  // Without parse_special the markers are spelled out as text.
  const std::vector<int32_t> plain = tok_->Encode("<|im_start|>", false, false);
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ(tok_->Decode(plain), "<|im_start|>");

  ChatMessage msg{"user", "What is 2+2?"};
  auto chat = tok_->ApplyChatTemplate(std::span(&msg, 1), true);
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(*chat,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n");
  ChatMessage with_system[2] = {{"system", "Be brief."}, {"user", "Hi"}};
  auto chat2 = tok_->ApplyChatTemplate(with_system, false);
  ASSERT_TRUE(chat2.ok());
  EXPECT_EQ(*chat2, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

}  // namespace
}  // namespace oscarkv::model

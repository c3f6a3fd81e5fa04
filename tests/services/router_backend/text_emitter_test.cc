// TextEmitter with the real tokenizer: pieces concatenate to the full decode, stop strings cut
// the text right before the match (also across token boundaries).
#include <chrono>
#include <cstdio>
#include <random>

#include "gtest/gtest.h"
#include "lib/model/model.h"
#include "services/router_backend/worker_completion_backend.h"

namespace oscarkv::router_backend {
namespace {

class TextEmitterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!model::DefaultModelAvailable()) return;
    auto path = model::ResolveModelPath("default");
    auto m = model::Model::Load(*path);
    if (m.ok()) model_ = m->release();
  }
  void SetUp() override {
    if (model_ == nullptr) GTEST_SKIP() << "default model not installed";
  }
  static model::Model* model_;
};
model::Model* TextEmitterTest::model_ = nullptr;

TEST_F(TextEmitterTest, PiecesConcatenateToTheDecodedText) {
  const auto& tok = model_->tokenizer();
  const std::string text = "Caf\xc3\xa9 na\xc3\xafve \xe2\x80\x94 \xf0\x9f\x98\x80 emoji, and plain words.";
  std::vector<int32_t> ids = tok.Encode(text, /*add_special=*/false);
  TextEmitter e(&tok, {});
  std::string out;
  for (int32_t id : ids) out += e.Push(id);
  out += e.Flush();
  EXPECT_EQ(out, tok.Decode(ids, true));
}

// Random ids from the whole vocabulary (control tokens, byte tokens that split characters):
// the pieces still join to the full decode, up to its last complete character, and a long
// completion stays cheap (each token costs its own bytes, not the text so far).
TEST_F(TextEmitterTest, RandomTokensJoinToTheDecodeUpToItsLastCompleteCharacter) {
  const auto& tok = model_->tokenizer();
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> id(0, tok.vocab_size() - 1);
  std::vector<int32_t> ids(8192);
  for (int32_t& t : ids) t = id(rng);
  TextEmitter e(&tok, {});
  std::string out;
  const auto t0 = std::chrono::steady_clock::now();
  for (int32_t t : ids) out += e.Push(t);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string full = tok.Decode(ids, true);
  EXPECT_EQ(out, full.substr(0, out.size()));
  EXPECT_GE(out.size() + 4, full.size());  // at most an incomplete character held back
  out += e.Flush();
  EXPECT_EQ(out, full.substr(0, out.size()));
  std::printf("[measure] 8192 tokens through TextEmitter: %.1f ms\n", seconds * 1e3);
}

TEST_F(TextEmitterTest, StopStringCutsBeforeTheMatch) {
  const auto& tok = model_->tokenizer();
  std::vector<int32_t> ids = tok.Encode("one two three four five", false);
  TextEmitter e(&tok, {"ee fo"});  // spans two tokens
  std::string out;
  size_t fed = 0;
  for (int32_t id : ids) {
    out += e.Push(id);
    ++fed;
    if (e.stopped()) break;
  }
  EXPECT_TRUE(e.stopped());
  EXPECT_EQ(out, "one two thr");
  EXPECT_LT(fed, ids.size());
}

// Several stop strings: the text ends before the match that starts first, whatever the list's
// order (" Paris" with ["ris", "Pa"] ends before "Pa", not before "ris").
TEST_F(TextEmitterTest, TheEarliestOfSeveralStopStringsWins) {
  const auto& tok = model_->tokenizer();
  const std::vector<int32_t> ids = tok.Encode("The capital of France is Paris.", false);
  for (const std::vector<std::string>& stops :
       {std::vector<std::string>{"ris", "Pa"}, std::vector<std::string>{"Pa", "ris"},
        std::vector<std::string>{"is Paris", "apital", "France"}}) {
    TextEmitter e(&tok, stops);
    std::string out;
    for (int32_t id : ids) {
      out += e.Push(id);
      if (e.stopped()) break;
    }
    out += e.Flush();
    EXPECT_TRUE(e.stopped());
    EXPECT_EQ(out, stops[0] == "is Paris" ? "The c" : "The capital of France is ")
        << stops[0];
  }
}

}  // namespace
}  // namespace oscarkv::router_backend

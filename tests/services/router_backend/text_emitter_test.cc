// TextEmitter with the real tokenizer: pieces concatenate to the full decode, stop strings cut
// the text right before the match (also across token boundaries).
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

}  // namespace
}  // namespace oscarkv::router_backend

// `oscarkv calibrate` refuses bad options with a message naming the flag, before the forward
// pass: ValidateCalibrateOptions alone, and CalibrateModel against the tiny fixture model's
// context length (512).
#include <string>

#include "gtest/gtest.h"
#include "lib/engine/calibrate.h"
#include "lib/model/model.h"

namespace oscarkv::engine {
namespace {

CalibrateOptions Good() {
  CalibrateOptions o;
  o.text_files = {"README.md"};
  return o;
}

void ExpectRefused(const CalibrateOptions& o, const std::string& fragment,
                   int context_length = 0) {
  const absl::Status st = ValidateCalibrateOptions(o, context_length);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << fragment;
  EXPECT_NE(st.message().find(fragment), std::string::npos) << st.message();
}

TEST(CalibrateOptionsTest, DefaultsPass) {
  EXPECT_TRUE(ValidateCalibrateOptions(Good()).ok());
  EXPECT_TRUE(ValidateCalibrateOptions(Good(), 8192).ok());
}

TEST(CalibrateOptionsTest, TokensBelowOneWindowNamesBothFlags) {
  CalibrateOptions o = Good();
  o.max_tokens = 100;
  o.window_tokens = 256;
  ExpectRefused(o, "--tokens 100 is less than one --window of 256");
  o.max_tokens = 0;
  ExpectRefused(o, "--tokens must be > 0");
  o.max_tokens = 256;
  o.window_tokens = -1;
  ExpectRefused(o, "--window must be > 0");
}

TEST(CalibrateOptionsTest, RefusesClipOutsideTheFileRange) {
  for (float bad : {5.0f, -3.0f, 0.0f}) {
    CalibrateOptions o = Good();
    o.k_clip_ratio = bad;
    ExpectRefused(o, "--k-clip must be in (0, 1]");
    o.k_clip_ratio = 0.96f;
    o.v_clip_ratio = bad;
    ExpectRefused(o, "--v-clip must be in (0, 1]");
  }
}

TEST(CalibrateOptionsTest, RefusesBadDumpTokensAndObjectives) {
  CalibrateOptions o = Good();
  o.dump_tokens = -3;
  ExpectRefused(o, "--dump-tokens must be >= 1, got -3");
  o = Good();
  o.k_objective = "sst";
  ExpectRefused(o, "objectives");
  o = Good();
  o.text_files.clear();
  ExpectRefused(o, "--text");
}

TEST(CalibrateOptionsTest, WindowBeyondTheModelsContextFailsBeforeTheForward) {
  CalibrateOptions o = Good();
  o.window_tokens = 1024;
  o.max_tokens = 2048;
  ExpectRefused(o, "--window 1024 exceeds the model's context length 512", 512);

  auto m = model::Model::Load("tests/lib/model/fixtures/hf_tiny/llama");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ((*m)->config().context_length, 512);
  o.text_files = {"does/not/exist.txt"};  // the check comes before the text is read
  const auto cal = CalibrateModel(**m, o, 0);
  EXPECT_EQ(cal.status().code(), absl::StatusCode::kInvalidArgument) << cal.status();
  EXPECT_NE(cal.status().message().find("exceeds the model's context length 512"),
            std::string::npos)
      << cal.status().message();
}

}  // namespace
}  // namespace oscarkv::engine

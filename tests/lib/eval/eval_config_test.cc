// `oscarkv eval` refuses bad settings with a message naming the flag, before any forward pass:
// ValidateEvalConfig alone, and RunEval against the tiny fixture model's context length (512).
#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "lib/eval/harness.h"

namespace oscarkv::eval {
namespace {

EvalConfig Good() {
  EvalConfig c;
  c.texts = {"unused.txt"};
  c.out_dir = "unused";
  return c;
}

void ExpectRefused(const EvalConfig& c, const std::string& fragment, int context_length = 0) {
  const absl::Status st = ValidateEvalConfig(c, context_length);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << fragment;
  EXPECT_NE(st.message().find(fragment), std::string::npos) << st.message();
}

TEST(EvalConfigTest, DefaultsAndQuickPass) {
  EXPECT_TRUE(ValidateEvalConfig(Good()).ok());
  EXPECT_TRUE(ValidateEvalConfig(Good(), 8192).ok());
  EvalConfig q = Good();
  q.niah = q.greedy = true;
  ApplyQuick(&q);
  EXPECT_TRUE(ValidateEvalConfig(q, 8192).ok()) << ValidateEvalConfig(q, 8192);
}

TEST(EvalConfigTest, RefusesNegativeScoreFrom) {
  EvalConfig c = Good();
  c.score_from = -5;
  ExpectRefused(c, "--score-from must be >= 0, got -5");
  c.score_from = -100000;
  ExpectRefused(c, "--score-from must be >= 0, got -100000");
  c.score_from = 0;
  EXPECT_TRUE(ValidateEvalConfig(c).ok());
}

TEST(EvalConfigTest, RefusesContextWithNothingToScore) {
  EvalConfig c = Good();
  c.contexts = {386};  // score_from 384 + 2
  ExpectRefused(c, "--context 386 leaves nothing to score");
  c.windows = {0};  // not run: not checked
  c.greedy = true;
  EXPECT_TRUE(ValidateEvalConfig(c).ok());
}

TEST(EvalConfigTest, RefusesNegativeOrNoWindows) {
  EvalConfig c = Good();
  c.windows = {-1};
  ExpectRefused(c, "--windows must be >= 0, got -1");
  c.windows = {0};
  ExpectRefused(c, "ask for --windows N with N > 0, or for --niah and/or --greedy");
  c.contexts = {2048, 4096};
  c.windows = {0, 0};
  ExpectRefused(c, "nothing to evaluate");
  c.niah = true;
  EXPECT_TRUE(ValidateEvalConfig(c).ok());
}

TEST(EvalConfigTest, RefusesClipOutsideCodecRange) {
  for (float bad : {5.0f, -3.0f, 0.5f, 0.0f, 1.01f}) {
    EvalConfig c = Good();
    c.k_clip = bad;
    ExpectRefused(c, "--k-clip must be in (0.5, 1]");
    c.k_clip = kNoClipOverride;
    c.v_clip = bad;
    ExpectRefused(c, "--v-clip must be in (0.5, 1]");
  }
  EvalConfig c = Good();
  c.k_clip = 1.0f;
  c.v_clip = 0.51f;
  EXPECT_TRUE(ValidateEvalConfig(c).ok());
}

TEST(EvalConfigTest, RefusesOtherBadCounts) {
  EvalConfig c = Good();
  c.fidelity_windows = -1;
  ExpectRefused(c, "--fidelity-windows");
  c = Good();
  c.calibration_tokens = 0;
  ExpectRefused(c, "--calibration-tokens");
  c = Good();
  c.threads = -3;
  ExpectRefused(c, "--threads");
  c = Good();
  c.jobs = 0;
  ExpectRefused(c, "--jobs");
  c = Good();
  c.group_size = -32;
  ExpectRefused(c, "--group-size");
  c = Good();
  c.niah = true;
  c.niah_trials = 0;
  ExpectRefused(c, "--niah-trials must be >= 1, got 0");
  c.niah_trials = 1;
  c.niah_depths = {101};
  ExpectRefused(c, "--niah-depth");
  c.niah_depths = {50};
  c.niah_contexts = {300};
  ExpectRefused(c, "--niah-context 300 is too short");
  c = Good();
  c.greedy = true;
  c.greedy_new_tokens = 0;
  ExpectRefused(c, "--greedy-new-tokens");
  c.greedy_new_tokens = 1;
  c.greedy_prompts = -1;
  ExpectRefused(c, "--greedy-prompts");
}

TEST(EvalConfigTest, RefusesLengthsBeyondTheModelsContext) {
  EvalConfig c = Good();
  c.contexts = {2048, 4096};
  ExpectRefused(c, "--context 4096 exceeds the model's context length 2048", 2048);
  c.contexts = {2048};
  c.windows = {0};
  c.niah = true;
  c.niah_contexts = {1024, 8192};
  ExpectRefused(c, "--niah-context 8192 exceeds the model's context length 4096", 4096);
  c.niah = false;
  c.greedy = true;
  c.greedy_prompt_tokens = 400;
  c.greedy_new_tokens = 200;
  ExpectRefused(c, "--greedy-new-tokens 200 exceeds the model's context length 512", 512);
  c.greedy_new_tokens = 112;
  EXPECT_TRUE(ValidateEvalConfig(c, 512).ok());
}

TEST(EvalConfigTest, RunEvalRefusesAContextBeyondTheModelsBeforeAnyForward) {
  EvalConfig c = Good();
  c.model = "tests/lib/model/fixtures/hf_tiny/llama";  // context length 512
  c.out_dir = (std::filesystem::temp_directory_path() / "oscarkv_eval_config_test").string();
  c.contexts = {1024};
  c.codecs = {"bf16"};
  c.plots = false;
  c.progress = false;
  const absl::Status st = RunEval(c);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("--context 1024 exceeds the model's context length 512"),
            std::string::npos)
      << st.message();
  std::filesystem::remove_all(c.out_dir);
}

}  // namespace
}  // namespace oscarkv::eval

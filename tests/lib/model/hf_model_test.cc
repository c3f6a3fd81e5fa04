// Model::Load on tiny Hugging Face checkpoints (Llama, Qwen2 with QKV bias, Qwen3 with QK-norm;
// BF16/F16 safetensors) against transformers' float32 logits and greedy tokens, committed by
// tools/reference/make_tiny_hf_fixtures.py in tests/lib/model/fixtures/hf_tiny/<arch>/.
// Also: decode through the KV cache equals the full forward, Tokenizer::FromHfFiles equals HF
// tokenizers on real text lines, and the load-path dispatch and its errors.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/model/model.h"
#include "nlohmann/json.hpp"

namespace oscarkv::model {
namespace {

constexpr char kFixtureDir[] = "tests/lib/model/fixtures/hf_tiny/";
// Ours vs transformers float32 on the same (bf16/f16-stored) weights: only summation order and
// our bf16 rounding of the prompt K/V differ. Logits are O(1..10) in these models.
constexpr float kMaxLogitDiff = 0.05f;
// Decode through the cache vs the full forward: both round K/V to bf16, so only summation order.
constexpr float kMaxDecodeVsForwardDiff = 5e-3f;
// Greedy tokens must match wherever transformers' top-1/top-2 margin exceeds this.
constexpr float kGreedyMargin = 2 * kMaxLogitDiff;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<float> ReadF32(const std::string& path) {
  const std::string b = ReadAll(path);
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

int Argmax(const float* x, int n) { return static_cast<int>(std::max_element(x, x + n) - x); }

class HfTiny : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = std::string(kFixtureDir) + GetParam();
    ref_ = nlohmann::json::parse(ReadAll(dir_ + "/reference.json"), nullptr, false);
    ASSERT_FALSE(ref_.is_discarded()) << dir_ << "/reference.json";
    auto m = Model::Load(dir_);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
  }
  std::string dir_;
  nlohmann::json ref_;
  std::unique_ptr<Model> model_;
};

TEST_P(HfTiny, ConfigMatchesArchitecture) {
  const ModelConfig& c = model_->config();
  EXPECT_EQ(model_->format(), ModelFormat::kSafetensors);
  EXPECT_EQ(c.arch_name, GetParam());
  EXPECT_EQ(c.rope_style, RopeStyle::kNeox);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.d_model, 128);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, GetParam() == "qwen3" ? 64 : 32);
  EXPECT_EQ(c.vocab_size, ref_["vocab"].get<int>());
  EXPECT_EQ(c.qkv_bias, GetParam() == "qwen2");
  EXPECT_EQ(c.qk_norm, GetParam() == "qwen3");
  EXPECT_EQ(c.tied_embeddings, GetParam() != "llama");
  EXPECT_EQ(model_->gguf().GetString("general.name").value_or(""), GetParam());
  EXPECT_EQ(model_->gguf().GetString("general.architecture").value_or(""), GetParam());
  EXPECT_TRUE(model_->has_tokenizer());
}

TEST_P(HfTiny, LogitsMatchTransformers) {
  const int vocab = model_->config().vocab_size;
  float worst = 0;
  int near_tie_flips = 0;
  for (size_t k = 0; k < ref_["sequences"].size(); ++k) {
    const std::vector<int32_t> ids = ref_["sequences"][k].get<std::vector<int32_t>>();
    const std::vector<float> want =
        ReadF32(dir_ + "/" + ref_["logits_files"][k].get<std::string>());
    ASSERT_EQ(want.size(), ids.size() * vocab);
    auto got = model_->Forward(ids);
    ASSERT_TRUE(got.ok()) << got.status();
    for (size_t t = 0; t < ids.size(); ++t) {
      const float* g = got->data() + t * vocab;
      const float* w = want.data() + t * vocab;
      float d = 0;
      for (int i = 0; i < vocab; ++i) d = std::max(d, std::fabs(g[i] - w[i]));
      worst = std::max(worst, d);
      EXPECT_LE(d, kMaxLogitDiff) << "sequence " << k << " position " << t;
      // Top-1 must agree unless the reference's top-1/top-2 margin is within our error budget
      // (a legitimate near-tie, where either token is right).
      const int wa = Argmax(w, vocab);
      float second = -INFINITY;
      for (int i = 0; i < vocab; ++i) {
        if (i != wa) second = std::max(second, w[i]);
      }
      if (w[wa] - second > 2 * kMaxLogitDiff) {
        EXPECT_EQ(Argmax(g, vocab), wa) << "sequence " << k << " position " << t;
      } else if (Argmax(g, vocab) != wa) {
        ++near_tie_flips;
      }
    }
  }
  RecordProperty("max_abs_logit_diff", std::to_string(worst));
  std::printf("[%s] max |dlogit| vs transformers: %.3g; top-1 flips at near-ties: %d\n",
              GetParam().c_str(), worst, near_tie_flips);
}

TEST_P(HfTiny, DecodeWithCacheEqualsForward) {
  const int vocab = model_->config().vocab_size;
  const std::vector<int32_t> ids = ref_["sequences"][2].get<std::vector<int32_t>>();
  auto full = model_->Forward(ids);
  ASSERT_TRUE(full.ok()) << full.status();
  const size_t prompt = 5;
  std::unique_ptr<Sequence> seq = model_->NewSequence();
  std::vector<float> logits;
  ASSERT_TRUE(model_->Prefill(*seq, std::span(ids).first(prompt), true, &logits).ok());
  float worst = 0;
  for (size_t i = 0; i < prompt * vocab; ++i) worst = std::max(worst, std::fabs(logits[i] - (*full)[i]));
  for (size_t t = prompt; t < ids.size(); ++t) {
    Sequence* s = seq.get();
    ASSERT_TRUE(model_->DecodeStep(std::span<Sequence* const>(&s, 1),
                                   std::span<const int32_t>(&ids[t], 1), &logits).ok());
    for (int i = 0; i < vocab; ++i) {
      worst = std::max(worst, std::fabs(logits[i] - (*full)[t * vocab + i]));
    }
  }
  EXPECT_EQ(seq->length(), static_cast<int64_t>(ids.size()));
  EXPECT_LE(worst, kMaxDecodeVsForwardDiff);
  std::printf("[%s] max |dlogit| decode vs forward: %.3g\n", GetParam().c_str(), worst);
}

TEST_P(HfTiny, GreedyMatchesTransformers) {
  const std::vector<int32_t> prompt = ref_["greedy_prompt"].get<std::vector<int32_t>>();
  const std::vector<int32_t> want = ref_["greedy_tokens"].get<std::vector<int32_t>>();
  const std::vector<float> margin = ref_["greedy_margins"].get<std::vector<float>>();
  // Teacher-forced: our top-1 after prompt + want[0..i) equals want[i] wherever the reference
  // is not a near-tie.
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), want.begin(), want.end() - 1);
  auto logits = model_->Forward(all);
  ASSERT_TRUE(logits.ok()) << logits.status();
  const int vocab = model_->config().vocab_size;
  for (size_t i = 0; i < want.size(); ++i) {
    if (margin[i] < kGreedyMargin) continue;
    EXPECT_EQ(Argmax(logits->data() + (prompt.size() - 1 + i) * vocab, vocab), want[i]) << "step " << i;
  }
  // Free-running (prefill + decode steps): equal up to the first reference near-tie.
  GenerateOptions opt;
  opt.max_new_tokens = static_cast<int>(want.size());
  opt.stop_at_eos = false;
  auto got = model_->Generate(prompt, opt);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), want.size());
  for (size_t i = 0; i < want.size() && margin[i] >= kGreedyMargin; ++i) {
    ASSERT_EQ((*got)[i], want[i]) << "step " << i;
  }
}

TEST_P(HfTiny, TokenizerMatchesHfTokenizers) {
  const Tokenizer& tok = model_->tokenizer();
  EXPECT_EQ(tok.pre_tokenizer(), GetParam() == "llama" ? PreTokenizer::kGpt2 : PreTokenizer::kQwen2);
  EXPECT_EQ(tok.eos_id(), tok.TokenId("<|im_end|>"));
  EXPECT_TRUE(tok.IsEndOfGeneration(tok.TokenId("<|im_end|>")));
  EXPECT_FALSE(tok.add_bos());
  const auto& lines = ref_["text_lines"];
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string text = lines[i].get<std::string>();
    const std::vector<int32_t> want = ref_["text_ids"][i].get<std::vector<int32_t>>();
    std::vector<int32_t> got = tok.Encode(text, /*add_special=*/true);
    EXPECT_EQ(got, want) << "line " << i << ": " << text;
    EXPECT_EQ(tok.Decode(got), text);
  }
  std::vector<int32_t> chat = tok.Encode("<|im_start|>user\nhi<|im_end|>", true);
  EXPECT_EQ(chat.front(), tok.TokenId("<|im_start|>"));
  EXPECT_EQ(chat.back(), tok.TokenId("<|im_end|>"));
  std::vector<ChatMessage> msgs = {{"user", "hi"}};
  auto rendered = tok.ApplyChatTemplate(msgs, true);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  EXPECT_EQ(*rendered, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

INSTANTIATE_TEST_SUITE_P(Archs, HfTiny, ::testing::Values("llama", "qwen2", "qwen3"),
                         [](const auto& info) { return info.param; });

class HfLoadPaths : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = std::filesystem::temp_directory_path() /
           ("oscarkv_hf_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(tmp_);
  }
  void TearDown() override { std::filesystem::remove_all(tmp_); }
  std::filesystem::path tmp_;
};

TEST_F(HfLoadPaths, SafetensorsFileNextToConfigLoads) {
  const std::string f = std::string(kFixtureDir) + "qwen2/model.safetensors";
  EXPECT_EQ(DetectModelFormat(f).value_or(ModelFormat::kGguf), ModelFormat::kSafetensors);
  auto m = Model::Load(f);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->config().arch, Arch::kQwen2);
  std::string name;
  auto c = ReadModelConfig(std::string(kFixtureDir) + "qwen3", &name);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(name, "qwen3");
  EXPECT_EQ(c->head_dim, 64);
}

TEST_F(HfLoadPaths, WithoutTokenizerLoadsForIdsOnly) {
  for (const char* f : {"config.json", "model.safetensors"}) {
    std::filesystem::copy_file(std::string(kFixtureDir) + "llama/" + f, tmp_ / f);
  }
  auto m = Model::Load(tmp_.string());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE((*m)->has_tokenizer());
  EXPECT_TRUE((*m)->tokenizer().Encode("hello", true).empty());
  std::vector<int32_t> ids = {1, 2, 3};
  EXPECT_TRUE((*m)->Forward(ids).ok());
}

TEST_F(HfLoadPaths, ClearErrors) {
  auto no_config = Model::Load(tmp_.string());
  EXPECT_EQ(no_config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_config.status().message().find("config.json"), std::string::npos) << no_config.status();
  std::filesystem::copy_file(std::string(kFixtureDir) + "llama/config.json", tmp_ / "config.json");
  auto no_weights = Model::Load(tmp_.string());
  EXPECT_EQ(no_weights.status().code(), absl::StatusCode::kNotFound) << no_weights.status();
  EXPECT_NE(no_weights.status().message().find("model.safetensors"), std::string::npos);
  // Weights of another architecture: the missing tensor is named.
  std::filesystem::copy_file(std::string(kFixtureDir) + "qwen3/model.safetensors",
                             tmp_ / "model.safetensors");
  auto wrong = Model::Load(tmp_.string());
  EXPECT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("lm_head.weight"), std::string::npos) << wrong.status();
  EXPECT_EQ(Model::Load("/nonexistent/dir").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace oscarkv::model

// SafetensorsFile / SafetensorsCheckpoint on hand-built images: the three float dtypes, and each
// kind of broken file (truncated, corrupt header, bad offsets, overlap, misalignment) giving a
// clear error instead of a read past the end; a two-shard checkpoint; hf_config parsing.
#include "lib/model/safetensors_file.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/model/hf_config.h"

namespace oscarkv::model {
namespace {

// An image: 8-byte LE header length, `header`, then `data`.
std::string Image(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

TEST(SafetensorsFile, ReadsF32F16Bf16) {
  // F32 [2]: 1.5, -2; F16 [2]: 1.0 (0x3C00), -0.5 (0xB800); BF16 [1,2]: 3.0 (0x4040), 0.25 (0x3E80)
  std::string data = Floats({1.5f, -2.0f});
  data += std::string("\x00\x3C\x00\xB8", 4);
  data += std::string("\x40\x40\x80\x3E", 4);
  const std::string h =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"F16","shape":[2],"data_offsets":[8,12]},)"
      R"("c":{"dtype":"BF16","shape":[1,2],"data_offsets":[12,16]}})";
  auto f = SafetensorsFile::FromBytes(Image(h, data));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  ASSERT_EQ((*f)->tensors().size(), 3u);
  float out[2];
  const SafetensorsTensor* a = (*f)->FindTensor("a");
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(SafetensorsToFloat32(*a, out).ok());
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -2.0f);
  ASSERT_TRUE(SafetensorsToFloat32(*(*f)->FindTensor("b"), out).ok());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -0.5f);
  const SafetensorsTensor* c = (*f)->FindTensor("c");
  EXPECT_EQ(c->shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(c->dtype, SafetensorsDtype::kBF16);
  ASSERT_TRUE(SafetensorsToFloat32(*c, out).ok());
  EXPECT_EQ(out[0], 3.0f);
  EXPECT_EQ(out[1], 0.25f);
  EXPECT_EQ((*f)->FindTensor("zzz"), nullptr);
}

TEST(SafetensorsFile, OtherDtypesParseButDoNotConvert) {
  auto f = SafetensorsFile::FromBytes(
      Image(R"({"i":{"dtype":"I8","shape":[3],"data_offsets":[0,3]}})", "abc"));
  ASSERT_TRUE(f.ok()) << f.status();
  float out[3];
  absl::Status s = SafetensorsToFloat32((*f)->tensors()[0], out);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("I8"), std::string::npos) << s;
}

void ExpectDataLoss(const std::string& image, const std::string& needle) {
  auto f = SafetensorsFile::FromBytes(image);
  ASSERT_FALSE(f.ok()) << "accepted a broken file; expected: " << needle;
  EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss) << f.status();
  EXPECT_NE(f.status().message().find(needle), std::string::npos) << f.status();
}

TEST(SafetensorsFile, BrokenFilesGiveClearErrors) {
  const std::string ok_h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string ok = Image(ok_h, Floats({1, 2}));
  ASSERT_TRUE(SafetensorsFile::FromBytes(ok).ok());
  ExpectDataLoss("abc", "shorter than its 8-byte header length");
  ExpectDataLoss(ok.substr(0, 20), "exceeds");                       // header cut short
  ExpectDataLoss(ok.substr(0, ok.size() - 1), "past the");            // data cut short
  ExpectDataLoss(Image("{not json", ""), "not a JSON object");
  ExpectDataLoss(Image("[1,2]", ""), "not a JSON object");
  ExpectDataLoss(Image(R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", Floats({1, 2})),
                 "unknown dtype 'F33'");
  ExpectDataLoss(Image(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", Floats({1, 2})),
                 "negative");
  ExpectDataLoss(Image(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", Floats({1, 2})), "shape");
  ExpectDataLoss(Image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", Floats({1, 2})),
                 "data_offsets");
  ExpectDataLoss(Image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", Floats({1, 2})),
                 "end before they begin");
  ExpectDataLoss(Image(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", Floats({1, 2})),
                 "needs 12");
  ExpectDataLoss(Image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                       Floats({1, 2, 3})),
                 "overlap");
  ExpectDataLoss(Image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})", Floats({1, 2})),
                 "misaligned");
  ExpectDataLoss(Image(R"({"a":{"dtype":"F32","shape":[4611686018427387904, 8],"data_offsets":[0,8]}})",
                       Floats({1, 2})),
                 "overflows");
  // A huge header length must not be trusted (no allocation or read of that size).
  std::string huge = ok;
  huge[7] = '\x7F';
  ExpectDataLoss(huge, "exceeds");
}

TEST(SafetensorsFile, OpenMissingFileIsNotFound) {
  auto f = SafetensorsFile::Open("/nonexistent/model.safetensors");
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("oscarkv_st_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
  }
  std::filesystem::path dir_;
};

TEST_F(TempDir, ShardedCheckpoint) {
  Write("a.safetensors", Image(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", Floats({7})));
  Write("b.safetensors", Image(R"({"y":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", Floats({9})));
  Write("model.safetensors.index.json",
        R"({"metadata":{},"weight_map":{"x":"a.safetensors","y":"b.safetensors"}})");
  auto ck = SafetensorsCheckpoint::Open(dir_.string());
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_EQ((*ck)->num_files(), 2u);
  EXPECT_EQ((*ck)->num_tensors(), 2u);
  float v;
  ASSERT_TRUE(SafetensorsToFloat32(*(*ck)->FindTensor("y"), &v).ok());
  EXPECT_EQ(v, 9.0f);
}

TEST_F(TempDir, ShardedCheckpointErrors) {
  Write("a.safetensors", Image(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", Floats({7})));
  Write("model.safetensors.index.json", R"({"weight_map":{"x":"a.safetensors","y":"a.safetensors"}})");
  auto ck = SafetensorsCheckpoint::Open(dir_.string());
  EXPECT_EQ(ck.status().code(), absl::StatusCode::kDataLoss) << ck.status();
  EXPECT_NE(ck.status().message().find("'y'"), std::string::npos) << ck.status();
  Write("model.safetensors.index.json", R"({"weight_map":{"x":"missing.safetensors"}})");
  EXPECT_EQ(SafetensorsCheckpoint::Open(dir_.string()).status().code(), absl::StatusCode::kNotFound);
  Write("model.safetensors.index.json", R"({"weight_map":{"x":"../a.safetensors"}})");
  EXPECT_EQ(SafetensorsCheckpoint::Open(dir_.string()).status().code(), absl::StatusCode::kDataLoss);
  std::filesystem::remove(dir_ / "model.safetensors.index.json");
  EXPECT_EQ(SafetensorsCheckpoint::Open(dir_.string()).status().code(), absl::StatusCode::kNotFound);
}

constexpr char kQwen3Config[] = R"({
  "architectures": ["Qwen3ForCausalLM"], "hidden_size": 128, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 256,
  "vocab_size": 512, "max_position_embeddings": 512, "rms_norm_eps": 1e-06,
  "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
  "tie_word_embeddings": true, "attention_bias": false, "hidden_act": "silu"})";

TEST(HfConfig, Qwen3WithRopeParameters) {
  auto c = ModelConfigFromHfJson(kQwen3Config);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, Arch::kQwen3);
  EXPECT_EQ(c->arch_name, "qwen3");
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->rope_dim, 64);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->rope_style, RopeStyle::kNeox);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_TRUE(c->tied_embeddings);
  EXPECT_EQ(c->context_length, 512);
}

TEST(HfConfig, LlamaFourXLayoutDefaults) {
  auto c = ModelConfigFromHfJson(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
      "num_hidden_layers": 1, "num_attention_heads": 4, "intermediate_size": 128,
      "vocab_size": 100, "rope_theta": 500000.0, "rope_scaling": null})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch_name, "llama");
  EXPECT_EQ(c->rope_style, RopeStyle::kNeox);  // HF layout: not GGUF's adjacent pairs
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->rope_theta, 500000.0);
  EXPECT_FALSE(c->tied_embeddings);
}

TEST(HfConfig, UnsupportedFeaturesAreNamed) {
  auto expect = [](const std::string& json, absl::StatusCode code, const std::string& needle) {
    auto c = ModelConfigFromHfJson(json);
    ASSERT_FALSE(c.ok()) << json;
    EXPECT_EQ(c.status().code(), code) << c.status();
    EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status();
  };
  const std::string base = R"({"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
      "intermediate_size": 128, "vocab_size": 100, )";
  expect(base + R"("architectures": ["MistralForCausalLM"]})", absl::StatusCode::kUnimplemented,
         "MistralForCausalLM");
  expect(base + R"("architectures": ["LlamaForCausalLM"], "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})",
         absl::StatusCode::kUnimplemented, "llama3");
  expect(base + R"("architectures": ["Qwen2ForCausalLM"], "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6}})",
         absl::StatusCode::kUnimplemented, "yarn");
  expect(base + R"("architectures": ["LlamaForCausalLM"], "attention_bias": true})",
         absl::StatusCode::kUnimplemented, "attention_bias");
  expect(base + R"("architectures": ["Qwen2ForCausalLM"], "use_sliding_window": true})",
         absl::StatusCode::kUnimplemented, "sliding");
  expect(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64})",
         absl::StatusCode::kInvalidArgument, "num_hidden_layers");
  expect("{", absl::StatusCode::kInvalidArgument, "JSON");
  auto lin = ModelConfigFromHfJson(base + R"("architectures": ["LlamaForCausalLM"], "rope_scaling": {"type": "linear", "factor": 2.0}})");
  ASSERT_TRUE(lin.ok()) << lin.status();
  EXPECT_EQ(lin->rope_scale, 2.0);
}

}  // namespace
}  // namespace oscarkv::model

// Commands that turn text into ids refuse a model without a tokenizer with a clear error instead
// of running on an empty prompt.
#include <filesystem>

#include "gtest/gtest.h"
#include "lib/model/model.h"
#include "tools/commands.h"

namespace oscarkv::tools {
namespace {

namespace fs = std::filesystem;

TEST(RequireTokenizerTest, RefusesACheckpointWithoutTokenizerJson) {
  const fs::path src = "tests/lib/model/fixtures/hf_tiny/llama";
  const fs::path dir = fs::temp_directory_path() / "oscarkv_no_tokenizer_llama";
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(src / f, dir / f);
  auto bare = model::Model::Load(dir.string());
  ASSERT_TRUE(bare.ok()) << bare.status();
  const absl::Status st = RequireTokenizer(**bare, "generate");
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("tokenizer.json"), std::string::npos) << st.message();

  auto full = model::Model::Load(src.string());
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_TRUE(RequireTokenizer(**full, "generate").ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace oscarkv::tools

// Our GGUF tokenizer against an independent one (tests/fixtures/model/tokenizer.json, made by
// tools/reference/make_fixtures.py): exact token ids on ~2700 spans of Jane Austen and Moby Dick
// from data/text, one to four lines each, no BOS, special-token text not parsed.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/model/gguf_file.h"
#include "lib/model/model.h"
#include "lib/model/tokenizer.h"
#include "tests/lib/model/reference/reference_fixtures.h"

namespace oscarkv::model {
namespace {

using reference_test::Fnv1a64Hex;
using reference_test::IdsToString;
using reference_test::JoinSpan;
using reference_test::kTextDir;
using reference_test::ReadFile;
using reference_test::ReadFixture;
using reference_test::SplitLines;

TEST(TokenizerReference, MatchesReferenceIdsOnRealText) {
  if (!DefaultModelAvailable()) GTEST_SKIP() << "default model not installed (scripts/setup.sh)";
  bool ok = false;
  nlohmann::json fx = ReadFixture("tokenizer.json", &ok);
  ASSERT_TRUE(ok) << "tests/fixtures/model/tokenizer.json missing or malformed";

  absl::StatusOr<std::string> path = ResolveModelPath("default");
  ASSERT_TRUE(path.ok()) << path.status();
  absl::StatusOr<std::unique_ptr<GgufFile>> gguf = GgufFile::Open(*path);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  ASSERT_EQ(std::string(fx["model"]["file"]),
            path->substr(path->find_last_of('/') + 1));
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(**gguf);
  ASSERT_TRUE(tok.ok()) << tok.status();

  std::vector<std::vector<std::string>> files;
  for (const auto& rel : fx["files"]) {
    bool read_ok = false;
    std::string data = ReadFile(std::string(kTextDir) + std::string(rel), &read_ok);
    if (!read_ok) GTEST_SKIP() << "data/text not present (scripts/setup.sh creates it)";
    files.push_back(SplitLines(data));
  }

  int checked = 0, mismatched = 0, total_ids = 0;
  for (const auto& e : fx["entries"]) {
    const size_t fi = e[0], first = e[1], count = e[2];
    const std::string want_hash = e[3];
    const std::vector<int32_t> want = e[4].get<std::vector<int32_t>>();
    ASSERT_LT(fi, files.size());
    ASSERT_LE(first + count, files[fi].size()) << "text changed: " << std::string(fx["files"][fi]);
    const std::string text = JoinSpan(files[fi], first, count);
    ASSERT_EQ(Fnv1a64Hex(text), want_hash)
        << "data/text/" << std::string(fx["files"][fi]) << " line " << first
        << " differs from the text the fixture was made from";
    const std::vector<int32_t> got = (*tok)->Encode(text, /*add_special=*/false,
                                                    /*parse_special=*/false);
    ++checked;
    total_ids += static_cast<int>(want.size());
    if (got != want) {
      ++mismatched;
      if (mismatched <= 10) {
        ADD_FAILURE() << std::string(fx["files"][fi]) << " lines [" << first << ", "
                      << first + count << "): \"" << text << "\"\n  want " << IdsToString(want)
                      << "\n  got  " << IdsToString(got);
      }
    }
  }
  EXPECT_EQ(mismatched, 0) << mismatched << " of " << checked << " spans differ";
  EXPECT_GE(checked, 2000);
  std::printf("tokenizer reference: %d spans, %d ids, %d mismatched\n", checked, total_ids,
              mismatched);
}

}  // namespace
}  // namespace oscarkv::model

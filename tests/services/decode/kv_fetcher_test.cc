// KvFetcher over the in-process transfer backend: blocks held by one backend are fetched by
// another in one batch and checked on arrival; a corrupted payload, a wrong key, a checksum that
// differs from the descriptor and a foreign model fingerprint are all refused.
#include "services/decode/kv_fetcher.h"

#include "gtest/gtest.h"
#include "lib/transfer/local/local_backend.h"
#include "tests/testing/test_blocks.h"

namespace oscarkv::decode {
namespace {

class KvFetcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    holder_ = *transfer::LocalBackend::Create();
    fetcher_backend_ = *transfer::LocalBackend::Create();
    kvformat::BlockKey prev{0, 0};
    for (int i = 0; i < 3; ++i) {
      const kvformat::BlockKey key{100u + i, 200u + i};
      std::vector<std::byte> b = oscarkv::testing::MakeTestBlock(i + 1, 2, 3, key, prev);
      prev = key;
      offsets_.push_back(region_.size());
      region_.insert(region_.end(), b.begin(), b.end());
      blocks_.push_back(std::move(b));
    }
    reg_ = *holder_->RegisterMemory(std::span<std::byte>(region_));
  }

  std::vector<BlockSource> Sources() {
    std::vector<BlockSource> s;
    for (size_t i = 0; i < blocks_.size(); ++i) {
      auto h = kvformat::ParseBlockHeader(blocks_[i]);
      s.push_back({holder_->EndpointAddress(), reg_.remote_descriptor, offsets_[i],
                   blocks_[i].size(), h->key, h->payload_checksum});
    }
    return s;
  }

  std::unique_ptr<transfer::LocalBackend> holder_, fetcher_backend_;
  std::vector<std::byte> region_;
  std::vector<uint64_t> offsets_;
  std::vector<std::vector<std::byte>> blocks_;
  transfer::RegisteredMemory reg_;
};

TEST_F(KvFetcherTest, FetchesAndChecksEveryBlock) {
  KvFetcher f(fetcher_backend_.get());
  auto got = f.Fetch(Sources(), {});
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->views.size(), 3u);
  EXPECT_EQ(got->bytes, region_.size());
  EXPECT_EQ(fetcher_backend_->counters().bytes_got, region_.size());
  EXPECT_EQ(std::memcmp(got->buffer.data(), region_.data(), region_.size()), 0);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(got->views[i].header.key.lo, 100u + i);
}

TEST_F(KvFetcherTest, RefusesCorruptedMismatchedAndForeignBlocks) {
  KvFetcher f(fetcher_backend_.get());
  {
    region_[offsets_[1] + kvformat::kBlockHeaderBytes + 5] ^= std::byte{1};  // payload bit flip
    EXPECT_TRUE(absl::IsDataLoss(f.Fetch(Sources(), {}).status()));
    region_[offsets_[1] + kvformat::kBlockHeaderBytes + 5] ^= std::byte{1};
  }
  {
    auto s = Sources();
    s[2].key = {1, 2};
    EXPECT_TRUE(absl::IsFailedPrecondition(f.Fetch(s, {}).status()));
  }
  {
    auto s = Sources();
    s[0].payload_checksum ^= 1;
    EXPECT_TRUE(absl::IsDataLoss(f.Fetch(s, {}).status()));
  }
  {
    kvformat::BlockExpectations e;
    e.model_fingerprint = 0xfeed;
    EXPECT_TRUE(absl::IsFailedPrecondition(f.Fetch(Sources(), e).status()));
  }
  EXPECT_TRUE(absl::IsInvalidArgument(f.Fetch({}, {}).status()));
  EXPECT_TRUE(f.Fetch(Sources(), {}).ok());  // and the good blocks still pass
}

}  // namespace
}  // namespace oscarkv::decode

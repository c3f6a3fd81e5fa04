// kvformat blocks -> packed GPU pages (lib/model_gpu/block_import.h), on the real default model:
// the blocks ServingEngine::Prefill cuts for a 700-token prompt (BF16 sink, INT2 history blocks up
// to the reuse boundary, BF16 tail) convert to pages whose every row, as attention reads it,
// equals bit for bit what the CPU decode cache rebuilt from the same blocks
// (ServingEngine::SequenceFromBlocks) reads: for bf16 and oscar, every layer, head, K and V.
#include "lib/model_gpu/block_import.h"

#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "lib/engine/quant_kv_cache.h"
#include "lib/engine/serving_engine.h"
#include "lib/model/model.h"
#include "tests/testing/default_model_test.h"

namespace oscarkv::model_gpu {
namespace {

using kvformat::KvSide;

using BlockImportTest = testing::DefaultModelTest;

std::vector<int32_t> Prompt(int n, int vocab) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = static_cast<int32_t>((i * 7919 + 13) % vocab);
  return p;
}

TEST_F(BlockImportTest, PagesReadExactlyWhatTheCpuCacheRebuiltFromTheSameBlocksReads) {
  const model::ModelConfig& c = model_->config();
  for (const std::string codec : {"bf16", "oscar"}) {
    auto engine = engine::LoadWorkerServingEngine(model_, codec, "", 256, OSCARKV_SOURCE_DIR);
    ASSERT_TRUE(engine.ok()) << engine.status();
    const std::vector<int32_t> prompt = Prompt(700, c.vocab_size);
    auto prefill = (*engine)->Prefill(prompt);
    ASSERT_TRUE(prefill.ok()) << prefill.status();
    std::vector<kvformat::BlockView> views;
    int quantised = 0;
    for (const engine::SequenceBlock& b : prefill->blocks) {
      auto v = kvformat::ParseBlock(b.bytes);
      ASSERT_TRUE(v.ok()) << v.status();
      quantised += v->header.block_kind == static_cast<uint8_t>(kvformat::BlockKind::kQuantized);
      views.push_back(*v);
    }
    if (codec == "oscar") {
      EXPECT_GT(quantised, 0);  // history blocks, and a BF16 tail the import must demote
    }

    auto shape = GpuPageShape(c, (*engine)->codec());
    ASSERT_TRUE(shape.ok()) << shape.status();
    const ClipRatios clips = EffectiveClipRatios((*engine)->tier_config());
    const float k_clip = clips.k, v_clip = clips.v;
    auto packed = PackedKvFromBlocks(*shape, (*engine)->codec().id, k_clip, v_clip, views);
    ASSERT_TRUE(packed.ok()) << packed.status();
    EXPECT_EQ(packed->layout.length, 700);
    EXPECT_EQ(static_cast<int64_t>(packed->bytes.size()), packed->layout.bytes());

    auto rebuilt = (*engine)->SequenceFromBlocks(views);
    ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
    const quant::ThreeTierCache& cache =
        static_cast<engine::QuantKvCache&>((*rebuilt)->cache()).tiers();
    std::vector<float> k, v, scale, row(c.head_dim);
    int64_t mismatches = 0;
    for (int l = 0; l < c.num_layers; ++l) {
      for (int h = 0; h < c.num_kv_heads; ++h) {
        ASSERT_TRUE(cache.ReadSeen(l, h, &k, &v, &scale).ok());
        ASSERT_EQ(static_cast<int64_t>(k.size()), 700 * c.head_dim);
        for (int64_t t = 0; t < 700; ++t) {
          for (const KvSide side : {KvSide::kK, KvSide::kV}) {
            ASSERT_TRUE(ReadPackedRow(*shape, *packed, l, side, h, t, row.data()).ok());
            const float* want = (side == KvSide::kK ? k : v).data() + t * c.head_dim;
            for (int i = 0; i < c.head_dim; ++i) mismatches += row[i] != want[i];
          }
        }
      }
    }
    EXPECT_EQ(mismatches, 0) << codec;

    // And back (a GPU prefill worker's export): with the tail's bf16 rows, which the pages hold
    // only in INT2, the blocks come out byte for byte as ServingEngine cut them.
    const BlockCutSpec cut = CutSpecFor(**engine, prompt);
    TailRows tail;
    tail.begin = cut.reuse_boundary;
    const int64_t kv_row = int64_t{c.num_kv_heads} * c.head_dim;
    const int64_t tail_tokens = 700 - tail.begin;
    tail.bits.resize(c.num_layers * 2 * tail_tokens * kv_row);
    for (const kvformat::BlockView& view : views) {
      const kvformat::BlockHeader& h = view.header;
      if (h.first_position < tail.begin) continue;
      ASSERT_EQ(h.block_kind, static_cast<uint8_t>(kvformat::BlockKind::kBf16));
      const kvformat::BlockLayout layout = kvformat::BlockLayout::Of(h);
      for (int l = 0; l < c.num_layers; ++l) {
        for (int side = 0; side < 2; ++side) {
          for (int hd = 0; hd < c.num_kv_heads; ++hd) {
            for (int r = 0; r < h.token_count; ++r) {
              std::memcpy(tail.bits.data() +
                              ((int64_t{l} * 2 + side) * tail_tokens +
                               (h.first_position + r - tail.begin)) * kv_row +
                              hd * c.head_dim,
                          view.payload.data() +
                              layout.CodesOffset(l, side == 0 ? KvSide::kK : KvSide::kV, hd) +
                              int64_t{r} * c.head_dim * 2,
                          c.head_dim * 2);
            }
          }
        }
      }
    }
    auto blocks = BlocksFromPackedKv(*shape, *packed, tail, cut);
    ASSERT_TRUE(blocks.ok()) << blocks.status();
    ASSERT_EQ(blocks->size(), prefill->blocks.size());
    for (size_t b = 0; b < blocks->size(); ++b) {
      EXPECT_TRUE((*blocks)[b] == prefill->blocks[b].bytes) << codec << " block " << b;
    }
    // A tail that starts too late is refused.
    TailRows late = tail;
    late.begin += 8;
    late.bits.resize(c.num_layers * 2 * (tail_tokens - 8) * kv_row);
    EXPECT_EQ(BlocksFromPackedKv(*shape, *packed, late, cut).status().code(),
              absl::StatusCode::kInvalidArgument);

    // Blocks out of order are refused, nothing half-built is returned.
    std::vector<kvformat::BlockView> swapped = views;
    std::swap(swapped[1], swapped[2]);
    EXPECT_EQ(PackedKvFromBlocks(*shape, (*engine)->codec().id, k_clip, v_clip, swapped)
                  .status()
                  .code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(GpuPageShapeTest, OnlyTheGpuCodecsAndHeadDims) {
  model::ModelConfig c;
  c.num_layers = 2;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  auto oscar = GpuPageShape(c, quant::GetCodecSpec(kvformat::CodecId::kOscar));
  ASSERT_TRUE(oscar.ok());
  EXPECT_TRUE(oscar->windowed);
  EXPECT_EQ(oscar->sink_tokens, 64);
  EXPECT_EQ(oscar->recent_tokens, 256);
  EXPECT_FALSE(GpuPageShape(c, quant::GetCodecSpec(kvformat::CodecId::kBf16))->windowed);
  EXPECT_EQ(GpuPageShape(c, quant::GetCodecSpec(kvformat::CodecId::kKivi2)).status().code(),
            absl::StatusCode::kUnimplemented);
  c.head_dim = 96;
  EXPECT_EQ(GpuPageShape(c, quant::GetCodecSpec(kvformat::CodecId::kOscar)).status().code(),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace oscarkv::model_gpu

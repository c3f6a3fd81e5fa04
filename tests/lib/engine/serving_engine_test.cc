// ServingEngine on the real default model: chunked prefill to blocks, prefix reuse that changes
// nothing, and decode from blocks equal to decode after prefill.
#include "lib/engine/serving_engine.h"

#include <cblas.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "tests/testing/default_model_test.h"
#include "lib/kvformat/block.h"
#include "lib/model/forward_cpu.h"

namespace oscarkv::engine {
namespace {

class ServingEngineTest : public testing::DefaultModelTest {
 protected:
  static std::vector<int32_t> Text(size_t skip_chars, int tokens) {
    std::ifstream in("data/text/austen/emma.txt");
    std::stringstream text;
    text << in.rdbuf();
    std::string s = text.str().substr(skip_chars, 20000);
    std::vector<int32_t> ids = model_->tokenizer().Encode(s, /*add_special=*/false);
    ids.resize(tokens);
    return ids;
  }
  static std::vector<kvformat::BlockView> Views(const std::vector<SequenceBlock>& blocks,
                                                bool reusable_only) {
    std::vector<kvformat::BlockView> views;
    for (const SequenceBlock& b : blocks) {
      if (reusable_only && !b.reusable) break;
      auto view = kvformat::ParseBlock(b.bytes, {});
      EXPECT_TRUE(view.ok()) << view.status();
      views.push_back(*view);
    }
    return views;
  }
  // Greedy continuation of `steps` tokens after a prefill.
  static std::vector<int32_t> Greedy(const ServingEngine& engine, PrefillResult& prefill,
                                     int steps) {
    std::vector<int32_t> out;
    std::vector<float> logits = prefill.last_logits;
    for (int i = 0; i < steps; ++i) {
      const int32_t next = static_cast<int32_t>(
          std::max_element(logits.begin(), logits.end()) - logits.begin());
      out.push_back(next);
      model::Sequence* seq = prefill.sequence.get();
      EXPECT_TRUE(engine.DecodeStep({&seq, 1}, {&next, 1}, &logits).ok());
    }
    return out;
  }
};

// Each calibrated codec resolves to the default file of its own objective; a worker falls back to
// the source tree and leaves the path empty when neither place has the file.
TEST(CalibrationPathTest, DefaultFileFollowsTheCodecsObjective) {
  EXPECT_EQ(DefaultCalibrationFor("oscar"), kDefaultCalibrationPath);
  EXPECT_EQ(DefaultCalibrationFor("oscar-gram"), kDefaultGramCalibrationPath);
  EXPECT_EQ(DefaultCalibrationFor("bf16"), "");
  EXPECT_EQ(DefaultCalibrationFor("oscar-hadamard"), "");
  EXPECT_EQ(DefaultCalibrationFor("no-such-codec"), "");
  EXPECT_EQ(ResolveCalibrationPath("", "default", "oscar-gram"), kDefaultGramCalibrationPath);
  EXPECT_EQ(ResolveCalibrationPath("", "/some/model.gguf", "oscar"), "");
  EXPECT_EQ(ResolveCalibrationPath("x.cal", "default", "bf16"), "x.cal");

  const std::filesystem::path root = std::filesystem::temp_directory_path() / "oscarkv_cal_root";
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root / "data/calibration");
  std::ofstream(root / kDefaultGramCalibrationPath) << "x";
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(std::filesystem::temp_directory_path());  // no data/ here
  EXPECT_EQ(ResolveWorkerCalibrationPath("", "oscar-gram", root.string()),
            (root / kDefaultGramCalibrationPath).string());
  EXPECT_EQ(ResolveWorkerCalibrationPath("", "oscar", root.string()), "");  // file absent
  EXPECT_EQ(ResolveWorkerCalibrationPath("", "bf16", root.string()), "");
  EXPECT_EQ(ResolveWorkerCalibrationPath("mine.cal", "oscar", root.string()), "mine.cal");
  std::filesystem::current_path(cwd);
  std::filesystem::remove_all(root);
}

TEST_F(ServingEngineTest, PrefixHitIsBitIdenticalToColdPrefill) {
  auto engine = ServingEngine::Create(model_, {.codec = "oscar-hadamard"});
  ASSERT_TRUE(engine.ok()) << engine.status();
  // Turn 1: 800 tokens; turn 2 extends it to 1100 (a chat's next turn).
  const std::vector<int32_t> turn2 = Text(1000, 1100);
  const std::vector<int32_t> turn1(turn2.begin(), turn2.begin() + 800);
  auto first = (*engine)->Prefill(turn1);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*engine)->ReuseBoundary(800), 512);
  const std::vector<kvformat::BlockView> stored = Views(first->blocks, /*reusable_only=*/true);
  ASSERT_EQ(stored.size(), 8u);

  auto cold = (*engine)->Prefill(turn2);
  auto warm = (*engine)->Prefill(turn2, stored);
  ASSERT_TRUE(cold.ok()) << cold.status();
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_EQ(cold->reused_tokens, 0);
  EXPECT_EQ(warm->reused_tokens, 512);
  EXPECT_EQ(warm->computed_tokens, 1100 - 512);
  EXPECT_EQ(cold->last_logits, warm->last_logits);  // bit-identical
  ASSERT_EQ(cold->blocks.size(), warm->blocks.size());
  for (size_t b = 0; b < cold->blocks.size(); ++b) {
    EXPECT_EQ(cold->blocks[b].bytes, warm->blocks[b].bytes) << "block " << b;
  }
  EXPECT_EQ(Greedy(**engine, *cold, 12), Greedy(**engine, *warm, 12));
  // A prefill worker asks for the blocks only: the same blocks and logits, no sequence.
  auto blocks_only = (*engine)->Prefill(turn2, stored, /*build_sequence=*/false);
  ASSERT_TRUE(blocks_only.ok()) << blocks_only.status();
  EXPECT_EQ(blocks_only->sequence, nullptr);
  EXPECT_EQ(blocks_only->last_logits, warm->last_logits);
  ASSERT_EQ(blocks_only->blocks.size(), warm->blocks.size());
  for (size_t b = 0; b < warm->blocks.size(); ++b) {
    EXPECT_EQ(blocks_only->blocks[b].bytes, warm->blocks[b].bytes) << "block " << b;
  }
}

TEST_F(ServingEngineTest, DecodeFromBlocksEqualsDecodeAfterPrefill) {
  auto engine = ServingEngine::Create(model_, {.codec = "oscar-hadamard"});
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<int32_t> prompt = Text(5000, 700);
  auto prefill = (*engine)->Prefill(prompt);
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  // Blocks: BF16 sink, INT2 history up to the reuse boundary (256), BF16 tail (last partial).
  ASSERT_EQ(prefill->blocks.size(), 11u);
  auto views = Views(prefill->blocks, /*reusable_only=*/false);
  EXPECT_EQ(views[0].header.block_kind, static_cast<uint8_t>(kvformat::BlockKind::kBf16));
  EXPECT_EQ(views[1].header.block_kind, static_cast<uint8_t>(kvformat::BlockKind::kQuantized));
  EXPECT_EQ(views[4].header.block_kind, static_cast<uint8_t>(kvformat::BlockKind::kBf16));
  EXPECT_EQ(views[10].header.token_count, 700 - 640);
  auto rebuilt = (*engine)->SequenceFromBlocks(views);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  PrefillResult remote;
  remote.sequence = std::move(*rebuilt);
  remote.last_logits = prefill->last_logits;
  // The bytes a decode worker admits by (KvBytesAt) are those of the cache, rebuilt or grown.
  EXPECT_EQ((*engine)->SequenceKvBytes(*remote.sequence), (*engine)->KvBytesAt(700));
  EXPECT_EQ(Greedy(**engine, *prefill, 10), Greedy(**engine, remote, 10));
  EXPECT_EQ((*engine)->SequenceKvBytes(*remote.sequence), (*engine)->KvBytesAt(710));
  EXPECT_EQ((*engine)->SequenceKvBytes(*prefill->sequence), (*engine)->KvBytesAt(710));
}

// A sequence's decode attention shares its splits over the CPU pool, and the GEMVs their rows,
// each on one thread: decode steps from the same blocks are the same bits with one thread as
// with two. (The prefill's are not: OpenBLAS's sgemm gives other bits with another thread count.)
TEST_F(ServingEngineTest, DecodeStepBitsDoNotDependOnTheThreadCount) {
  auto engine = ServingEngine::Create(model_, {.codec = "oscar-hadamard"});
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto prefill = (*engine)->Prefill(Text(3000, 700));
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  const std::vector<kvformat::BlockView> views = Views(prefill->blocks, /*reusable_only=*/false);
  auto decode = [&](int threads) {
    model::SetCpuThreads(threads);
    std::vector<std::vector<float>> steps;
    auto sequence = (*engine)->SequenceFromBlocks(views);
    EXPECT_TRUE(sequence.ok()) << sequence.status();
    if (!sequence.ok()) return steps;
    std::vector<float> logits = prefill->last_logits;
    for (int step = 0; step < 6; ++step) {
      const int32_t next = static_cast<int32_t>(
          std::max_element(logits.begin(), logits.end()) - logits.begin());
      model::Sequence* seq = sequence->get();
      EXPECT_TRUE((*engine)->DecodeStep({&seq, 1}, {&next, 1}, &logits).ok());
      steps.push_back(logits);
    }
    return steps;
  };
  const int before = openblas_get_num_threads();
  const std::vector<std::vector<float>> one = decode(1), two = decode(2);
  model::SetCpuThreads(before);
  ASSERT_EQ(one.size(), 6u);
  ASSERT_EQ(two.size(), 6u);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_EQ(one[i], two[i]) << "step " << i;
}

// In a decode batch, a sequence with a long cache (>= 1024 tokens) attends alone with its splits
// over the CPU pool, the short ones share the pool a sequence per thread: every sequence's logits
// are the bits it gets decoding alone.
TEST_F(ServingEngineTest, BatchWithALongSequenceEqualsEachSequenceAloneBitForBit) {
  auto engine = ServingEngine::Create(model_, {.codec = "oscar-hadamard"});
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<std::vector<int32_t>> prompts = {Text(2000, 90), Text(9000, 1100),
                                                     Text(4000, 300)};
  std::vector<PrefillResult> batch, alone;
  std::vector<model::Sequence*> ptrs;
  std::vector<int32_t> next;
  for (const auto& prompt : prompts) {
    auto a = (*engine)->Prefill(prompt);
    auto b = (*engine)->Prefill(prompt);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    next.push_back(static_cast<int32_t>(std::max_element(a->last_logits.begin(),
                                                         a->last_logits.end()) -
                                        a->last_logits.begin()));
    batch.push_back(std::move(*a));
    alone.push_back(std::move(*b));
    ptrs.push_back(batch.back().sequence.get());
  }
  // The long one (1,100 tokens) takes the path of a cache that shares its attention.
  ASSERT_TRUE(batch[1].sequence->cache().AttendsOverThePool());
  const size_t vocab = batch[0].last_logits.size();
  for (int step = 0; step < 3; ++step) {
    std::vector<float> together;
    ASSERT_TRUE((*engine)->DecodeStep(ptrs, next, &together).ok());
    for (size_t i = 0; i < prompts.size(); ++i) {
      model::Sequence* one = alone[i].sequence.get();
      std::vector<float> l;
      ASSERT_TRUE((*engine)->DecodeStep({&one, 1}, {&next[i], 1}, &l).ok());
      ASSERT_EQ(std::vector<float>(together.begin() + i * vocab,
                                   together.begin() + (i + 1) * vocab),
                l)
          << "step " << step << " sequence " << i;
      next[i] = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    }
  }
}

TEST_F(ServingEngineTest, Bf16CodecMatchesTheModelsPromptForward) {
  auto engine = ServingEngine::Create(model_, {.codec = "bf16"});
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<int32_t> prompt = Text(9000, 300);
  auto prefill = (*engine)->Prefill(prompt);
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  auto logits = model_->Forward(prompt);
  ASSERT_TRUE(logits.ok());
  const int vocab = model_->config().vocab_size;
  const float* last = logits->data() + (prompt.size() - 1) * vocab;
  float max_diff = 0, max_abs = 0;
  for (int i = 0; i < vocab; ++i) {
    max_diff = std::max(max_diff, std::abs(last[i] - prefill->last_logits[i]));
    max_abs = std::max(max_abs, std::abs(last[i]));
  }
  // Same math (BF16 K/V, causal softmax) in chunks of 256 instead of one product: the model's
  // own decode-vs-prefill budget (0.5% of the largest logit) and the same top-1 token.
  EXPECT_LT(max_diff, 5e-3f * max_abs);
  EXPECT_EQ(std::max_element(last, last + vocab) - last,
            std::max_element(prefill->last_logits.begin(), prefill->last_logits.end()) -
                prefill->last_logits.begin());
}

// Every computed position's logits reach the sink, chunk by chunk; with the BF16 codec they are
// the model's one-pass prompt forward at each position (the Bf16 test's budget at 99% of the
// positions, 4x it at every one), the last row is last_logits exactly, and reused positions have
// none. A sink's error ends the prefill.
TEST_F(ServingEngineTest, ChunkLogitsSinkSeesEveryComputedPosition) {
  auto engine = ServingEngine::Create(model_, {.codec = "bf16"});
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<int32_t> prompt = Text(9000, 600);
  const int64_t vocab = model_->config().vocab_size;
  std::vector<int64_t> starts;
  std::vector<float> rows;
  const ChunkLogitsSink sink = [&](int64_t first, std::span<const float> logits) {
    EXPECT_EQ(first, static_cast<int64_t>(rows.size()) / vocab);
    starts.push_back(first);
    rows.insert(rows.end(), logits.begin(), logits.end());
    return absl::OkStatus();
  };
  auto prefill = (*engine)->Prefill(prompt, {}, /*build_sequence=*/false, &sink);
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 256, 512}));
  ASSERT_EQ(rows.size(), prompt.size() * vocab);
  EXPECT_TRUE(std::equal(prefill->last_logits.begin(), prefill->last_logits.end(),
                         rows.end() - vocab));
  auto plain = (*engine)->Prefill(prompt, {}, /*build_sequence=*/false);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->last_logits, prefill->last_logits);  // all rows or one: the same last row
  auto forward = model_->Forward(prompt);
  ASSERT_TRUE(forward.ok());
  int argmax_differs = 0, over_budget = 0;
  for (size_t p = 0; p < prompt.size(); ++p) {
    const float* want = forward->data() + p * vocab;
    const float* got = rows.data() + p * vocab;
    float max_diff = 0, max_abs = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      max_diff = std::max(max_diff, std::abs(want[i] - got[i]));
      max_abs = std::max(max_abs, std::abs(want[i]));
    }
    over_budget += max_diff >= 5e-3f * max_abs;
    EXPECT_LT(max_diff, 2e-2f * max_abs) << "position " << p;
    argmax_differs += std::max_element(want, want + vocab) - want !=
                      std::max_element(got, got + vocab) - got;
  }
  EXPECT_LE(over_budget, static_cast<int>(prompt.size()) / 100);
  EXPECT_LE(argmax_differs, 3) << "of " << prompt.size() << " positions (near-ties only)";

  // Reused blocks: only the computed positions reach the sink.
  auto hadamard = ServingEngine::Create(model_, {.codec = "oscar-hadamard"});
  ASSERT_TRUE(hadamard.ok());
  auto first = (*hadamard)->Prefill(prompt);
  ASSERT_TRUE(first.ok());
  starts.clear();
  rows.clear();
  const std::vector<kvformat::BlockView> stored = Views(first->blocks, /*reusable_only=*/true);
  const ChunkLogitsSink count = [&](int64_t first_position, std::span<const float> logits) {
    starts.push_back(first_position);
    rows.insert(rows.end(), logits.begin(), logits.end());
    return absl::OkStatus();
  };
  auto warm = (*hadamard)->Prefill(prompt, stored, /*build_sequence=*/false, &count);
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_EQ(warm->reused_tokens, 256);
  EXPECT_EQ(starts, (std::vector<int64_t>{256, 512}));
  EXPECT_EQ(rows.size(), (prompt.size() - 256) * vocab);

  const ChunkLogitsSink fail = [](int64_t, std::span<const float>) {
    return absl::DataLossError("sink refused");
  };
  EXPECT_EQ((*engine)->Prefill(prompt, {}, false, &fail).status().code(),
            absl::StatusCode::kDataLoss);
}

// The stop check is asked before every chunk; its error ends the prefill there, so a caller
// who has left stops the work within one chunk.
TEST_F(ServingEngineTest, StopCheckEndsThePrefillBeforeTheNextChunk) {
  auto engine = ServingEngine::Create(model_, {.codec = "oscar-hadamard"});
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<int32_t> prompt = Text(12000, 700);  // chunks at 0, 256, 512
  int asked = 0;
  const PrefillStopCheck go_on = [&] {
    ++asked;
    return absl::OkStatus();
  };
  auto whole = (*engine)->Prefill(prompt, {}, /*build_sequence=*/false, nullptr, &go_on);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(asked, 3);
  EXPECT_EQ(whole->computed_tokens, 700);
  auto plain = (*engine)->Prefill(prompt, {}, /*build_sequence=*/false);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->last_logits, whole->last_logits) << "asking changes nothing";

  asked = 0;
  int64_t computed_before_stop = -1;
  const ChunkLogitsSink chunks = [&](int64_t first, std::span<const float>) {
    computed_before_stop = first;
    return absl::OkStatus();
  };
  const PrefillStopCheck stop_at_second = [&] {
    return ++asked == 2 ? absl::CancelledError("caller left") : absl::OkStatus();
  };
  auto stopped = (*engine)->Prefill(prompt, {}, false, &chunks, &stop_at_second);
  EXPECT_EQ(stopped.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(asked, 2) << "not asked again after it said stop";
  EXPECT_EQ(computed_before_stop, 0) << "only the first chunk ran";
}

TEST_F(ServingEngineTest, RejectsEvaluationOnlyCodecsAndForeignBlocks) {
  EXPECT_EQ(ServingEngine::Create(model_, {.codec = "kivi2"}).status().code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(ServingEngine::Create(model_, {.codec = "oscar"}).status().code(),
            absl::StatusCode::kFailedPrecondition);  // no calibration given
  auto bf16 = ServingEngine::Create(model_, {.codec = "bf16"});
  auto hadamard = ServingEngine::Create(model_, {.codec = "oscar-hadamard"});
  ASSERT_TRUE(bf16.ok() && hadamard.ok());
  const std::vector<int32_t> prompt = Text(100, 600);
  auto prefill = (*hadamard)->Prefill(prompt);
  ASSERT_TRUE(prefill.ok());
  auto views = Views(prefill->blocks, /*reusable_only=*/false);
  EXPECT_EQ((*bf16)->SequenceFromBlocks(views).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace oscarkv::engine

// The real default model (SmolLM2-135M-Instruct Q4_1): architecture facts from metadata,
// decode-vs-prefill consistency, batched decode, and greedy generation that knows Paris.
#include "lib/model/model.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "tests/testing/default_model_test.h"

namespace oscarkv::model {
namespace {

using RealModel = testing::DefaultModelTest;

TEST_F(RealModel, MetadataMatchesSmolLm2) {
  const ModelConfig& c = model_->config();
  EXPECT_EQ(c.arch_name, "llama");
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.num_heads, 9);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.rope_style, RopeStyle::kAdjacentPairs);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.KvBytesPerTokenBf16(), 2 * 30 * 3 * 64 * 2);
}

// Token-by-token decode through the KV cache reproduces the prompt-attention logits.
TEST_F(RealModel, DecodeMatchesPrefillAtEveryPosition) {
  const std::vector<int32_t> ids =
      model_->tokenizer().Encode("The quick brown fox jumps over the lazy dog because", true);
  ASSERT_GE(ids.size(), 8u);
  auto full = model_->Forward(ids);
  ASSERT_TRUE(full.ok()) << full.status();
  const int vocab = model_->config().vocab_size;
  auto seq = model_->NewSequence();
  std::vector<float> step;
  double worst = 0;
  for (size_t t = 0; t < ids.size(); ++t) {
    Sequence* s = seq.get();
    if (t == 0) {
      ASSERT_TRUE(model_->Prefill(*s, std::span(&ids[0], 1), false, &step).ok());
    } else {
      ASSERT_TRUE(model_->DecodeStep(std::span(&s, 1), std::span(&ids[t], 1), &step).ok());
    }
    const float* ref = full->data() + t * vocab;
    double max_abs_ref = 0, max_diff = 0;
    for (int i = 0; i < vocab; ++i) {
      max_abs_ref = std::max(max_abs_ref, std::abs(double(ref[i])));
      max_diff = std::max(max_diff, std::abs(double(ref[i]) - step[i]));
    }
    worst = std::max(worst, max_diff / max_abs_ref);
    EXPECT_EQ(std::max_element(ref, ref + vocab) - ref,
              std::max_element(step.begin(), step.end()) - step.begin())
        << "argmax differs at position " << t;
  }
  // Prefill uses sgemm and decode the quantized GEMV, and K/V are rounded to bf16: a value near a
  // rounding boundary can land on the other bf16 neighbour, so allow 0.5% of the logit range.
  EXPECT_LT(worst, 5e-3) << "max |logit difference| / max |logit|, decode vs prefill";
}

// A batch of two sequences decodes exactly as each would alone, and a chunked prefill onto a
// non-empty sequence matches the single prefill.
TEST_F(RealModel, BatchedDecodeAndChunkedPrefillMatch) {
  const Tokenizer& tok = model_->tokenizer();
  std::vector<int32_t> a = tok.Encode("Once upon a time", true);
  std::vector<int32_t> b = tok.Encode("In 1492, Columbus sailed", true);
  const int vocab = model_->config().vocab_size;
  auto sa = model_->NewSequence(), sb = model_->NewSequence();
  std::vector<float> la, lb, lab;
  ASSERT_TRUE(model_->Prefill(*sa, a, false, &la).ok());
  ASSERT_TRUE(model_->Prefill(*sb, b, false, &lb).ok());
  auto sa2 = model_->NewSequence(), sb2 = model_->NewSequence();
  ASSERT_TRUE(model_->Prefill(*sa2, a, false, &la).ok());
  ASSERT_TRUE(model_->Prefill(*sb2, b, false, &lb).ok());
  Sequence* pair[2] = {sa.get(), sb.get()};
  const int32_t next[2] = {42, 1337};
  ASSERT_TRUE(model_->DecodeStep(pair, next, &lab).ok());
  Sequence* one_a = sa2.get();
  Sequence* one_b = sb2.get();
  ASSERT_TRUE(model_->DecodeStep(std::span(&one_a, 1), std::span(&next[0], 1), &la).ok());
  ASSERT_TRUE(model_->DecodeStep(std::span(&one_b, 1), std::span(&next[1], 1), &lb).ok());
  // Same tolerance as decode-vs-prefill: 0.5% of the largest logit.
  float range_a = 0, range_b = 0;
  for (int i = 0; i < vocab; ++i) {
    range_a = std::max(range_a, std::abs(la[i]));
    range_b = std::max(range_b, std::abs(lb[i]));
  }
  for (int i = 0; i < vocab; ++i) {
    ASSERT_NEAR(lab[i], la[i], 5e-3f * range_a);
    ASSERT_NEAR(lab[vocab + i], lb[i], 5e-3f * range_b);
  }
  EXPECT_EQ(std::max_element(lab.begin(), lab.begin() + vocab) - lab.begin(),
            std::max_element(la.begin(), la.end()) - la.begin());
  // Chunked prefill: first half, then the rest through the cache.
  std::vector<int32_t> both = a;
  both.insert(both.end(), b.begin(), b.end());
  auto whole = model_->Forward(both);
  ASSERT_TRUE(whole.ok());
  auto sc = model_->NewSequence();
  std::vector<float> first, rest;
  ASSERT_TRUE(model_->Prefill(*sc, a, true, &first).ok());
  ASSERT_TRUE(model_->Prefill(*sc, b, true, &rest).ok());
  EXPECT_EQ(sc->length(), static_cast<int64_t>(both.size()));
  for (size_t t = 0; t < b.size(); ++t) {
    const float* ref = whole->data() + (a.size() + t) * vocab;
    float range = 0;
    for (int i = 0; i < vocab; ++i) range = std::max(range, std::abs(ref[i]));
    for (int i = 0; i < vocab; ++i) ASSERT_NEAR(rest[t * vocab + i], ref[i], 5e-3f * range);
  }
}

// A decode batch larger than the quantized kernels' 8-input tile: every sequence gets the logits
// it gets alone, bit for bit, step after step (so a sequence decodes the same whatever its batch).
TEST_F(RealModel, BatchedDecodeEqualsEachSequenceAloneBitForBit) {
  const Tokenizer& tok = model_->tokenizer();
  const int vocab = model_->config().vocab_size;
  constexpr int kSeqs = 10;
  std::vector<std::unique_ptr<Sequence>> batch, alone;
  std::vector<Sequence*> ptrs;
  std::vector<int32_t> next;
  for (int i = 0; i < kSeqs; ++i) {
    const std::vector<int32_t> p = tok.Encode("Story " + std::to_string(i) + ": once upon a", true);
    std::vector<float> l;
    batch.push_back(model_->NewSequence());
    alone.push_back(model_->NewSequence());
    ASSERT_TRUE(model_->Prefill(*batch.back(), p, false, &l).ok());
    ASSERT_TRUE(model_->Prefill(*alone.back(), p, false, &l).ok());
    ptrs.push_back(batch.back().get());
    next.push_back(static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin()));
  }
  for (int step = 0; step < 3; ++step) {
    std::vector<float> together;
    ASSERT_TRUE(model_->DecodeStep(ptrs, next, &together).ok());
    for (int i = 0; i < kSeqs; ++i) {
      Sequence* one = alone[i].get();
      std::vector<float> l;
      ASSERT_TRUE(model_->DecodeStep(std::span(&one, 1), std::span(&next[i], 1), &l).ok());
      for (int v = 0; v < vocab; ++v) {
        ASSERT_EQ(together[i * vocab + v], l[v]) << "step " << step << " sequence " << i;
      }
      next[i] = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    }
  }
}

TEST_F(RealModel, GreedyGenerationKnowsParis) {
  const Tokenizer& tok = model_->tokenizer();
  std::vector<int32_t> ids = tok.Encode("The capital of France is", true);
  GenerateOptions g;
  g.max_new_tokens = 8;
  auto out = model_->Generate(ids, g);
  ASSERT_TRUE(out.ok()) << out.status();
  const std::string text = tok.Decode(*out);
  EXPECT_NE(text.find("Paris"), std::string::npos) << "generated: " << text;
}

TEST_F(RealModel, QkvHookSeesPostRopeTensors) {
  int calls = 0;
  int64_t last_pos0 = -1, last_t = -1;
  model_->set_qkv_hook([&](int layer, int64_t pos0, int64_t t, const float* q, const float* k,
                           const float* v) {
    ++calls;
    last_pos0 = pos0;
    last_t = t;
    EXPECT_TRUE(std::isfinite(q[0]) && std::isfinite(k[0]) && std::isfinite(v[0]));
  });
  std::vector<int32_t> ids = model_->tokenizer().Encode("Hello world", true);
  auto logits = model_->Forward(ids);
  model_->set_qkv_hook({});
  ASSERT_TRUE(logits.ok());
  EXPECT_EQ(calls, model_->config().num_layers);
  EXPECT_EQ(last_pos0, 0);
  EXPECT_EQ(last_t, static_cast<int64_t>(ids.size()));
}

}  // namespace
}  // namespace oscarkv::model

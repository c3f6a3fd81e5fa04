// The GPU runtime against the CPU runtime on the real default model (label gpu: runs on the GPU
// machine through scripts/device/model.sh; skipped where no GPU or no model is present).
//   * codec bf16: greedy generation token for token (64 steps) on real prompts; where the two
//     diverge it must be a near-tie of the CPU's own logits;
//   * codec oscar: teacher-forced decode logits within a relative-error budget, top-1 agreement;
//   * continuous batching: sequences stepped together equal each stepped alone;
//   * decode steps replayed from CUDA graphs equal kernel-by-kernel launches, bit for bit;
//   * prompt scoring: TokenLogprobsRowsCuda against engine::ComputeLogprobs (random and real
//     rows), and the chunked prefill's scores against the CPU engine's.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/model/model_kernels_cuda.h"
#include "lib/engine/logprobs.h"
#include "lib/engine/quant_kv_cache.h"
#include "lib/engine/serving_engine.h"
#include "lib/model/model.h"
#include "lib/model_gpu/block_import.h"
#include "lib/model_gpu/gpu_model.h"
#include "lib/model_gpu/gpu_weights.h"
#include "tests/testing/default_model_test.h"

namespace oscarkv::model_gpu {
namespace {

bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::string ReadFixture() {
  std::ifstream in("tests/lib/model_gpu/fixtures/moby_dick_opening.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int32_t Argmax(const float* l, int n) { return static_cast<int32_t>(std::max_element(l, l + n) - l); }

// kernels::TokenLogprobsRowsCuda over host rows [tokens.size(), vocab], poisoned outputs.
std::vector<engine::TokenLogprobs> GpuTokenLogprobs(const std::vector<float>& logits, int vocab,
                                                    const std::vector<int32_t>& tokens, int top_n,
                                                    kernels::TopListMethod method) {
  const int rows = static_cast<int>(tokens.size());
  float *d_logits = nullptr, *d_lp = nullptr, *d_top_lp = nullptr;
  int32_t *d_tokens = nullptr, *d_rank = nullptr, *d_top = nullptr;
  auto ok = [](cudaError_t e) { EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e); };
  ok(cudaMalloc(&d_logits, logits.size() * 4));
  ok(cudaMalloc(&d_tokens, rows * 4));
  ok(cudaMalloc(&d_lp, rows * 4));
  ok(cudaMalloc(&d_rank, rows * 4));
  ok(cudaMalloc(&d_top, std::max(1, rows * top_n) * 4));
  ok(cudaMalloc(&d_top_lp, std::max(1, rows * top_n) * 4));
  ok(cudaMemcpy(d_logits, logits.data(), logits.size() * 4, cudaMemcpyHostToDevice));
  ok(cudaMemcpy(d_tokens, tokens.data(), rows * 4, cudaMemcpyHostToDevice));
  ok(cudaMemset(d_lp, 0x7f, rows * 4));
  ok(cudaMemset(d_rank, 0x7f, rows * 4));
  ok(cudaMemset(d_top, 0x7f, std::max(1, rows * top_n) * 4));
  ok(cudaMemset(d_top_lp, 0x7f, std::max(1, rows * top_n) * 4));
  ok(kernels::TokenLogprobsRowsCuda(d_logits, rows, vocab, d_tokens, top_n, d_lp, d_rank, d_top,
                                    d_top_lp, nullptr, method));
  ok(cudaDeviceSynchronize());
  std::vector<float> lp(rows), top_lp(static_cast<size_t>(rows) * top_n);
  std::vector<int32_t> rank(rows), top(static_cast<size_t>(rows) * top_n);
  ok(cudaMemcpy(lp.data(), d_lp, rows * 4, cudaMemcpyDeviceToHost));
  ok(cudaMemcpy(rank.data(), d_rank, rows * 4, cudaMemcpyDeviceToHost));
  ok(cudaMemcpy(top.data(), d_top, top.size() * 4, cudaMemcpyDeviceToHost));
  ok(cudaMemcpy(top_lp.data(), d_top_lp, top_lp.size() * 4, cudaMemcpyDeviceToHost));
  for (void* p : {static_cast<void*>(d_logits), static_cast<void*>(d_tokens),
                  static_cast<void*>(d_lp), static_cast<void*>(d_rank), static_cast<void*>(d_top),
                  static_cast<void*>(d_top_lp)}) {
    ok(cudaFree(p));
  }
  std::vector<engine::TokenLogprobs> out(rows);
  for (int r = 0; r < rows; ++r) {
    out[r].token = tokens[r];
    out[r].logprob = lp[r];
    out[r].rank = rank[r];
    for (int j = 0; j < top_n; ++j) {
      out[r].top.emplace_back(top[r * top_n + j], top_lp[r * top_n + j]);
    }
  }
  return out;
}

// The kernel against engine::ComputeLogprobs (its CPU reference) row by row: ranks and the top
// lists' ids exactly (the comparisons are exact), logprobs within float rounding of the
// normaliser. Returns the largest logprob difference.
double ExpectSameLogprobs(const std::vector<float>& logits, int vocab,
                          const std::vector<int32_t>& tokens, int top_n, const std::string& what,
                          kernels::TopListMethod method = kernels::TopListMethod::kSelect) {
  const std::vector<engine::TokenLogprobs> gpu =
      GpuTokenLogprobs(logits, vocab, tokens, top_n, method);
  double worst = 0;
  auto close = [&](float a, float b, const std::string& where) {
    if (std::isinf(b)) {
      EXPECT_EQ(a, b) << where;
      return;
    }
    const double d = std::abs(double(a) - b);
    worst = std::max(worst, d);
    EXPECT_LE(d, 2e-5 * std::max(1.0, std::abs(double(b)))) << where << ": " << a << " vs " << b;
  };
  for (size_t r = 0; r < tokens.size(); ++r) {
    const engine::TokenLogprobs cpu = engine::ComputeLogprobs(
        std::span<const float>(logits.data() + r * vocab, vocab), tokens[r], top_n);
    const std::string where = what + " row " + std::to_string(r);
    EXPECT_EQ(gpu[r].rank, cpu.rank) << where;
    close(gpu[r].logprob, cpu.logprob, where);
    EXPECT_EQ(gpu[r].top.size(), cpu.top.size()) << where;
    if (gpu[r].top.size() != cpu.top.size()) continue;
    for (size_t j = 0; j < cpu.top.size(); ++j) {
      EXPECT_EQ(gpu[r].top[j].first, cpu.top[j].first) << where << " top " << j;
      close(gpu[r].top[j].second, cpu.top[j].second, where + " top " + std::to_string(j));
    }
  }
  return worst;
}

// Fresh random rows (both load paths), with ties, NaN and ±inf logits, a row of -inf only, a
// token whose logit is -inf, and every list length from 0 to the limit; both top-list methods.
// Two rows take kSelect's pass-per-entry fallback: at vocabulary 64 (float4 loads) fewer than
// 20 threads hold an element, and at 49,152 row 9's best values crowd the strides of 19 threads
// (float4 i goes to thread i % 512), so at 20 alternatives more of them come before the bound
// than the kernel keeps as candidates.
TEST(TokenLogprobsRowsCuda, MatchesTheCpuReferenceOnRandomRows) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU";
  std::mt19937 rng(20261202);
  for (const int vocab : {49152, 1001, 64, 7}) {
    for (const int top_n : {0, 1, 5, 20}) {
      if (top_n > vocab) continue;
      const int rows = 37;
      std::vector<float> logits(static_cast<size_t>(rows) * vocab);
      std::normal_distribution<float> normal(0.0f, 3.0f);
      for (float& x : logits) x = normal(rng);
      std::vector<int32_t> tokens(rows);
      std::uniform_int_distribution<int> id(0, vocab - 1);
      for (int r = 0; r < rows; ++r) {
        float* row = logits.data() + static_cast<size_t>(r) * vocab;
        tokens[r] = id(rng);
        if (r % 3 == 0) {  // ties, at the top too
          const float top = *std::max_element(row, row + vocab);
          for (int k = 0; k < 6; ++k) row[id(rng)] = top;
          row[tokens[r]] = top;
        }
        if (r % 4 == 1) {
          row[id(rng)] = NAN;
          row[id(rng)] = INFINITY;
          row[id(rng)] = -INFINITY;
        }
        if (r == 5) row[tokens[r]] = -INFINITY;
        if (r == 7) std::fill(row, row + vocab, -INFINITY);
        if (r == 8) std::fill(row, row + vocab, 1.5f);  // one tie over the whole row
        if (r == 9) {
          for (int i = 0; i < vocab; ++i) {
            if ((i / 4) % 512 < 19) row[i] = 20.0f + normal(rng);
          }
        }
      }
      for (const auto method : {kernels::TopListMethod::kSelect,
                                kernels::TopListMethod::kPassPerEntry}) {
        ExpectSameLogprobs(
            logits, vocab, tokens, top_n,
            "vocab " + std::to_string(vocab) + " top " + std::to_string(top_n) +
                (method == kernels::TopListMethod::kSelect ? " select" : " pass per entry"),
            method);
      }
    }
  }
}

class GpuModelTest : public testing::DefaultModelTest {
 protected:
  static void SetUpTestSuite() {
    if (HaveGpu()) DefaultModelTest::SetUpTestSuite();
  }
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no GPU";
    DefaultModelTest::SetUp();
  }

  static std::unique_ptr<engine::KvCacheFactory> Factory(const std::string& codec) {
    auto f = engine::KvCacheFactory::Create(
        model_->config(), codec, engine::ResolveCalibrationPath("", "default", codec));
    EXPECT_TRUE(f.ok()) << f.status();
    return f.ok() ? std::move(*f) : nullptr;
  }
  // The default model's ServingEngine for `codec` (block cuts, keys, the CPU reference).
  static absl::StatusOr<std::unique_ptr<engine::ServingEngine>> Engine(const std::string& codec) {
    return engine::ServingEngine::Create(
        model_, {.codec = codec,
                 .calibration_path = engine::ResolveCalibrationPath("", "default", codec)});
  }
  static std::unique_ptr<GpuModel> Gpu(const engine::KvCacheFactory& factory, int max_batch = 8,
                                       bool decode_graphs = true) {
    auto w = GpuWeights::Upload(model_->config(), model_->weights());
    EXPECT_TRUE(w.ok()) << w.status();
    GpuModelOptions o;
    o.decode_graphs = decode_graphs;
    o.max_batch = max_batch;
    o.max_prompt_tokens = 2048;
    o.kv_budget_bytes = int64_t{1} << 30;
    auto g = GpuModel::Create(model_->config(), std::move(*w), factory.tier_config(), o);
    EXPECT_TRUE(g.ok()) << g.status();
    return g.ok() ? std::move(*g) : nullptr;
  }
};

TEST_F(GpuModelTest, Bf16GreedyMatchesCpuTokenForToken) {
  auto factory = Factory("bf16");
  auto gpu = Gpu(*factory);
  ASSERT_NE(gpu, nullptr);
  const int vocab = model_->config().vocab_size;
  const std::vector<std::string> prompts = {
      "The capital of France is", "Once upon a time, in a small village by the sea,",
      ReadFixture().substr(0, 1200)};
  int64_t id = 0;
  for (const std::string& text : prompts) {
    const std::vector<int32_t> prompt = model_->tokenizer().Encode(text, true);
    // CPU greedy, keeping each step's logits.
    auto seq = model_->NewSequence();
    std::vector<float> logits;
    ASSERT_TRUE(model_->Prefill(*seq, prompt, false, &logits).ok());
    std::vector<int32_t> cpu_tokens;
    std::vector<std::vector<float>> cpu_logits;
    for (int step = 0; step < 64; ++step) {
      cpu_logits.push_back(logits);
      cpu_tokens.push_back(Argmax(logits.data(), vocab));
      model::Sequence* s = seq.get();
      ASSERT_TRUE(model_->DecodeStep({&s, 1}, {&cpu_tokens.back(), 1}, &logits).ok());
    }
    // GPU greedy, keeping each step's logits.
    int32_t next = 0;
    std::vector<float> gpu_l;
    ASSERT_TRUE(gpu->AddSequence(++id, prompt, prompt.size() + 64, &next, &gpu_l).ok());
    std::vector<int32_t> gpu_tokens{next};
    std::vector<std::vector<float>> gpu_logits{gpu_l};
    for (int step = 1; step < 64; ++step) {
      std::vector<int32_t> out;
      const int64_t ids[] = {id};
      ASSERT_TRUE(gpu->DecodeStep(ids, {&gpu_tokens.back(), 1}, &out, &gpu_l).ok());
      gpu_tokens.push_back(out[0]);
      gpu_logits.push_back(gpu_l);
    }
    int same = 0;
    while (same < 64 && gpu_tokens[same] == cpu_tokens[same]) ++same;
    // Logits are comparable while both saw the same tokens: steps 0..same.
    double max_abs = 0;
    for (int step = 0; step <= std::min(same, 63); ++step) {
      for (int v = 0; v < vocab; ++v) {
        max_abs = std::max<double>(max_abs, std::abs(gpu_logits[step][v] - cpu_logits[step][v]));
      }
    }
    gpu->RemoveSequence(id);
    std::printf("prompt %zu tokens: %d/64 greedy tokens identical, max |dlogit| %.4f\n",
                prompt.size(), same, max_abs);
    if (same < 64) {
      // A divergence is allowed only where the CPU itself nearly ties the two tokens.
      const std::vector<float>& l = cpu_logits[same];
      const double margin = l[cpu_tokens[same]] - l[gpu_tokens[same]];
      std::printf("  diverges at step %d: CPU margin %.4f\n", same, margin);
      EXPECT_LT(margin, 0.25) << "GPU picked a clearly worse token at step " << same;
    }
    EXPECT_LT(max_abs, 1.0);
  }
}

// Teacher-forced decode on the GPU and the CPU with one codec: per step the relative L2 error of
// the GPU logits against the CPU's, and whether their top-1 tokens agree.
struct ForcedComparison {
  std::vector<double> rel;
  std::vector<std::vector<float>> cpu_logits;  // per step
  int agree = 0;
  int int2_tokens = 0;
};

ForcedComparison CompareForced(const model::Model& m, const engine::KvCacheFactory& factory,
                               GpuModel& gpu, int64_t id, std::span<const int32_t> prompt,
                               std::span<const int32_t> forced) {
  ForcedComparison r;
  const int vocab = m.config().vocab_size;
  auto cache = factory.NewCache();
  EXPECT_TRUE(cache.ok());
  auto seq = m.NewSequence(std::move(*cache));
  std::vector<float> cpu, gpu_l;
  EXPECT_TRUE(m.Prefill(*seq, prompt, false, &cpu).ok());
  int32_t next = 0;
  EXPECT_TRUE(gpu.AddSequence(id, prompt, prompt.size() + forced.size() + 1, &next, &gpu_l).ok());
  for (size_t t = 0;; ++t) {
    double num = 0, den = 0;
    for (int v = 0; v < vocab; ++v) {
      num += (gpu_l[v] - cpu[v]) * double(gpu_l[v] - cpu[v]);
      den += double(cpu[v]) * cpu[v];
    }
    r.rel.push_back(std::sqrt(num / den));
    r.cpu_logits.push_back(cpu);
    r.agree += Argmax(gpu_l.data(), vocab) == Argmax(cpu.data(), vocab);
    if (t == forced.size()) break;
    model::Sequence* s = seq.get();
    EXPECT_TRUE(m.DecodeStep({&s, 1}, {&forced[t], 1}, &cpu).ok());
    std::vector<int32_t> out;
    const int64_t one[] = {id};
    EXPECT_TRUE(gpu.DecodeStep(one, {&forced[t], 1}, &out, &gpu_l).ok());
  }
  r.int2_tokens = gpu.pages().seq(id).int2_tokens;
  gpu.RemoveSequence(id);
  return r;
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / v.size();
}

// OSCAR on the GPU reproduces OSCAR on the CPU. Tolerance: mean relative L2 error of the logits
// <= 0.05 and top-1 agreement >= 90%, and well below what the codec itself changes (CPU oscar vs
// CPU bf16). It cannot be as tight as bf16's GPU-vs-CPU error: the GPU's bf16 activations move
// K/V rows slightly, and a row that crosses an INT2 rounding boundary moves by a whole step.
TEST_F(GpuModelTest, OscarDecodeLogitsMatchCpuOscar) {
  const std::vector<int32_t> ids = model_->tokenizer().Encode(ReadFixture(), true);
  ASSERT_GT(ids.size(), 500u);
  const std::span<const int32_t> prompt(ids.data(), 400);       // 80 history tokens
  const std::span<const int32_t> forced(ids.data() + 400, 96);  // + 96 steps, 12 demotions
  auto bf16_factory = Factory("bf16");
  auto bf16_gpu = Gpu(*bf16_factory);
  const ForcedComparison bf16 = CompareForced(*model_, *bf16_factory, *bf16_gpu, 1, prompt, forced);
  auto oscar_factory = Factory("oscar");
  ASSERT_NE(oscar_factory, nullptr);
  auto oscar_gpu = Gpu(*oscar_factory);
  const ForcedComparison oscar =
      CompareForced(*model_, *oscar_factory, *oscar_gpu, 1, prompt, forced);
  const int steps = static_cast<int>(oscar.rel.size());
  std::printf("teacher-forced GPU vs CPU logits, %d steps:\n"
              "  bf16:  rel err mean %.4f max %.4f, top-1 agreement %d/%d\n"
              "  oscar: rel err mean %.4f max %.4f, top-1 agreement %d/%d (INT2 history %d "
              "tokens at the end)\n  per step (bf16 / oscar):",
              steps, Mean(bf16.rel), *std::max_element(bf16.rel.begin(), bf16.rel.end()),
              bf16.agree, steps, Mean(oscar.rel),
              *std::max_element(oscar.rel.begin(), oscar.rel.end()), oscar.agree, steps,
              oscar.int2_tokens);
  for (int i = 0; i < steps; ++i) std::printf(" %.3f/%.3f", bf16.rel[i], oscar.rel[i]);
  std::vector<double> codec_effect;
  for (int i = 0; i < steps; ++i) {
    double num = 0, den = 0;
    for (size_t v = 0; v < bf16.cpu_logits[i].size(); ++v) {
      const double d = oscar.cpu_logits[i][v] - bf16.cpu_logits[i][v];
      num += d * d;
      den += double(bf16.cpu_logits[i][v]) * bf16.cpu_logits[i][v];
    }
    codec_effect.push_back(std::sqrt(num / den));
  }
  std::printf("\n  codec effect on the CPU (oscar vs bf16 logits): rel err mean %.4f max %.4f\n",
              Mean(codec_effect), *std::max_element(codec_effect.begin(), codec_effect.end()));
  EXPECT_GT(oscar.int2_tokens, 100);
  EXPECT_LT(Mean(oscar.rel), 0.05);
  EXPECT_LT(Mean(oscar.rel), 0.5 * Mean(codec_effect));
  EXPECT_GE(oscar.agree, steps * 9 / 10);
}

// Continuous batching: sequences of different lengths (one demoting during the run) stepped
// together give the logits each gives stepped alone, fed the same tokens. (Not bit-identical:
// the attention split plan depends on the batch, which changes the summation order.)
TEST_F(GpuModelTest, BatchedDecodeMatchesEachSequenceAlone) {
  auto factory = Factory("oscar");
  ASSERT_NE(factory, nullptr);
  auto gpu = Gpu(*factory);
  ASSERT_NE(gpu, nullptr);
  const int vocab = model_->config().vocab_size;
  const std::vector<int32_t> ids = model_->tokenizer().Encode(ReadFixture(), true);
  const std::vector<size_t> lengths = {30, 333, 520};
  const int steps = 24;
  // logits[mode][seq][step]
  std::vector<std::vector<std::vector<float>>> logits[2];
  for (int together = 0; together < 2; ++together) {
    logits[together].resize(lengths.size());
    for (size_t i = 0; i < lengths.size(); ++i) {
      const std::vector<int32_t> p(ids.begin(), ids.begin() + lengths[i]);
      int32_t next = 0;
      ASSERT_TRUE(gpu->AddSequence(100 + i, p, lengths[i] + steps + 1, &next).ok());
    }
    for (int step = 0; step < steps; ++step) {
      // The next text token of each sequence (teacher forcing keeps both runs on one path).
      std::vector<int32_t> tokens;
      for (size_t i = 0; i < lengths.size(); ++i) tokens.push_back(ids[lengths[i] + step]);
      if (together) {
        const std::vector<int64_t> seqs = {100, 101, 102};
        std::vector<int32_t> next;
        std::vector<float> l;
        ASSERT_TRUE(gpu->DecodeStep(seqs, tokens, &next, &l).ok());
        for (size_t i = 0; i < 3; ++i) {
          logits[1][i].emplace_back(l.begin() + i * vocab, l.begin() + (i + 1) * vocab);
        }
      } else {
        for (size_t i = 0; i < 3; ++i) {
          const int64_t one[] = {static_cast<int64_t>(100 + i)};
          std::vector<int32_t> next;
          std::vector<float> l;
          ASSERT_TRUE(gpu->DecodeStep(one, {&tokens[i], 1}, &next, &l).ok());
          logits[0][i].push_back(l);
        }
      }
    }
    EXPECT_GT(gpu->pages().seq(101).int2_tokens, 8);  // seq 101 demoted during the run
    for (size_t i = 0; i < 3; ++i) gpu->RemoveSequence(100 + i);
  }
  double worst = 0;
  for (size_t i = 0; i < 3; ++i) {
    for (int step = 0; step < steps; ++step) {
      double num = 0, den = 0;
      for (int v = 0; v < vocab; ++v) {
        const double d = logits[1][i][step][v] - logits[0][i][step][v];
        num += d * d;
        den += double(logits[0][i][step][v]) * logits[0][i][step][v];
      }
      worst = std::max(worst, std::sqrt(num / den));
    }
  }
  std::printf("batched vs alone: worst logits rel err %.2e\n", worst);
  EXPECT_LT(worst, 2e-3);
  EXPECT_EQ(gpu->pages().used_bytes(), 0);
}


// Continuous batching: sequences join and leave between steps without changing what the others
// compute. B runs 24 teacher-forced steps alone; then again while A leaves after step 8, C joins
// at step 8 and leaves after step 16. B's logits must be the same.
TEST_F(GpuModelTest, SequencesJoinAndLeaveBetweenSteps) {
  auto factory = Factory("oscar");
  ASSERT_NE(factory, nullptr);
  auto gpu = Gpu(*factory);
  ASSERT_NE(gpu, nullptr);
  const int vocab = model_->config().vocab_size;
  const std::vector<int32_t> ids = model_->tokenizer().Encode(ReadFixture(), true);
  auto add = [&](int64_t id, size_t len) {
    const std::vector<int32_t> p(ids.begin(), ids.begin() + len);
    int32_t next = 0;
    ASSERT_TRUE(gpu->AddSequence(id, p, len + 30, &next).ok());
  };
  const size_t len_a = 30, len_b = 333, len_c = 520;
  std::vector<std::vector<float>> alone, mixed;
  for (int pass = 0; pass < 2; ++pass) {
    add(2, len_b);
    if (pass == 1) add(1, len_a);
    for (int step = 0; step < 24; ++step) {
      if (pass == 1 && step == 8) {
        gpu->RemoveSequence(1);
        add(3, len_c);
      }
      if (pass == 1 && step == 16) gpu->RemoveSequence(3);
      std::vector<int64_t> seqs = {2};
      std::vector<int32_t> tokens = {ids[len_b + step]};
      if (pass == 1 && step < 8) {
        seqs.push_back(1);
        tokens.push_back(ids[len_a + step]);
      } else if (pass == 1 && step < 16) {
        seqs.insert(seqs.begin(), 3);  // B second in the batch this time
        tokens.insert(tokens.begin(), ids[len_c + step - 8]);
      }
      std::vector<int32_t> next;
      std::vector<float> l;
      ASSERT_TRUE(gpu->DecodeStep(seqs, tokens, &next, &l).ok());
      const size_t b_row = (pass == 1 && step >= 8 && step < 16) ? 1 : 0;
      (pass == 0 ? alone : mixed)
          .emplace_back(l.begin() + b_row * vocab, l.begin() + (b_row + 1) * vocab);
    }
    gpu->RemoveSequence(2);
  }
  double worst = 0;
  for (int step = 0; step < 24; ++step) {
    double num = 0, den = 0;
    for (int v = 0; v < vocab; ++v) {
      const double d = mixed[step][v] - alone[step][v];
      num += d * d;
      den += double(alone[step][v]) * alone[step][v];
    }
    worst = std::max(worst, std::sqrt(num / den));
  }
  std::printf("join/leave vs alone: worst logits rel err %.2e\n", worst);
  EXPECT_LT(worst, 2e-3);
  EXPECT_EQ(gpu->pages().used_bytes(), 0);
}

// Decode steps replayed from CUDA graphs (GpuModelOptions::decode_graphs) give the bits of steps
// launched kernel by kernel: two sequences decode past demotions, a third joins at step 12 and
// the first leaves at step 25 (new step shapes, so new captures); and graphs did replay.
TEST_F(GpuModelTest, GraphReplayedDecodeEqualsKernelByKernelLaunches) {
  const std::vector<int32_t> ids = model_->tokenizer().Encode(ReadFixture(), true);
  const size_t lengths[] = {30, 333, 100};
  const int steps = 40;
  for (const std::string codec : {"bf16", "oscar"}) {
    auto factory = Factory(codec);
    ASSERT_NE(factory, nullptr);
    std::vector<float> logits[2];  // [graphs]: every step's logits, concatenated
    for (int graphs = 0; graphs < 2; ++graphs) {
      auto gpu = Gpu(*factory, 8, graphs == 1);
      ASSERT_NE(gpu, nullptr);
      auto add = [&](int64_t id) {
        const size_t len = lengths[id];
        const std::vector<int32_t> p(ids.begin(), ids.begin() + len);
        int32_t next = 0;
        ASSERT_TRUE(gpu->AddSequence(id, p, len + steps + 1, &next).ok());
      };
      add(0);
      add(1);
      for (int step = 0; step < steps; ++step) {
        if (step == 12) add(2);
        if (step == 25) gpu->RemoveSequence(0);
        std::vector<int64_t> seqs;
        std::vector<int32_t> tokens;
        for (int64_t id = 0; id < 3; ++id) {
          const bool in = (id == 0 && step < 25) || id == 1 || (id == 2 && step >= 12);
          if (!in) continue;
          seqs.push_back(id);
          tokens.push_back(ids[lengths[id] + step - (id == 2 ? 12 : 0)]);
        }
        std::vector<int32_t> next;
        std::vector<float> l;
        ASSERT_TRUE(gpu->DecodeStep(seqs, tokens, &next, &l).ok()) << codec << " step " << step;
        logits[graphs].insert(logits[graphs].end(), l.begin(), l.end());
      }
      if (codec == "oscar") {
        EXPECT_GT(gpu->pages().seq(1).int2_tokens, 8);  // demoted meanwhile
      }
      const StepGraphCache::Counts& n = gpu->decode_graph_counts();
      std::printf("%s, graphs %d: %lld direct, %lld captured, %lld replayed steps\n", codec.c_str(),
                  graphs, static_cast<long long>(n.direct), static_cast<long long>(n.captured),
                  static_cast<long long>(n.replayed));
      if (graphs == 1) {
        EXPECT_GT(n.replayed, steps / 4) << codec;
        EXPECT_EQ(n.capture_failures, 0) << codec;
      } else {
        EXPECT_EQ(n.direct + n.captured + n.replayed, 0) << codec;
      }
    }
    ASSERT_EQ(logits[0].size(), logits[1].size());
    EXPECT_EQ(0, std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * 4)) << codec;
  }
}

// Moving a sequence between GPU models (what a prefill GPU does for a decode GPU): A prefills and
// decodes past a demotion, packs the sequence; B (which already holds another sequence, so the
// pages land on other physical ids) adds it from the packed bytes. Both then decode the same
// tokens: B's logits must equal A's bit for bit, for bf16 and oscar.
TEST_F(GpuModelTest, PackedSequenceContinuesBitIdenticallyInAnotherModel) {
  const std::vector<int32_t> ids = model_->tokenizer().Encode(ReadFixture(), true);
  const size_t prompt = 400, before = 12, after = 16;
  ASSERT_GT(ids.size(), prompt + before + after);
  for (const std::string codec : {"bf16", "oscar"}) {
    auto factory = Factory(codec);
    ASSERT_NE(factory, nullptr);
    auto a = Gpu(*factory), b = Gpu(*factory);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    int32_t next = 0;
    const std::vector<int32_t> p(ids.begin(), ids.begin() + prompt);
    ASSERT_TRUE(a->AddSequence(1, p, prompt + before + after, &next).ok());
    ASSERT_TRUE(b->AddSequence(5, std::span(ids).subspan(0, 50), 100, &next).ok());
    std::vector<int32_t> greedy;
    for (size_t t = 0; t < before; ++t) {
      ASSERT_TRUE(
          a->DecodeStep(std::vector<int64_t>{1}, std::vector<int32_t>{ids[prompt + t]}, &greedy)
              .ok());
    }
    const int64_t length = a->pages().seq(1).length;
    const PackedKvLayout layout = a->PackedLayout(length);
    std::printf("%s: %lld tokens pack to %lld bytes (%d BF16 + %d INT2 pages per layer)\n",
                codec.c_str(), static_cast<long long>(length),
                static_cast<long long>(layout.bytes()), layout.bf16_pages, layout.int2_pages);
    DeviceBuffer packed;
    ASSERT_TRUE(packed.Allocate(layout.bytes(), "packed").ok());
    const std::span<std::byte> bytes(packed.as<std::byte>(), layout.bytes());
    ASSERT_TRUE(a->PackSequence(1, bytes).ok());
    EXPECT_EQ(b->AddPackedSequence(7, length, length + 1, bytes.subspan(1)).code(),
              absl::StatusCode::kInvalidArgument);  // wrong size: refused, nothing admitted
    ASSERT_TRUE(b->AddPackedSequence(7, length, length + after, bytes).ok());
    for (size_t t = before; t < before + after; ++t) {
      std::vector<float> la, lb;
      const std::vector<int32_t> tok = {ids[prompt + t]};
      ASSERT_TRUE(a->DecodeStep(std::vector<int64_t>{1}, tok, &greedy, &la).ok());
      ASSERT_TRUE(b->DecodeStep(std::vector<int64_t>{7}, tok, &greedy, &lb).ok());
      ASSERT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)))
          << codec << " step " << t;
    }
  }
}

// A GPU prefill worker's export: the prompt's pages (PackSequence) and tail rows cut into blocks
// (BlocksFromPackedKv) that are valid kvformat blocks, convert back to the very same pages
// (PackedKvFromBlocks: what a GPU decode worker admits), and, rebuilt by a CPU decode worker
// (ServingEngine::SequenceFromBlocks), decode like the GPU sequence within the GPU/CPU budget.
TEST_F(GpuModelTest, PrefillExportsBlocksThatRoundTripToTheSamePages) {
  const std::vector<int32_t> ids = model_->tokenizer().Encode(ReadFixture(), true);
  const size_t prompt = 700, steps = 16;
  ASSERT_GT(ids.size(), prompt + steps);
  const std::span<const int32_t> p(ids.data(), prompt);
  for (const std::string codec : {"bf16", "oscar"}) {
    auto engine = Engine(codec);
    ASSERT_TRUE(engine.ok()) << engine.status();
    auto gpu = Gpu(*Factory(codec));
    ASSERT_NE(gpu, nullptr);
    const BlockCutSpec cut = CutSpecFor(**engine, p);
    TailRows tail;
    tail.begin = cut.reuse_boundary;
    int32_t next = 0;
    ASSERT_TRUE(gpu->AddSequence(1, p, prompt + steps, &next, nullptr, nullptr, &tail).ok());
    const PackedKvLayout layout = gpu->PackedLayout(prompt);
    DeviceBuffer dev;
    ASSERT_TRUE(dev.Allocate(layout.bytes(), "packed").ok());
    ASSERT_TRUE(gpu->PackSequence(1, std::span<std::byte>(dev.as<std::byte>(), layout.bytes())).ok());
    PackedKv packed{layout, std::vector<std::byte>(layout.bytes())};
    ASSERT_EQ(cudaMemcpy(packed.bytes.data(), dev.get(), layout.bytes(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    auto shape = GpuPageShape(model_->config(), (*engine)->codec());
    ASSERT_TRUE(shape.ok());
    auto blocks = BlocksFromPackedKv(*shape, packed, tail, cut);
    ASSERT_TRUE(blocks.ok()) << blocks.status();
    std::vector<kvformat::BlockView> views;
    for (const std::vector<std::byte>& b : *blocks) {
      auto v = kvformat::ParseBlock(b);
      ASSERT_TRUE(v.ok()) << v.status();
      views.push_back(*v);
    }
    auto back = PackedKvFromBlocks(*shape, cut.codec, cut.clips.k, cut.clips.v, views);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(back->bytes == packed.bytes) << codec;

    auto cpu = (*engine)->SequenceFromBlocks(views);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    int agree = 0;
    double rel_sum = 0;
    std::vector<int32_t> greedy;
    for (size_t t = 0; t < steps; ++t) {
      std::vector<float> lg, lc;
      const std::vector<int32_t> tok = {ids[prompt + t]};
      ASSERT_TRUE(gpu->DecodeStep(std::vector<int64_t>{1}, tok, &greedy, &lg).ok());
      model::Sequence* seqs[] = {cpu->get()};
      ASSERT_TRUE((*engine)->DecodeStep(seqs, tok, &lc).ok());
      double num = 0, den = 0;
      for (size_t v = 0; v < lc.size(); ++v) {
        num += (double(lg[v]) - lc[v]) * (double(lg[v]) - lc[v]);
        den += double(lc[v]) * lc[v];
      }
      rel_sum += std::sqrt(num / den);
      agree += Argmax(lg.data(), static_cast<int>(lg.size())) ==
               Argmax(lc.data(), static_cast<int>(lc.size()));
    }
    std::printf("%s: %zu blocks; GPU vs CPU decode over GPU-exported blocks: rel err mean %.4f, "
                "top-1 %d/%zu\n", codec.c_str(), blocks->size(), rel_sum / steps, agree, steps);
    EXPECT_LT(rel_sum / steps, 0.05) << codec;
    EXPECT_GE(agree, static_cast<int>(steps) * 9 / 10) << codec;
  }
}

// The chunked prefill on the GPU (what prefill workers sharing the kvstore run): a prompt
// prefilled over the stored blocks of an earlier prompt with the same start gives the same blocks
// and logits, bit for bit, as without them (a hit changes work, never output); and its logits
// stay within the GPU/CPU budget of the CPU engine's chunked prefill of the same prompt.
TEST_F(GpuModelTest, ChunkedPrefillOverAStoredPrefixEqualsComputingItAll) {
  // The fixture twice over: about 1600 tokens, six chunks.
  const std::vector<int32_t> ids =
      model_->tokenizer().Encode(ReadFixture() + "\n\n" + ReadFixture(), true);
  ASSERT_GT(ids.size(), 1400u);
  const std::span<const int32_t> first(ids.data(), 1100), second(ids.data(), 1400);
  for (const std::string codec : {"bf16", "oscar"}) {
    auto engine = Engine(codec);
    ASSERT_TRUE(engine.ok()) << engine.status();
    auto gpu = Gpu(*Factory(codec));
    ASSERT_NE(gpu, nullptr);
    const std::string tag = gpu->numerics_tag();
    const BlockCutSpec cut1 = CutSpecFor(**engine, first, tag);
    const BlockCutSpec cut2 = CutSpecFor(**engine, second, tag);
    ASSERT_GT(cut1.reuse_boundary, 0);
    EXPECT_NE(cut2.keys[0], CutSpecFor(**engine, second).keys[0]);  // GPU keys are not the CPU's
    auto a = gpu->PrefillChunked(first, cut1, 256, {});
    ASSERT_TRUE(a.ok()) << a.status();
    auto full = gpu->PrefillChunked(second, cut2, 256, {});
    ASSERT_TRUE(full.ok()) << full.status();
    std::vector<kvformat::BlockView> stored;
    for (size_t b = 0; b < cut1.keys.size(); ++b) {
      auto v = kvformat::ParseBlock(a->blocks[b]);
      ASSERT_TRUE(v.ok()) << v.status();
      stored.push_back(*v);
    }
    auto hit = gpu->PrefillChunked(second, cut2, 256, stored);
    ASSERT_TRUE(hit.ok()) << hit.status();
    EXPECT_EQ(hit->reused_tokens, cut1.reuse_boundary) << codec;
    EXPECT_EQ(full->reused_tokens, 0);
    ASSERT_EQ(hit->blocks.size(), full->blocks.size());
    for (size_t b = 0; b < full->blocks.size(); ++b) {
      EXPECT_TRUE(hit->blocks[b] == full->blocks[b]) << codec << " block " << b;
    }
    EXPECT_EQ(0, std::memcmp(hit->last_logits.data(), full->last_logits.data(),
                             full->last_logits.size() * sizeof(float)))
        << codec;
    // The same prefix gives the same blocks in both prompts.
    for (size_t b = 0; b < cut1.keys.size(); ++b) {
      EXPECT_TRUE(a->blocks[b] == full->blocks[b]) << codec << " prefix block " << b;
    }

    // Against the CPU engine's chunked prefill of the same prompt. The GPU's bf16 activations
    // move some K/V values across INT2 code boundaries (and change rows' fp16 params); later
    // chunks attend to those stored codes, so the difference cascades: on the H200, 6.5% of the
    // quantised blocks' bytes differ in the first chunk, 11-15% in the second, ~19% in the
    // fourth, and the last logits differ by 0.2 (relative) with the same top-1 (0.30 with the
    // calibration that setup.sh built on an AMD EPYC, 0.48 with session 29's: its rotations come
    // from OpenBLAS, whose kernels round per CPU, and this cascade amplifies any change; the
    // byte fractions above stayed within 0.002 across all three). That is why GPU
    // and CPU keys are kept apart (numerics tag). A broken stored form (e.g. a wrong rotation
    // back) would instead make the later chunks' codes unrelated to the CPU's (most bytes
    // differ) and the top-1 change.
    auto cpu = (*engine)->Prefill(second);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    double num = 0, den = 0;
    for (size_t v = 0; v < cpu->last_logits.size(); ++v) {
      const double diff = double(full->last_logits[v]) - cpu->last_logits[v];
      num += diff * diff;
      den += double(cpu->last_logits[v]) * cpu->last_logits[v];
    }
    const int vocab = static_cast<int>(cpu->last_logits.size());
    const bool same_top1 =
        Argmax(full->last_logits.data(), vocab) == Argmax(cpu->last_logits.data(), vocab);
    // Per quantised block: the fraction of payload bytes (codes and params) that differ.
    std::vector<double> mismatch;
    double first = 0, later = 0;
    int n_first = 0, n_later = 0;
    for (size_t b = 0; b < full->blocks.size(); ++b) {
      if (CutBlockKind(cut2, b) != kvformat::BlockKind::kQuantized) continue;
      const auto& g = full->blocks[b];
      const auto& c = cpu->blocks[b].bytes;
      ASSERT_EQ(g.size(), c.size()) << codec << " block " << b;
      int64_t differ = 0;
      for (size_t i = kvformat::kBlockHeaderBytes; i < g.size(); ++i) differ += g[i] != c[i];
      mismatch.push_back(double(differ) / double(g.size() - kvformat::kBlockHeaderBytes));
      (b < 256 / 64 ? first : later) += mismatch.back();
      ++(b < 256 / 64 ? n_first : n_later);
    }
    if (n_first > 0) first /= n_first;
    if (n_later > 0) later /= n_later;
    std::printf("%s chunked prefill of 1400 tokens: %zu blocks, GPU vs CPU last logits rel err "
                "%.4f, top-1 %s; quantised-block bytes differing from the CPU's: first chunk "
                "%.4f, later chunks %.4f\n  per block:", codec.c_str(), full->blocks.size(),
                std::sqrt(num / den), same_top1 ? "same" : "differs", first, later);
    for (double m : mismatch) std::printf(" %.3f", m);
    std::printf("\n");
    EXPECT_TRUE(same_top1) << codec;
    EXPECT_LT(std::sqrt(num / den), codec == "bf16" ? 0.05 : 0.6) << codec;
    if (n_first > 0 && n_later > 0) {
      EXPECT_LT(later, 0.4) << codec;
    }
    if (codec == "oscar") {
      EXPECT_GT(n_later, 0);
    }
    // The blocks import into a GPU decode worker's pages.
    std::vector<kvformat::BlockView> views;
    for (const auto& b : full->blocks) views.push_back(*kvformat::ParseBlock(b));
    auto shape = GpuPageShape(model_->config(), (*engine)->codec());
    ASSERT_TRUE(shape.ok());
    EXPECT_TRUE(PackedKvFromBlocks(*shape, cut2.codec, cut2.clips.k, cut2.clips.v, views).ok());
  }
}

// The chunked prefill asks its stop check before each chunk and ends with its error (a prefill
// worker whose caller left), as ServingEngine::Prefill does on the CPU.
TEST_F(GpuModelTest, ChunkedPrefillEndsWhenItsStopCheckSaysSo) {
  const std::vector<int32_t> ids = model_->tokenizer().Encode(ReadFixture(), true);
  ASSERT_GT(ids.size(), 600u);
  const std::span<const int32_t> prompt(ids.data(), 600);  // chunks at 0, 256, 512
  auto engine = Engine("oscar");
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto gpu = Gpu(*Factory("oscar"));
  ASSERT_NE(gpu, nullptr);
  const BlockCutSpec cut = CutSpecFor(**engine, prompt, gpu->numerics_tag());
  int asked = 0;
  const engine::PrefillStopCheck stop_at_second = [&] {
    return ++asked == 2 ? absl::CancelledError("caller left") : absl::OkStatus();
  };
  auto stopped = gpu->PrefillChunked(prompt, cut, 256, {}, -1, &stop_at_second);
  EXPECT_EQ(stopped.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(asked, 2);
  asked = 0;
  const engine::PrefillStopCheck go_on = [&] {
    ++asked;
    return absl::OkStatus();
  };
  auto whole = gpu->PrefillChunked(prompt, cut, 256, {}, -1, &go_on);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(asked, 3);
  auto plain = gpu->PrefillChunked(prompt, cut, 256, {});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(whole->blocks, plain->blocks) << "a stopped prefill before leaves nothing behind";
  EXPECT_EQ(whole->last_logits, plain->last_logits);
}

// Prompt scoring on the GPU's chunked prefill (echo with logprobs, prompt_logprobs): the sink
// sees every computed position chunk by chunk; asking for it changes neither the blocks nor the
// last logits; and the prompt's logprobs stay close to the CPU engine's (bf16: the GPU/CPU
// rounding only; oscar: plus the codes that rounding moves, see the test above), with the same
// top-1 at 90% of the positions or more.
TEST_F(GpuModelTest, ChunkedPrefillScoresEveryPromptToken) {
  const std::vector<int32_t> ids = model_->tokenizer().Encode(ReadFixture(), true);
  ASSERT_GT(ids.size(), 600u);
  const std::span<const int32_t> prompt(ids.data(), 600);
  const int64_t vocab = model_->config().vocab_size;
  for (const std::string codec : {"bf16", "oscar"}) {
    auto engine = Engine(codec);
    ASSERT_TRUE(engine.ok()) << engine.status();
    auto gpu = Gpu(*Factory(codec));
    ASSERT_NE(gpu, nullptr);
    const BlockCutSpec cut = CutSpecFor(**engine, prompt, gpu->numerics_tag());
    auto with = gpu->PrefillChunked(prompt, cut, 256, {}, /*prompt_logprobs=*/3);
    ASSERT_TRUE(with.ok()) << with.status();
    auto without = gpu->PrefillChunked(prompt, cut, 256, {});
    ASSERT_TRUE(without.ok()) << without.status();
    const std::vector<engine::TokenLogprobs>& scored = with->prompt_logprobs;
    ASSERT_EQ(scored.size(), prompt.size() - 1) << codec;
    EXPECT_TRUE(without->prompt_logprobs.empty());
    EXPECT_EQ(0, std::memcmp(with->last_logits.data(), without->last_logits.data(),
                             without->last_logits.size() * sizeof(float)))
        << codec;
    ASSERT_EQ(with->blocks.size(), without->blocks.size());
    for (size_t b = 0; b < with->blocks.size(); ++b) {
      EXPECT_TRUE(with->blocks[b] == without->blocks[b]) << codec << " block " << b;
    }
    EXPECT_TRUE(absl::IsInvalidArgument(
        gpu->PrefillChunked(prompt, cut, 256, {}, engine::kMaxTopLogprobs + 1).status()));

    std::vector<engine::TokenLogprobs> cpu;
    std::vector<float> first_chunk;  // the CPU's logits of positions 0..255: real model rows
    const engine::ChunkLogitsSink cpu_sink = [&](int64_t first, std::span<const float> logits) {
      if (first == 0) first_chunk.assign(logits.begin(), logits.end());
      engine::AppendPromptLogprobs(prompt, first, logits, vocab, 3, &cpu);
      return absl::OkStatus();
    };
    ASSERT_TRUE((*engine)->Prefill(prompt, {}, false, &cpu_sink).ok());
    ASSERT_EQ(cpu.size(), scored.size());
    // The scoring kernel on the same real rows as the CPU: equal up to float rounding.
    ASSERT_EQ(first_chunk.size(), static_cast<size_t>(256 * vocab));
    const double kernel_diff =
        ExpectSameLogprobs(first_chunk, static_cast<int>(vocab),
                           std::vector<int32_t>(prompt.begin() + 1, prompt.begin() + 257), 20,
                           codec + " model rows");
    std::printf("%s: scoring kernel vs ComputeLogprobs on 256 CPU logits rows: max |diff| %.2g\n",
                codec.c_str(), kernel_diff);
    double diff_sum = 0, diff_max = 0;
    int same_top1 = 0;
    for (size_t i = 0; i < cpu.size(); ++i) {
      EXPECT_EQ(scored[i].token, prompt[i + 1]);
      const double d = std::abs(double(scored[i].logprob) - cpu[i].logprob);
      diff_sum += d;
      diff_max = std::max(diff_max, d);
      same_top1 += scored[i].top[0].first == cpu[i].top[0].first;
    }
    const double mean = diff_sum / static_cast<double>(cpu.size());
    std::printf("%s: GPU vs CPU prompt logprobs over %zu tokens: mean |diff| %.4f, max %.4f, "
                "same top-1 %d\n", codec.c_str(), cpu.size(), mean, diff_max, same_top1);
    // Measured on the H200 (session 35): bf16 0.022 mean (max 0.18), top-1 588/599; oscar 0.072
    // (max 1.2), 568/599 — the teacher-forced GPU/CPU logits above differ by as much.
    EXPECT_LT(mean, codec == "bf16" ? 0.04 : 0.15) << codec;
    EXPECT_GE(same_top1, static_cast<int>(cpu.size()) * 9 / 10) << codec;
  }
}

}  // namespace
}  // namespace oscarkv::model_gpu

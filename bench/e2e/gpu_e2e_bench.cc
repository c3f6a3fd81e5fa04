// End-to-end GPU benchmark of lib/model_gpu (issue #7): BF16 KV vs OSCAR INT2 KV in the same run.
//   latency    batch-1 decode ms/token vs context length, the codecs' steps interleaved
//   throughput decode tokens/s under a fixed KV byte budget, with the batch each codec can hold
//   ttft       prefill (incl. cache writes and INT2 demotion) of one prompt
//   score      prompt scoring (echo with logprobs, prompt_logprobs) with the real default model:
//              GpuModel::PrefillChunked of one prompt without and with every token scored on the
//              GPU (0, 5, 20 alternatives), against what the host's engine::ComputeLogprobs
//              (the CPU path) takes for the same rows, timed in the same run; and the scoring
//              kernel alone (TokenLogprobsRowsCuda) on as many random rows, its two top-list
//              methods (kSelect, and the former kPassPerEntry) alternated
//   quality    true-decode teacher forcing on real text with the real default model: windows of
//              --contexts tokens decoded token by token through each codec's GPU cache (what
//              quant.md E.0's decode-equivalent emulation emulates); per codec vs bf16: ΔNLL,
//              token KL(p_bf16 || p_codec), top-1 agreement over t in [384, T-2] and t >= 1024,
//              means over windows with 95% bootstrap intervals
//   greedy     greedy agreement vs bf16 (first divergence, token agreement) on real prompts
//   niah       needle in a haystack (quant.md E, issue #4) through each codec's GPU cache: the
//              prompts of lib/eval/niah.h (the same ones `oscarkv eval --niah` builds for the
//              same texts, contexts, depths, trials and seed), each prefilled in one pass, then
//              the question and the passkey teacher-forced as batched decode steps; exact match,
//              passkey probability per depth and its ratio to bf16's
// --config qwen3-8b-like builds random bf16 weights of that shape (36 layers, 32/8 heads,
// head_dim 128): SPEED ONLY, no checkpoint of that size is installable here. --config default
// loads the real default model. latency and throughput fill the KV pages with random values
// instead of prefilling (speed only: the kernels read the same bytes); ttft runs the real
// prefill path. Output: one Markdown table row per measurement.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <cmath>
#include <fstream>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/e2e/gpu_bench_setup.h"
#include "kernels/model/model_kernels_cuda.h"
#include "lib/base/log.h"
#include "lib/base/status_macros.h"
#include "lib/engine/logprobs.h"
#include "lib/engine/quant_kv_cache.h"
#include "lib/engine/serving_engine.h"
#include "lib/eval/niah.h"
#include "lib/model/model.h"
#include "lib/model_gpu/gpu_model.h"
#include "lib/quant/codec_spec.h"

namespace oscarkv::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string mode = "latency";
  std::string config = "qwen3-8b-like";
  std::string codecs = "bf16,oscar";
  std::string contexts = "8192,32768,65536,131072";
  std::string budgets_gib = "16,64";
  int prompt = 32768;
  int output = 512;
  int steps = 32;
  int max_batch = 256;
  std::string text;   // quality: comma-separated text files
  int windows = 20;   // quality: windows per context
  std::string depths = "10,30,50,70,90";  // niah: needle depths in percent
  int trials = 3;                          // niah: haystacks per (context, depth)
  uint64_t seed = eval::kDefaultEvalSeed;  // niah: the eval seed (same prompts as oscarkv eval)
  std::string prefill_kernels = "sm90,mma";  // ttft: prefill attention kernels, in one run
  std::string decode_graphs = "on";          // on | off | both (latency: both, interleaved)
};

// Median seconds per decode step over `steps` steps of all `ids` together.
absl::StatusOr<double> TimeSteps(model_gpu::GpuModel& m, const std::vector<int64_t>& ids, int steps) {
  std::vector<int32_t> tokens(ids.size(), 100), next;
  std::vector<double> t;
  for (int i = 0; i < steps + 2; ++i) {
    const auto t0 = Clock::now();
    OSCARKV_RETURN_IF_ERROR(m.DecodeStep(ids, tokens, &next));
    if (i >= 2) t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    tokens = next;
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The comma-separated integers of `s` (a flag that ValidateFlags accepted, so a bad entry here is
// a bug).
std::vector<int64_t> ParseInts(const std::string& s) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    int64_t v = 0;
    CHECK(absl::SimpleAtoi(part, &v)) << "unvalidated integer list '" << s << "'";
    out.push_back(v);
  }
  return out;
}

// kInvalidArgument naming `flag` unless `s` is a non-empty comma-separated list of integers in
// [lo, hi].
absl::Status ValidateIntList(absl::string_view flag, const std::string& s, int64_t lo, int64_t hi) {
  int n = 0;
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < lo || v > hi) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": '", part, "' is not an integer in [", lo, ", ", hi, "]"));
    }
    ++n;
  }
  if (n == 0) return absl::InvalidArgumentError(absl::StrCat(flag, ": empty list"));
  return absl::OkStatus();
}

// Checks the flags the modes would otherwise fail on mid-run (an uncaught exception, an empty
// median); before the device check, so a bad argument is exit 2 on any machine.
absl::Status ValidateFlags(const Flags& f) {
  OSCARKV_RETURN_IF_ERROR(ValidateIntList("--contexts", f.contexts, 1, INT32_MAX));
  OSCARKV_RETURN_IF_ERROR(ValidateIntList("--budgets-gib", f.budgets_gib, 1, int64_t{1} << 20));
  OSCARKV_RETURN_IF_ERROR(ValidateIntList("--depths", f.depths, 0, 100));
  if (f.steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--steps: want >= 1, got ", f.steps));
  }
  return absl::OkStatus();
}

// Batch-1 decode latency per codec (and graph mode) and context. Every arm's model is built first
// and their steps alternate (one step of each in turn), so that drifts in the host's launch speed
// fall on every arm alike: the default model's step without graphs is launch-bound, and on the
// H200 machine its median moved by up to 36% between two processes of the same build
// (bench/e2e/RESULTS.md).
absl::Status Latency(const Flags& f) {
  struct Arm {
    std::string codec;
    GpuBenchSetup setup;
    std::unique_ptr<model_gpu::GpuModel> model;
    std::vector<int32_t> tokens{100};
    std::vector<double> seconds;
  };
  const std::vector<int64_t> contexts = ParseInts(f.contexts);
  const int64_t longest = *std::max_element(contexts.begin(), contexts.end()) + f.steps + 8;
  std::vector<Arm> arms;
  std::vector<bool> graph_modes;  // GpuModelOptions::decode_graphs of the arms
  if (f.decode_graphs != "off") graph_modes.push_back(true);
  if (f.decode_graphs != "on") graph_modes.push_back(false);
  auto add_arm = [&](const std::string& codec, bool graphs) -> absl::Status {
    Arm& a = arms.emplace_back();
    a.codec = codec;
    if (graph_modes.size() > 1) a.codec += graphs ? " (graphs)" : " (no graphs)";
    OSCARKV_ASSIGN_OR_RETURN(a.setup, MakeGpuBenchSetup(f.config, codec));
    model_gpu::GpuModelOptions o;
    o.decode_graphs = graphs;
    o.max_batch = 1;
    o.max_prompt_tokens = 256;
    // Room for the longest context in this codec's pages.
    model_gpu::KvPageTableConfig pc;
    pc.num_layers = a.setup.config.num_layers;
    pc.num_kv_heads = a.setup.config.num_kv_heads;
    pc.head_dim = a.setup.config.head_dim;
    pc.windowed = codec != "bf16";
    const model_gpu::PageCount pages = model_gpu::PagesForTokens(pc, longest);
    o.kv_budget_bytes = pages.bf16 * model_gpu::Bf16PageBytes(pc) +
                        pages.int2 * model_gpu::Int2PageBytes(pc) + (int64_t{64} << 20);
    OSCARKV_ASSIGN_OR_RETURN(a.model, MakeGpuBenchModel(a.setup, o));
    return absl::OkStatus();
  };
  for (const bool graphs : graph_modes) {
    for (absl::string_view codec : absl::StrSplit(f.codecs, ',')) {
      OSCARKV_RETURN_IF_ERROR(add_arm(std::string(codec), graphs));
    }
  }
  std::printf(
      "| config | codec | context | decode ms/token (B=1, median of %d) | p10 / p90 ms | "
      "speedup over %s (same run) | KV bytes |\n|---|---|---|---|---|---|---|\n",
      f.steps, arms[0].codec.c_str());
  int64_t id = 0;
  for (int64_t ctx : contexts) {
    ++id;
    for (Arm& a : arms) {
      OSCARKV_RETURN_IF_ERROR(a.model->AddSyntheticSequence(id, ctx, ctx + f.steps + 8, 7));
      a.tokens = {100};
      a.seconds.clear();
    }
    const std::vector<int64_t> ids{id};
    std::vector<int32_t> next;
    for (int i = 0; i < f.steps + 2; ++i) {  // the first 2 steps of each codec are not timed
      for (Arm& a : arms) {
        const auto t0 = Clock::now();
        OSCARKV_RETURN_IF_ERROR(a.model->DecodeStep(ids, a.tokens, &next));
        if (i >= 2) a.seconds.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
        a.tokens = next;
      }
    }
    auto at = [](std::vector<double> v, double q) {
      std::sort(v.begin(), v.end());
      return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
    };
    const double first = at(arms[0].seconds, 0.5);
    for (Arm& a : arms) {
      const double median = at(a.seconds, 0.5);
      std::printf("| %s | %s | %lld | %.3f | %.3f / %.3f | %.2fx | %.2f GB |\n", f.config.c_str(),
                  a.codec.c_str(), static_cast<long long>(ctx), median * 1e3,
                  at(a.seconds, 0.1) * 1e3, at(a.seconds, 0.9) * 1e3, first / median,
                  a.model->pages().seq(id).reserved_bytes / 1e9);
      a.model->RemoveSequence(id);
    }
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

absl::Status Throughput(const Flags& f) {
  std::printf("| config | codec | KV budget | sequences held (prompt %d + output %d) | "
              "step ms (median of %d) | decode tokens/s |\n|---|---|---|---|---|---|\n",
              f.prompt, f.output, f.steps);
  for (int64_t gib : ParseInts(f.budgets_gib)) {
    for (absl::string_view codec : absl::StrSplit(f.codecs, ',')) {
      OSCARKV_ASSIGN_OR_RETURN(GpuBenchSetup s, MakeGpuBenchSetup(f.config, std::string(codec)));
      model_gpu::GpuModelOptions o;
      o.decode_graphs = f.decode_graphs != "off";
      o.max_batch = f.max_batch;
      o.max_prompt_tokens = 256;
      o.kv_budget_bytes = gib << 30;
      OSCARKV_ASSIGN_OR_RETURN(auto m, MakeGpuBenchModel(s, o));
      std::vector<int64_t> ids;
      const int64_t total = int64_t{f.prompt} + f.output;
      while (static_cast<int>(ids.size()) < f.max_batch && m->CanAdmit(total)) {
        const int64_t id = static_cast<int64_t>(ids.size()) + 1;
        OSCARKV_RETURN_IF_ERROR(m->AddSyntheticSequence(id, f.prompt, total, 11));
        ids.push_back(id);
      }
      if (ids.empty()) {
        std::printf("| %s | %s | %lld GiB | 0 | - | - |\n", f.config.c_str(),
                    std::string(codec).c_str(), static_cast<long long>(gib));
        continue;
      }
      OSCARKV_ASSIGN_OR_RETURN(double sec, TimeSteps(*m, ids, f.steps));
      std::printf("| %s | %s | %lld GiB | %zu | %.2f | %.0f |\n", f.config.c_str(),
                  std::string(codec).c_str(), static_cast<long long>(gib), ids.size(), sec * 1e3,
                  ids.size() / sec);
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

absl::Status Ttft(const Flags& f) {
  std::printf("| config | codec | prefill attention | prompt tokens | TTFT s (prefill + demotion +"
              " first token) | prefill tok/s |\n|---|---|---|---|---|---|\n");
  const std::vector<int64_t> contexts = ParseInts(f.contexts);
  const int64_t longest = *std::max_element(contexts.begin(), contexts.end());
  std::vector<std::string> kernels = absl::StrSplit(f.prefill_kernels, ',');
  for (const std::string& kernel : kernels) {
    if (kernel != "sm90" && kernel != "mma") {
      return absl::InvalidArgumentError(
          absl::StrCat("--prefill-kernels: unknown '", kernel, "' (sm90 or mma)"));
    }
  }
  for (absl::string_view codec : absl::StrSplit(f.codecs, ',')) {
    for (const std::string& kernel : kernels) {
      OSCARKV_ASSIGN_OR_RETURN(GpuBenchSetup s, MakeGpuBenchSetup(f.config, std::string(codec)));
      model_gpu::GpuModelOptions o;
      o.max_batch = 1;
      o.max_prompt_tokens = longest;
      o.kv_budget_bytes = int64_t{24} << 30;
      o.hopper_prefill_attention = kernel == "sm90";
      OSCARKV_ASSIGN_OR_RETURN(auto m, MakeGpuBenchModel(s, o));
      std::mt19937 rng(5);
      std::uniform_int_distribution<int32_t> tok(10, s.config.vocab_size - 1);
      int64_t id = 0;
      for (int64_t n : contexts) {
        std::vector<int32_t> prompt(n);
        for (auto& t : prompt) t = tok(rng);
        int32_t next = 0;
        // One warm-up run (cuBLAS heuristics, first-touch), then the measured one.
        for (int rep = 0; rep < 2; ++rep) {
          OSCARKV_RETURN_IF_ERROR(m->AddSequence(++id, prompt, n + 1, &next));
          m->RemoveSequence(id);
        }
        const double sec = m->last_prefill().forward_seconds;
        std::printf("| %s | %s | %s | %lld | %.3f | %.0f |\n", f.config.c_str(),
                    std::string(codec).c_str(), kernel.c_str(), static_cast<long long>(n), sec,
                    n / sec);
        std::fflush(stdout);
      }
    }
  }
  return absl::OkStatus();
}

// The scoring kernel alone over `rows` rows of N(0, 3) logits on the device, each method timed
// by CUDA events around one launch: medians of 9 alternated launches after a warm-up, in ms.
absl::StatusOr<std::pair<double, double>> TimeScoringKernel(int rows, int vocab, int top,
                                                            std::mt19937& rng) {
  std::vector<float> host(static_cast<size_t>(rows) * vocab);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& x : host) x = normal(rng);
  std::vector<int32_t> tokens(rows);
  for (int r = 0; r < rows; ++r) tokens[r] = static_cast<int32_t>((r * 7919) % vocab);
  float *logits = nullptr, *lp = nullptr, *top_lp = nullptr;
  int32_t *d_tokens = nullptr, *rank = nullptr, *top_ids = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  const size_t top_n = static_cast<size_t>(rows) * std::max(top, 1);
  auto check = [](cudaError_t e) -> absl::Status {
    return e == cudaSuccess ? absl::OkStatus() : absl::InternalError(cudaGetErrorString(e));
  };
  auto run = [&]() -> absl::StatusOr<std::pair<double, double>> {
    OSCARKV_RETURN_IF_ERROR(check(cudaMalloc(&logits, host.size() * sizeof(float))));
    OSCARKV_RETURN_IF_ERROR(check(cudaMalloc(&d_tokens, rows * sizeof(int32_t))));
    OSCARKV_RETURN_IF_ERROR(check(cudaMalloc(&lp, rows * sizeof(float))));
    OSCARKV_RETURN_IF_ERROR(check(cudaMalloc(&rank, rows * sizeof(int32_t))));
    OSCARKV_RETURN_IF_ERROR(check(cudaMalloc(&top_ids, top_n * sizeof(int32_t))));
    OSCARKV_RETURN_IF_ERROR(check(cudaMalloc(&top_lp, top_n * sizeof(float))));
    OSCARKV_RETURN_IF_ERROR(check(cudaMemcpy(logits, host.data(), host.size() * sizeof(float),
                                             cudaMemcpyHostToDevice)));
    OSCARKV_RETURN_IF_ERROR(check(cudaMemcpy(d_tokens, tokens.data(), rows * sizeof(int32_t),
                                             cudaMemcpyHostToDevice)));
    OSCARKV_RETURN_IF_ERROR(check(cudaEventCreate(&e0)));
    OSCARKV_RETURN_IF_ERROR(check(cudaEventCreate(&e1)));
    std::vector<double> ms[2];
    for (int rep = 0; rep < 10; ++rep) {
      for (int m = 0; m < 2; ++m) {
        const auto method = m == 0 ? kernels::TopListMethod::kSelect
                                   : kernels::TopListMethod::kPassPerEntry;
        OSCARKV_RETURN_IF_ERROR(check(cudaEventRecord(e0)));
        OSCARKV_RETURN_IF_ERROR(check(kernels::TokenLogprobsRowsCuda(
            logits, rows, vocab, d_tokens, top, lp, rank, top_ids, top_lp, nullptr, method)));
        OSCARKV_RETURN_IF_ERROR(check(cudaEventRecord(e1)));
        OSCARKV_RETURN_IF_ERROR(check(cudaEventSynchronize(e1)));
        float t = 0;
        OSCARKV_RETURN_IF_ERROR(check(cudaEventElapsedTime(&t, e0, e1)));
        if (rep > 0) ms[m].push_back(t);
      }
    }
    for (auto& v : ms) std::sort(v.begin(), v.end());
    return std::make_pair(ms[0][ms[0].size() / 2], ms[1][ms[1].size() / 2]);
  };
  absl::StatusOr<std::pair<double, double>> out = run();
  for (void* p : {static_cast<void*>(logits), static_cast<void*>(d_tokens),
                  static_cast<void*>(lp), static_cast<void*>(rank), static_cast<void*>(top_ids),
                  static_cast<void*>(top_lp)}) {
    if (p != nullptr) cudaFree(p);
  }
  if (e0 != nullptr) cudaEventDestroy(e0);
  if (e1 != nullptr) cudaEventDestroy(e1);
  return out;
}

absl::Status Score(const Flags& f) {
  if (f.config != "default") {
    return absl::InvalidArgumentError("--mode score needs --config default (the real model)");
  }
  std::printf("| codec | prompt tokens | alternatives | chunked prefill ms | scored ms | scoring "
              "ms | host ComputeLogprobs ms (same rows) | kernel alone ms: kSelect / kPassPerEntry "
              "(random rows) |\n|---|---|---|---|---|---|---|---|\n");
  const std::vector<int64_t> contexts = ParseInts(f.contexts);
  const int64_t longest = *std::max_element(contexts.begin(), contexts.end());
  using Clock = std::chrono::steady_clock;
  auto ms_since = [](Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  for (absl::string_view codec_view : absl::StrSplit(f.codecs, ',')) {
    const std::string codec(codec_view);
    OSCARKV_ASSIGN_OR_RETURN(GpuBenchSetup s, MakeGpuBenchSetup(f.config, codec));
    OSCARKV_ASSIGN_OR_RETURN(
        auto engine, engine::ServingEngine::Create(
                         s.real.get(), {.codec = codec,
                                        .calibration_path = engine::ResolveCalibrationPath(
                                            "", "default", codec)}));
    model_gpu::GpuModelOptions o;
    o.max_batch = f.max_batch;
    o.max_prompt_tokens = longest;
    o.kv_budget_bytes = int64_t{4} << 30;
    OSCARKV_ASSIGN_OR_RETURN(auto m, MakeGpuBenchModel(s, o));
    const int chunk = engine->options().chunk_tokens;
    std::mt19937 rng(7);
    std::uniform_int_distribution<int32_t> tok(10, s.config.vocab_size - 1);
    for (const int64_t n : contexts) {
      std::vector<int32_t> prompt(n);
      for (auto& t : prompt) t = tok(rng);
      const model_gpu::BlockCutSpec cut = model_gpu::CutSpecFor(*engine, prompt, m->numerics_tag());
      // Median of 5 of each, alternated (after one warm-up of each).
      auto time_one = [&](int top) -> absl::StatusOr<double> {
        const auto t0 = Clock::now();
        OSCARKV_ASSIGN_OR_RETURN(auto r, m->PrefillChunked(prompt, cut, chunk, {}, top));
        const double ms = ms_since(t0);
        if (top >= 0 && r.prompt_logprobs.size() + 1 != prompt.size()) {
          return absl::InternalError("scored the wrong number of tokens");
        }
        return ms;
      };
      for (const int top : {0, 5, 20}) {
        std::vector<double> plain, scored;
        for (int rep = 0; rep < 6; ++rep) {
          OSCARKV_ASSIGN_OR_RETURN(const double a, time_one(-1));
          OSCARKV_ASSIGN_OR_RETURN(const double b, time_one(top));
          if (rep > 0) {
            plain.push_back(a);
            scored.push_back(b);
          }
        }
        std::sort(plain.begin(), plain.end());
        std::sort(scored.begin(), scored.end());
        // The host's share of the former path (every row's logits to the host, then scored
        // there): ComputeLogprobs over as many random rows of a real vocabulary, one thread.
        const int64_t vocab = s.config.vocab_size;
        std::vector<float> row(static_cast<size_t>(vocab));
        std::normal_distribution<float> normal(0.0f, 3.0f);
        for (float& x : row) x = normal(rng);
        const auto t0 = Clock::now();
        float sink = 0;  // read below so that the loop is not optimised away (always <= 0)
        for (int64_t r = 0; r + 1 < n; ++r) {
          sink += engine::ComputeLogprobs(row, static_cast<int32_t>(r % vocab), top).logprob;
        }
        const double host_ms = ms_since(t0);
        OSCARKV_ASSIGN_OR_RETURN(const auto kernel_ms,
                                 TimeScoringKernel(static_cast<int>(n - 1),
                                                   static_cast<int>(vocab), top, rng));
        std::printf("| %s | %lld | %d | %.2f | %.2f | %.2f | %.1f%s | %.3f / %.3f |\n",
                    codec.c_str(), static_cast<long long>(n), top, plain[2], scored[2],
                    scored[2] - plain[2], host_ms, sink > 0 ? "?" : "", kernel_ms.first,
                    kernel_ms.second);
        std::fflush(stdout);
      }
    }
  }
  return absl::OkStatus();
}

// Per-window sums of one codec against the reference, over the scored positions.
struct WindowScore {
  double kl = 0, dnll = 0, nll = 0, agree = 0, n = 0;        // t in [384, T-2]
  double kl_late = 0, dnll_late = 0, agree_late = 0, n_late = 0;  // t >= 1024
};

// log-softmax of one row into out; returns nothing (rows are vocab floats).
void LogSoftmax(const float* l, int vocab, std::vector<double>& out) {
  double mx = l[0];
  for (int v = 1; v < vocab; ++v) mx = std::max<double>(mx, l[v]);
  double sum = 0;
  for (int v = 0; v < vocab; ++v) sum += std::exp(l[v] - mx);
  const double lse = mx + std::log(sum);
  out.resize(vocab);
  for (int v = 0; v < vocab; ++v) out[v] = l[v] - lse;
}

// Mean over windows and a 95% percentile bootstrap interval (2000 resamples, fixed seed).
std::string MeanCi(const std::vector<double>& x) {
  double mean = 0;
  for (double v : x) mean += v;
  mean /= x.size();
  std::mt19937 rng(2026);
  std::uniform_int_distribution<size_t> pick(0, x.size() - 1);
  std::vector<double> means;
  for (int r = 0; r < 2000; ++r) {
    double m = 0;
    for (size_t i = 0; i < x.size(); ++i) m += x[pick(rng)];
    means.push_back(m / x.size());
  }
  std::sort(means.begin(), means.end());
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%.4f [%.4f, %.4f]", mean, means[49], means[1949]);
  return buf;
}

// Tokenized text files (comma-separated paths). `parse_special` = false tokenizes like
// lib/eval's LoadText (what NIAH must match).
absl::StatusOr<std::vector<std::vector<int32_t>>> LoadTexts(const std::string& files,
                                                             const model::Model& m,
                                                             bool parse_special = true) {
  std::vector<std::vector<int32_t>> texts;
  for (absl::string_view file : absl::StrSplit(files, ',', absl::SkipEmpty())) {
    std::ifstream in{std::string(file)};
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", file));
    std::stringstream ss;
    ss << in.rdbuf();
    texts.push_back(m.tokenizer().Encode(ss.str(), /*add_special=*/false, parse_special));
  }
  return texts;
}

// `count` windows of `len` tokens: round robin over the texts, evenly spaced inside each;
// `where` gets "text<i>@<offset>" per window.
std::vector<std::vector<int32_t>> PickWindows(const std::vector<std::vector<int32_t>>& texts,
                                              int64_t len, int count,
                                              std::vector<std::string>* where) {
  std::vector<std::vector<int32_t>> windows;
  const int nt = static_cast<int>(texts.size());
  for (int w = 0; w < count; ++w) {
    const int ti = w % nt;
    const int per_text = (count - ti + nt - 1) / nt;
    const int k = w / nt;
    const std::vector<int32_t>& t = texts[ti];
    if (static_cast<int64_t>(t.size()) < len) continue;
    const int64_t span = static_cast<int64_t>(t.size()) - len;
    const int64_t at = span * (k + 1) / (per_text + 1);
    windows.emplace_back(t.begin() + at, t.begin() + at + len);
    where->push_back(absl::StrCat("text", ti, "@", at));
  }
  return windows;
}

// Codec spec "name" or "name@K/V" (clip ratios overriding the codec's) -> cache config.
absl::StatusOr<quant::ThreeTierCacheConfig> TiersFor(const model::ModelConfig& config,
                                                     const std::string& spec) {
  const std::vector<std::string> parts = absl::StrSplit(spec, '@');
  const std::string& codec = parts[0];
  OSCARKV_ASSIGN_OR_RETURN(auto factory,
                           engine::KvCacheFactory::Create(
                               config, codec, engine::ResolveCalibrationPath("", "default", codec)));
  quant::ThreeTierCacheConfig tiers = factory->tier_config();
  if (parts.size() == 2) {
    const std::vector<std::string> kv = absl::StrSplit(parts[1], '/');
    if (kv.size() != 2 || !absl::SimpleAtof(kv[0], &tiers.k_clip_ratio) ||
        !absl::SimpleAtof(kv[1], &tiers.v_clip_ratio)) {
      return absl::InvalidArgumentError("clip spec is codec@K/V (two numbers): " + spec);
    }
  }
  return tiers;
}

// A GPU model of the real weights for `nseq` sequences of up to `tokens` tokens each.
absl::StatusOr<std::unique_ptr<model_gpu::GpuModel>> RealModelFor(
    const model::Model& real, const quant::ThreeTierCacheConfig& tiers, int nseq, int64_t tokens,
    int64_t max_prompt) {
  const model::ModelConfig& config = real.config();
  OSCARKV_ASSIGN_OR_RETURN(auto w, model_gpu::GpuWeights::Upload(config, real.weights()));
  model_gpu::GpuModelOptions o;
  o.max_batch = nseq;
  o.max_prompt_tokens = max_prompt;
  model_gpu::KvPageTableConfig pc;
  pc.num_layers = config.num_layers;
  pc.num_kv_heads = config.num_kv_heads;
  pc.head_dim = config.head_dim;
  pc.windowed = tiers.codec != kvformat::CodecId::kBf16;
  const model_gpu::PageCount pages = model_gpu::PagesForTokens(pc, tokens);
  o.kv_budget_bytes = nseq * (pages.bf16 * model_gpu::Bf16PageBytes(pc) +
                              pages.int2 * model_gpu::Int2PageBytes(pc));
  return model_gpu::GpuModel::Create(config, std::move(w), tiers, o);
}

absl::Status Quality(const Flags& f) {
  if (f.config != "default") return absl::InvalidArgumentError("quality needs --config default");
  if (f.text.empty()) return absl::InvalidArgumentError("quality needs --text FILE[,FILE...]");
  std::vector<std::string> codecs = absl::StrSplit(f.codecs, ',', absl::SkipEmpty());
  if (codecs.empty() || codecs[0] != "bf16") {
    return absl::InvalidArgumentError("quality: the first codec must be bf16 (the reference)");
  }
  OSCARKV_ASSIGN_OR_RETURN(std::string path, model::ResolveModelPath("default"));
  OSCARKV_ASSIGN_OR_RETURN(auto real, model::Model::Load(path));
  const model::ModelConfig& config = real->config();
  OSCARKV_ASSIGN_OR_RETURN(std::vector<std::vector<int32_t>> texts, LoadTexts(f.text, *real));
  const int vocab = config.vocab_size;
  for (int64_t ctx : ParseInts(f.contexts)) {
    std::vector<std::string> where;
    const std::vector<std::vector<int32_t>> windows = PickWindows(texts, ctx, f.windows, &where);
    const int nw = static_cast<int>(windows.size());
    if (nw == 0) return absl::InvalidArgumentError("texts shorter than the context");
    // One GPU model per codec, all stepped in lockstep.
    std::vector<std::unique_ptr<model_gpu::GpuModel>> models;
    std::vector<std::string> used;
    for (const std::string& spec : codecs) {
      absl::StatusOr<quant::ThreeTierCacheConfig> tiers = TiersFor(config, spec);
      if (!tiers.ok()) {
        std::fprintf(stderr, "skipping %s: %s\n", spec.c_str(), tiers.status().ToString().c_str());
        continue;
      }
      OSCARKV_ASSIGN_OR_RETURN(auto m, RealModelFor(*real, *tiers, nw, ctx + 1, 64));
      models.push_back(std::move(m));
      used.push_back(spec);
    }
    const int nc = static_cast<int>(models.size());
    std::vector<std::vector<float>> logits(nc);
    std::vector<int64_t> ids(nw);
    for (int c = 0; c < nc; ++c) {
      logits[c].resize(static_cast<size_t>(nw) * vocab);
      for (int w = 0; w < nw; ++w) {
        ids[w] = w + 1;
        int32_t next = 0;
        std::vector<float> l;
        OSCARKV_RETURN_IF_ERROR(models[c]->AddSequence(w + 1, {windows[w].data(), 1}, ctx + 1,
                                                       &next, &l));
        std::copy(l.begin(), l.end(), logits[c].begin() + static_cast<size_t>(w) * vocab);
      }
    }
    std::vector<std::vector<WindowScore>> score(nc, std::vector<WindowScore>(nw));
    const auto t_start = Clock::now();
    for (int64_t t = 0; t + 1 < ctx; ++t) {
      // logits[c] predict token t + 1 of every window.
      if (t >= 384) {
        for (int w = 0; w < nw; ++w) {
          std::vector<double> ref, lp;
          LogSoftmax(logits[0].data() + static_cast<size_t>(w) * vocab, vocab, ref);
          const int32_t target = windows[w][t + 1];
          const int ref_top = static_cast<int>(std::max_element(ref.begin(), ref.end()) - ref.begin());
          for (int c = 0; c < nc; ++c) {
            LogSoftmax(logits[c].data() + static_cast<size_t>(w) * vocab, vocab, lp);
            double kl = 0;
            for (int v = 0; v < vocab; ++v) kl += std::exp(ref[v]) * (ref[v] - lp[v]);
            const double dnll = ref[target] - lp[target];
            const double agree =
                (std::max_element(lp.begin(), lp.end()) - lp.begin()) == ref_top ? 1.0 : 0.0;
            WindowScore& s = score[c][w];
            s.kl += kl;
            s.dnll += dnll;
            s.nll -= lp[target];
            s.agree += agree;
            s.n += 1;
            if (t >= 1024) {
              s.kl_late += kl;
              s.dnll_late += dnll;
              s.agree_late += agree;
              s.n_late += 1;
            }
          }
        }
      }
      if (t + 2 == ctx) break;
      std::vector<int32_t> tokens(nw), next;
      for (int w = 0; w < nw; ++w) tokens[w] = windows[w][t + 1];
      for (int c = 0; c < nc; ++c) {
        OSCARKV_RETURN_IF_ERROR(models[c]->DecodeStep(ids, tokens, &next, &logits[c]));
      }
      if ((t + 1) % 1024 == 0) {
        const double el = std::chrono::duration<double>(Clock::now() - t_start).count();
        std::fprintf(stderr, "context %lld: %lld/%lld steps, %.0f s, ETA %.0f s\n",
                     static_cast<long long>(ctx), static_cast<long long>(t + 1),
                     static_cast<long long>(ctx), el, el / (t + 1) * (ctx - t - 2));
      }
    }
    std::printf("\n### context %lld, %d windows (%s), GPU true decode, scored t in [384, %lld]\n\n",
                static_cast<long long>(ctx), nw, absl::StrJoin(where, " ").c_str(),
                static_cast<long long>(ctx - 2));
    std::printf("| codec | ΔNLL/token | token KL (nats) | top-1 agree | ppl | ΔNLL t≥1024 | "
                "KL t≥1024 | top-1 t≥1024 |\n|---|---|---|---|---|---|---|---|\n");
    for (int c = 0; c < nc; ++c) {
      std::vector<double> kl, dnll, agree, kl_l, dnll_l, agree_l;
      double nll = 0, n = 0;
      for (const WindowScore& s : score[c]) {
        kl.push_back(s.kl / s.n);
        dnll.push_back(s.dnll / s.n);
        agree.push_back(s.agree / s.n);
        nll += s.nll;
        n += s.n;
        if (s.n_late > 0) {
          kl_l.push_back(s.kl_late / s.n_late);
          dnll_l.push_back(s.dnll_late / s.n_late);
          agree_l.push_back(s.agree_late / s.n_late);
        }
      }
      std::printf("| %s | %s | %s | %s | %.2f | %s | %s | %s |\n", used[c].c_str(),
                  MeanCi(dnll).c_str(), MeanCi(kl).c_str(), MeanCi(agree).c_str(),
                  std::exp(nll / n), kl_l.empty() ? "-" : MeanCi(dnll_l).c_str(),
                  kl_l.empty() ? "-" : MeanCi(kl_l).c_str(),
                  kl_l.empty() ? "-" : MeanCi(agree_l).c_str());
    }
    std::fflush(stdout);
  }
  return absl::OkStatus();
}


// Greedy agreement (quant.md E): `windows` prompts of --prompt tokens from the texts,
// --output greedy tokens with each codec (all prompts in one batch); per prompt the first
// position where a codec's tokens leave bf16's and the fraction of positions that agree.
absl::Status Greedy(const Flags& f) {
  if (f.config != "default") return absl::InvalidArgumentError("greedy needs --config default");
  std::vector<std::string> codecs = absl::StrSplit(f.codecs, ',', absl::SkipEmpty());
  if (codecs.empty() || codecs[0] != "bf16") {
    return absl::InvalidArgumentError("greedy: the first codec must be bf16 (the reference)");
  }
  OSCARKV_ASSIGN_OR_RETURN(std::string path, model::ResolveModelPath("default"));
  OSCARKV_ASSIGN_OR_RETURN(auto real, model::Model::Load(path));
  OSCARKV_ASSIGN_OR_RETURN(std::vector<std::vector<int32_t>> texts, LoadTexts(f.text, *real));
  std::vector<std::string> where;
  const std::vector<std::vector<int32_t>> prompts = PickWindows(texts, f.prompt, f.windows, &where);
  const int np = static_cast<int>(prompts.size());
  std::vector<std::vector<std::vector<int32_t>>> out;  // [codec][prompt][token]
  std::vector<std::string> used;
  for (const std::string& spec : codecs) {
    absl::StatusOr<quant::ThreeTierCacheConfig> tiers = TiersFor(real->config(), spec);
    if (!tiers.ok()) {
      std::fprintf(stderr, "skipping %s: %s\n", spec.c_str(), tiers.status().ToString().c_str());
      continue;
    }
    OSCARKV_ASSIGN_OR_RETURN(auto m, RealModelFor(*real, *tiers, np, f.prompt + f.output + 1,
                                                  f.prompt));
    std::vector<std::vector<int32_t>> tokens(np);
    std::vector<int64_t> ids(np);
    std::vector<int32_t> last(np);
    for (int p = 0; p < np; ++p) {
      ids[p] = p + 1;
      OSCARKV_RETURN_IF_ERROR(m->AddSequence(p + 1, prompts[p], f.prompt + f.output + 1, &last[p]));
      tokens[p].push_back(last[p]);
    }
    for (int step = 1; step < f.output; ++step) {
      std::vector<int32_t> next;
      OSCARKV_RETURN_IF_ERROR(m->DecodeStep(ids, last, &next));
      for (int p = 0; p < np; ++p) tokens[p].push_back(last[p] = next[p]);
    }
    out.push_back(std::move(tokens));
    used.push_back(spec);
  }
  std::printf("\n### greedy agreement vs bf16: %d prompts of %d tokens (%s), %d new tokens, GPU\n\n"
              "| codec | first divergence (mean position) | prompts identical to the end | "
              "token agreement |\n|---|---|---|---|\n",
              np, f.prompt, absl::StrJoin(where, " ").c_str(), f.output);
  for (size_t c = 0; c < out.size(); ++c) {
    std::vector<double> first, agree;
    int identical = 0;
    for (int p = 0; p < np; ++p) {
      int d = 0;
      while (d < f.output && out[c][p][d] == out[0][p][d]) ++d;
      identical += d == f.output;
      first.push_back(d);
      int same = 0;
      for (int i = 0; i < f.output; ++i) same += out[c][p][i] == out[0][p][i];
      agree.push_back(static_cast<double>(same) / f.output);
    }
    std::printf("| %s | %s | %d/%d | %s |\n", used[c].c_str(), MeanCi(first).c_str(), identical,
                np, MeanCi(agree).c_str());
  }
  return absl::OkStatus();
}

// One NIAH case through one codec.
struct NiahScore {
  double logp = 0;                  // sum of log p(passkey token)
  bool exact = true;                // greedy would emit every passkey token
  std::vector<double> token_probs;  // p of each passkey token
};

// Scores one distribution (logits row) that predicts tail[p] of question + answer.
void ScoreNiahRow(const float* row, int vocab, const eval::NiahSet& set, const eval::NiahCase& c,
                  size_t p, NiahScore* s) {
  if (p < set.question.size()) return;
  const int32_t target = c.answer[p - set.question.size()];
  std::vector<double> lp;
  LogSoftmax(row, vocab, lp);
  s->logp += lp[target];
  s->token_probs.push_back(std::exp(lp[target]));
  s->exact = s->exact && std::max_element(lp.begin(), lp.end()) - lp.begin() == target;
}

// The cases of `cases` through one GPU model, at most model.options().max_batch at a time:
// each prompt prefilled in one AddSequence, then question + passkey teacher-forced with batched
// DecodeSteps (sequences whose tail is done drop out of the batch).
absl::StatusOr<std::vector<NiahScore>> RunNiahCases(model_gpu::GpuModel& m,
                                                    const eval::NiahSet& set,
                                                    std::span<const eval::NiahCase> cases) {
  const int vocab = m.config().vocab_size;
  const size_t nb = static_cast<size_t>(m.options().max_batch);
  std::vector<NiahScore> scores(cases.size());
  for (size_t g0 = 0; g0 < cases.size(); g0 += nb) {
    const size_t g1 = std::min(cases.size(), g0 + nb);
    std::vector<std::vector<int32_t>> forced(g1 - g0);
    size_t steps = 0;
    for (size_t i = g0; i < g1; ++i) {
      const eval::NiahCase& c = cases[i];
      forced[i - g0] = eval::NiahForcedTokens(set, c);
      steps = std::max(steps, forced[i - g0].size());
      int32_t next = 0;
      std::vector<float> last;
      OSCARKV_RETURN_IF_ERROR(
          m.AddSequence(static_cast<int64_t>(i) + 1, c.prompt, c.context, &next, &last));
      ScoreNiahRow(last.data(), vocab, set, c, 0, &scores[i]);
    }
    for (size_t k = 0; k < steps; ++k) {
      std::vector<int64_t> ids;
      std::vector<int32_t> tokens;
      std::vector<size_t> which;
      for (size_t i = g0; i < g1; ++i) {
        if (k >= forced[i - g0].size()) continue;
        ids.push_back(static_cast<int64_t>(i) + 1);
        tokens.push_back(forced[i - g0][k]);
        which.push_back(i);
      }
      std::vector<int32_t> next;
      std::vector<float> logits;
      OSCARKV_RETURN_IF_ERROR(m.DecodeStep(ids, tokens, &next, &logits));
      for (size_t r = 0; r < which.size(); ++r) {
        ScoreNiahRow(logits.data() + r * vocab, vocab, set, cases[which[r]], k + 1,
                     &scores[which[r]]);
      }
    }
    for (size_t i = g0; i < g1; ++i) m.RemoveSequence(static_cast<int64_t>(i) + 1);
  }
  return scores;
}

// Needle in a haystack through each codec's paged GPU cache (see the file comment). Per
// context: one table (a row per codec: exact-match rate, mean passkey probability, per depth
// the mean passkey probability and its ratio to bf16's), then the cases one by one.
absl::Status Niah(const Flags& f) {
  if (f.config != "default") return absl::InvalidArgumentError("niah needs --config default");
  if (f.text.empty()) return absl::InvalidArgumentError("niah needs --text FILE[,FILE...]");
  std::vector<std::string> codecs = absl::StrSplit(f.codecs, ',', absl::SkipEmpty());
  if (codecs.empty() || codecs[0] != "bf16") {
    return absl::InvalidArgumentError("niah: the first codec must be bf16 (the reference)");
  }
  OSCARKV_ASSIGN_OR_RETURN(std::string path, model::ResolveModelPath("default"));
  OSCARKV_ASSIGN_OR_RETURN(auto real, model::Model::Load(path));
  const model::ModelConfig& config = real->config();
  OSCARKV_ASSIGN_OR_RETURN(std::vector<std::vector<int32_t>> texts,
                           LoadTexts(f.text, *real, /*parse_special=*/false));
  eval::NiahOptions options;
  options.contexts.clear();  // the flag's list replaces the defaults
  for (int64_t c : ParseInts(f.contexts)) options.contexts.push_back(static_cast<int>(c));
  options.depths.clear();
  for (int64_t d : ParseInts(f.depths)) options.depths.push_back(static_cast<int>(d));
  options.trials = f.trials;
  options.seed = f.seed;
  OSCARKV_ASSIGN_OR_RETURN(
      const eval::NiahSet set,
      BuildNiahCases(real->tokenizer(), {texts.begin(), texts.end()}, options));
  std::vector<std::string> used;
  std::vector<quant::ThreeTierCacheConfig> tiers;
  for (const std::string& spec : codecs) {
    absl::StatusOr<quant::ThreeTierCacheConfig> t = TiersFor(config, spec);
    if (!t.ok()) {
      if (used.empty()) return t.status();  // no reference, no ratios
      std::fprintf(stderr, "skipping %s: %s\n", spec.c_str(), t.status().ToString().c_str());
      continue;
    }
    used.push_back(spec);
    tiers.push_back(*std::move(t));
  }
  const size_t nc = used.size();
  // Cases come contexts x depths x trials, so each context is one contiguous run.
  const size_t per_context = options.depths.size() * options.trials;
  for (size_t ci = 0; ci < options.contexts.size(); ++ci) {
    const int ctx = options.contexts[ci];
    const std::span<const eval::NiahCase> cases(set.cases.data() + ci * per_context, per_context);
    size_t longest = 0;
    for (const eval::NiahCase& c : cases) longest = std::max(longest, c.prompt.size());
    const int nb = static_cast<int>(std::min<size_t>(cases.size(), f.max_batch));
    std::vector<std::vector<NiahScore>> scores;  // [codec][case]
    for (size_t k = 0; k < nc; ++k) {
      const auto t0 = Clock::now();
      OSCARKV_ASSIGN_OR_RETURN(
          auto m, RealModelFor(*real, tiers[k], nb, ctx, static_cast<int64_t>(longest)));
      OSCARKV_ASSIGN_OR_RETURN(std::vector<NiahScore> s, RunNiahCases(*m, set, cases));
      int exact = 0;
      double prob = 0;
      for (const NiahScore& x : s) {
        exact += x.exact;
        prob += std::exp(x.logp);
      }
      std::fprintf(stderr,
                   "niah context %d %s: %zu cases, exact %d/%zu, mean passkey prob %.4f, "
                   "%.1f s\n",
                   ctx, used[k].c_str(), s.size(), exact, s.size(), prob / s.size(),
                   std::chrono::duration<double>(Clock::now() - t0).count());
      scores.push_back(std::move(s));
    }
    // Per codec and depth: mean passkey probability over the trials.
    const size_t nd = options.depths.size();
    std::vector<std::vector<double>> depth_prob(nc, std::vector<double>(nd, 0.0));
    for (size_t k = 0; k < nc; ++k) {
      for (size_t i = 0; i < cases.size(); ++i) {
        depth_prob[k][i / options.trials] += std::exp(scores[k][i].logp) / options.trials;
      }
    }
    std::printf(
        "\n### NIAH context %d: %zu cases (depths %s%% x %d trials), GPU true decode "
        "(prompt prefilled, question + passkey teacher-forced through the cache)\n\n"
        "Per depth: mean passkey prob (ratio to bf16). Goal: ratio >= 0.95 at every "
        "depth.\n\n| codec | exact match | passkey prob (mean) | token prob (geo. mean) |",
        ctx, cases.size(), f.depths.c_str(), options.trials);
    for (int d : options.depths) std::printf(" %d%% |", d);
    std::printf(" min ratio | within 5%% at every depth |\n|---|---|---|---|");
    for (size_t d = 0; d < nd; ++d) std::printf("---|");
    std::printf("---|---|\n");
    for (size_t k = 0; k < nc; ++k) {
      int exact = 0;
      double prob = 0, token_logp = 0;
      for (const NiahScore& x : scores[k]) {
        exact += x.exact;
        prob += std::exp(x.logp);
        token_logp += x.logp / x.token_probs.size();
      }
      const double n = static_cast<double>(cases.size());
      std::printf("| %s | %d/%zu (%.2f) | %.4f | %.4f |", used[k].c_str(), exact, cases.size(),
                  exact / n, prob / n, std::exp(token_logp / n));
      double min_ratio = INFINITY;
      for (size_t d = 0; d < nd; ++d) {
        const double ref = depth_prob[0][d];
        if (ref > 0) {
          const double ratio = depth_prob[k][d] / ref;
          min_ratio = std::min(min_ratio, ratio);
          std::printf(" %.4f (%.3f) |", depth_prob[k][d], ratio);
        } else {
          std::printf(" %.4f (-) |", depth_prob[k][d]);
        }
      }
      if (std::isinf(min_ratio)) {
        std::printf(" - | - |\n");
      } else {
        std::printf(" %.3f | %s |\n", min_ratio, min_ratio >= 0.95 ? "yes" : "no");
      }
    }
    // The cases one by one: where the haystack and the needle come from, and per codec the
    // passkey probability, its tokens' probabilities and whether greedy would emit it.
    std::printf("\n| depth | trial | haystack | needle at | passkey |");
    for (const std::string& u : used) std::printf(" %s: prob [tokens] greedy |", u.c_str());
    std::printf("\n|---|---|---|---|---|");
    for (size_t k = 0; k < nc; ++k) std::printf("---|");
    std::printf("\n");
    for (size_t i = 0; i < cases.size(); ++i) {
      const eval::NiahCase& c = cases[i];
      std::printf("| %d%% | %d | text%d@%lld | %d | %s |", c.depth_percent, c.trial, c.text_index,
                  static_cast<long long>(c.text_offset), c.needle_position, c.passkey.c_str());
      for (size_t k = 0; k < nc; ++k) {
        const NiahScore& x = scores[k][i];
        std::vector<std::string> tp;
        for (double p : x.token_probs) tp.push_back(absl::StrFormat("%.3f", p));
        std::printf(" %.4f [%s] %s |", std::exp(x.logp), absl::StrJoin(tp, " ").c_str(),
                    x.exact ? "yes" : "no");
      }
      std::printf("\n");
    }
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace oscarkv::bench

int main(int argc, char** argv) {
  oscarkv::bench::Flags f;
  CLI::App app{"GPU end-to-end benchmark: BF16 KV vs OSCAR INT2 KV (lib/model_gpu)"};
  app.add_option("--mode", f.mode, "latency | throughput | ttft | score | quality | greedy | niah")
      ->check(CLI::IsMember(
          {"latency", "throughput", "ttft", "score", "quality", "greedy", "niah"}));
  app.add_option("--config", f.config, "qwen3-8b-like (random weights, speed only) | default");
  app.add_option("--codecs", f.codecs,
                 "comma-separated codecs (default bf16,oscar); quality also takes codec@K/V "
                 "to override the clip ratios, e.g. oscar@0.90/0.84");
  app.add_option("--contexts", f.contexts,
                 "latency/ttft/score/quality/niah: comma-separated context lengths (niah default "
                 "2048,4096,8192)");
  app.add_option("--budgets-gib", f.budgets_gib, "throughput: KV budgets in GiB (default 16,64)");
  app.add_option("--prompt", f.prompt,
                 "throughput/greedy: prompt tokens per sequence (default 32768)");
  app.add_option("--output", f.output, "throughput/greedy: output tokens per sequence (default 512)");
  app.add_option("--steps", f.steps, "decode steps timed (median reported; default 32)");
  app.add_option("--max-batch", f.max_batch,
                 "throughput/niah: most sequences per step (default 256)");
  app.add_option("--text", f.text,
                 "quality/greedy/niah: comma-separated text files (held-out text)");
  app.add_option("--windows", f.windows, "quality: windows per context; greedy: prompts (default 20)");
  app.add_option("--depths", f.depths, "niah: needle depths in percent (default 10,30,50,70,90)");
  app.add_option("--trials", f.trials,
                 "niah: haystacks per (context, depth), from different texts/offsets (default 3)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--seed", f.seed,
                 "niah: the eval seed; the same as `oscarkv eval --seed` gives the same prompts "
                 "(default 20261129)");
  app.add_option("--decode-graphs", f.decode_graphs,
                 "on | off | both: decode steps replayed from CUDA graphs (GpuModelOptions::"
                 "decode_graphs); both (latency only): each codec both ways, interleaved "
                 "(default on)")
      ->check(CLI::IsMember({"on", "off", "both"}));
  app.add_option("--prefill-kernels", f.prefill_kernels,
                 "ttft: prefill attention kernels compared in one run: sm90 (Hopper wgmma) "
                 "and/or mma (default sm90,mma)");
  CLI11_PARSE(app, argc, argv);
  if (f.mode == "niah" && app.count("--contexts") == 0) f.contexts = "2048,4096,8192";
  if (absl::Status valid = oscarkv::bench::ValidateFlags(f); !valid.ok()) {
    std::fprintf(stderr, "gpu_e2e_bench: %s\n", std::string(valid.message()).c_str());
    return 2;
  }
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 77;
  }
  absl::Status st = f.mode == "latency"      ? oscarkv::bench::Latency(f)
                    : f.mode == "throughput" ? oscarkv::bench::Throughput(f)
                    : f.mode == "quality"    ? oscarkv::bench::Quality(f)
                    : f.mode == "greedy"     ? oscarkv::bench::Greedy(f)
                    : f.mode == "niah"       ? oscarkv::bench::Niah(f)
                    : f.mode == "score"      ? oscarkv::bench::Score(f)
                                             : oscarkv::bench::Ttft(f);
  if (!st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}

// End-to-end GPU benchmark of lib/model_gpu (issue #7): BF16 KV vs OSCAR INT2 KV in the same run.
//   latency    batch-1 decode ms/token vs context length
//   throughput decode tokens/s under a fixed KV byte budget, with the batch each codec can hold
//   ttft       prefill (incl. cache writes and INT2 demotion) of one prompt
// --config qwen3-8b-like builds random bf16 weights of that shape (36 layers, 32/8 heads,
// head_dim 128): SPEED ONLY, no checkpoint of that size is installable here. --config default
// loads the real default model. latency and throughput fill the KV pages with random values
// instead of prefilling (speed only: the kernels read the same bytes); ttft runs the real
// prefill path. Output: one Markdown table row per measurement.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_split.h"
#include "lib/base/status_macros.h"
#include "lib/engine/quant_kv_cache.h"
#include "lib/engine/serving_engine.h"
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
};

model::ModelConfig Qwen3_8bLike() {
  model::ModelConfig c;
  c.arch_name = "qwen3";
  c.arch = model::Arch::kQwen3;
  c.num_layers = 36;
  c.d_model = 4096;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.d_ff = 12288;
  c.vocab_size = 151936;
  c.context_length = 131072 + 4096;
  c.rope_dim = 128;
  c.rope_theta = 1000000.0;
  c.rope_style = model::RopeStyle::kNeox;
  c.norm_eps = 1e-6;
  c.qk_norm = true;
  return c;
}

// Everything a GpuModel needs except its options, for one config and codec.
struct Setup {
  model::ModelConfig config;
  std::unique_ptr<model::Model> real;  // --config default only
  quant::ThreeTierCacheConfig tiers;
};

absl::StatusOr<Setup> MakeSetup(const std::string& config, const std::string& codec) {
  Setup s;
  if (config == "default") {
    OSCARKV_ASSIGN_OR_RETURN(std::string path, model::ResolveModelPath("default"));
    OSCARKV_ASSIGN_OR_RETURN(s.real, model::Model::Load(path));
    s.config = s.real->config();
    OSCARKV_ASSIGN_OR_RETURN(
        auto factory, engine::KvCacheFactory::Create(
                          s.config, codec, engine::ResolveCalibrationPath("", "default", codec)));
    s.tiers = factory->tier_config();
    return s;
  }
  if (config != "qwen3-8b-like") return absl::InvalidArgumentError("unknown --config " + config);
  s.config = Qwen3_8bLike();
  OSCARKV_ASSIGN_OR_RETURN(const quant::CodecSpec* spec, quant::FindCodec(codec));
  s.tiers.num_layers = s.config.num_layers;
  s.tiers.num_kv_heads = s.config.num_kv_heads;
  s.tiers.head_dim = s.config.head_dim;
  s.tiers.codec = spec->id;
  if (spec->rotation != quant::RotationKind::kNone) {
    // A full D x D rotation per layer costs the same whatever its values: use a signed
    // permutation (orthogonal), so the numbers stay bounded.
    std::vector<float> r(128 * 128, 0.0f);
    for (int i = 0; i < 128; ++i) r[i * 128 + (i * 37) % 128] = (i % 3 == 0) ? -1.0f : 1.0f;
    s.tiers.rotations.k.assign(s.config.num_layers, r);
    s.tiers.rotations.v.assign(s.config.num_layers, r);
  }
  return s;
}

absl::StatusOr<std::unique_ptr<model_gpu::GpuModel>> MakeModel(const Setup& s,
                                                               const model_gpu::GpuModelOptions& o) {
  absl::StatusOr<model_gpu::GpuWeights> w =
      s.real ? model_gpu::GpuWeights::Upload(s.config, s.real->weights())
             : model_gpu::GpuWeights::Random(s.config, 1234);
  if (!w.ok()) return w.status();
  return model_gpu::GpuModel::Create(s.config, std::move(*w), s.tiers, o);
}

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

std::vector<int64_t> ParseInts(const std::string& s) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    out.push_back(std::stoll(std::string(part)));
  }
  return out;
}

absl::Status Latency(const Flags& f) {
  std::printf("| config | codec | context | decode ms/token (B=1, median of %d) | KV bytes |\n"
              "|---|---|---|---|---|\n", f.steps);
  for (absl::string_view codec : absl::StrSplit(f.codecs, ',')) {
    OSCARKV_ASSIGN_OR_RETURN(Setup s, MakeSetup(f.config, std::string(codec)));
    const std::vector<int64_t> contexts = ParseInts(f.contexts);
    model_gpu::GpuModelOptions o;
    o.max_batch = 1;
    o.max_prompt_tokens = 256;
    // Room for the longest context in this codec's pages.
    const int64_t longest = *std::max_element(contexts.begin(), contexts.end()) + f.steps + 8;
    model_gpu::KvPageTableConfig pc;
    pc.num_layers = s.config.num_layers;
    pc.num_kv_heads = s.config.num_kv_heads;
    pc.head_dim = s.config.head_dim;
    pc.windowed = std::string(codec) != "bf16";
    const model_gpu::PageCount pages = model_gpu::PagesForTokens(pc, longest);
    o.kv_budget_bytes = pages.bf16 * model_gpu::Bf16PageBytes(pc) +
                        pages.int2 * model_gpu::Int2PageBytes(pc) + (int64_t{64} << 20);
    OSCARKV_ASSIGN_OR_RETURN(auto m, MakeModel(s, o));
    int64_t id = 0;
    for (int64_t ctx : contexts) {
      OSCARKV_RETURN_IF_ERROR(m->AddSyntheticSequence(++id, ctx, ctx + f.steps + 8, 7));
      const int64_t kv = m->pages().seq(id).reserved_bytes;
      OSCARKV_ASSIGN_OR_RETURN(double sec, TimeSteps(*m, {id}, f.steps));
      std::printf("| %s | %s | %lld | %.3f | %.2f GB |\n", f.config.c_str(),
                  std::string(codec).c_str(), static_cast<long long>(ctx), sec * 1e3, kv / 1e9);
      std::fflush(stdout);
      m->RemoveSequence(id);
    }
  }
  return absl::OkStatus();
}

absl::Status Throughput(const Flags& f) {
  std::printf("| config | codec | KV budget | sequences held (prompt %d + output %d) | "
              "step ms (median of %d) | decode tokens/s |\n|---|---|---|---|---|---|\n",
              f.prompt, f.output, f.steps);
  for (int64_t gib : ParseInts(f.budgets_gib)) {
    for (absl::string_view codec : absl::StrSplit(f.codecs, ',')) {
      OSCARKV_ASSIGN_OR_RETURN(Setup s, MakeSetup(f.config, std::string(codec)));
      model_gpu::GpuModelOptions o;
      o.max_batch = f.max_batch;
      o.max_prompt_tokens = 256;
      o.kv_budget_bytes = gib << 30;
      OSCARKV_ASSIGN_OR_RETURN(auto m, MakeModel(s, o));
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
  std::printf("| config | codec | prompt tokens | TTFT s (prefill + demotion + first token) |"
              " prefill tok/s |\n|---|---|---|---|---|\n");
  const std::vector<int64_t> contexts = ParseInts(f.contexts);
  const int64_t longest = *std::max_element(contexts.begin(), contexts.end());
  for (absl::string_view codec : absl::StrSplit(f.codecs, ',')) {
    OSCARKV_ASSIGN_OR_RETURN(Setup s, MakeSetup(f.config, std::string(codec)));
    model_gpu::GpuModelOptions o;
    o.max_batch = 1;
    o.max_prompt_tokens = longest;
    o.kv_budget_bytes = int64_t{24} << 30;
    OSCARKV_ASSIGN_OR_RETURN(auto m, MakeModel(s, o));
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
      std::printf("| %s | %s | %lld | %.3f | %.0f |\n", f.config.c_str(),
                  std::string(codec).c_str(), static_cast<long long>(n), sec, n / sec);
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace oscarkv::bench

int main(int argc, char** argv) {
  oscarkv::bench::Flags f;
  CLI::App app{"GPU end-to-end benchmark: BF16 KV vs OSCAR INT2 KV (lib/model_gpu)"};
  app.add_option("--mode", f.mode, "latency | throughput | ttft")
      ->check(CLI::IsMember({"latency", "throughput", "ttft"}));
  app.add_option("--config", f.config, "qwen3-8b-like (random weights, speed only) | default");
  app.add_option("--codecs", f.codecs, "comma-separated codecs (default bf16,oscar)");
  app.add_option("--contexts", f.contexts, "latency/ttft: comma-separated context lengths");
  app.add_option("--budgets-gib", f.budgets_gib, "throughput: KV budgets in GiB (default 16,64)");
  app.add_option("--prompt", f.prompt, "throughput: prompt tokens per sequence (default 32768)");
  app.add_option("--output", f.output, "throughput: output tokens per sequence (default 512)");
  app.add_option("--steps", f.steps, "decode steps timed (median reported; default 32)");
  app.add_option("--max-batch", f.max_batch, "throughput: most sequences per step (default 256)");
  CLI11_PARSE(app, argc, argv);
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 77;
  }
  absl::Status st = f.mode == "latency"      ? oscarkv::bench::Latency(f)
                    : f.mode == "throughput" ? oscarkv::bench::Throughput(f)
                                             : oscarkv::bench::Ttft(f);
  if (!st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}

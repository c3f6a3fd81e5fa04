// CPU cost of sampling one token (engine::Sampler::Sample): over random logits (N(0, 3), flatter
// than a model's) at the default model's vocabulary (49,152) and Qwen3's (151,936), and over the
// default model's own logits rows (256 positions of a real text, cycled), greedy, with the OpenAI
// API's defaults (temperature 1, top_p 1, no top_k) and with common filters. The decode worker
// samples every row of its batch on the host each step, so this is paid per sequence per token.
// Run:
//   build/bench/engine/sampler_bench --benchmark_min_time=0.2
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "benchmark/benchmark.h"
#include "lib/base/log.h"
#include "lib/engine/sampler.h"
#include "lib/engine/serving_engine.h"
#include "lib/model/model.h"

namespace oscarkv::engine {
namespace {

SamplingParams Params(const benchmark::State& state, int first) {
  SamplingParams params;
  params.temperature = static_cast<float>(state.range(first)) / 100.0f;
  params.top_p = static_cast<float>(state.range(first + 1)) / 100.0f;
  params.top_k = static_cast<int>(state.range(first + 2));
  if (state.range(first + 3) != 0) params.presence_penalty = 0.5f;
  params.seed = 7;
  return params;
}

// Args: vocabulary, temperature x 100, top_p x 100, top_k, penalised (0/1).
void BM_Sample(benchmark::State& state) {
  std::mt19937_64 rng(1);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> logits(state.range(0));
  for (float& x : logits) x = d(rng);
  const SamplingParams params = Params(state, 1);
  Sampler sampler(params);
  for (auto _ : state) benchmark::DoNotOptimize(sampler.Sample(logits));
}
BENCHMARK(BM_Sample)
    ->ArgNames({"vocab", "temp100", "top_p100", "top_k", "penalty"})
    ->Args({49152, 0, 100, 0, 0})
    ->Args({49152, 100, 100, 0, 0})
    ->Args({49152, 70, 90, 0, 0})
    ->Args({49152, 70, 100, 50, 0})
    ->Args({49152, 100, 100, 0, 1})
    ->Args({151936, 0, 100, 0, 0})
    ->Args({151936, 100, 100, 0, 0})
    ->Args({151936, 70, 90, 0, 0})
    ->Args({151936, 70, 100, 50, 0})
    ->Unit(benchmark::kMicrosecond);

// The default model's logits after each of 256 tokens of Emma (one prefill, every row kept).
const std::vector<float>& ModelLogits(int64_t* vocab) {
  static int64_t v = 0;
  static const std::vector<float>* rows = [] {
    absl::StatusOr<std::string> path = model::ResolveModelPath("default");
    CHECK(path.ok()) << path.status();
    absl::StatusOr<std::unique_ptr<model::Model>> m = model::Model::Load(*path);
    CHECK(m.ok()) << m.status();
    auto e = ServingEngine::Create(m->get(), {.codec = "oscar-hadamard"});
    CHECK(e.ok()) << e.status();
    std::ifstream in(OSCARKV_SOURCE_DIR "/data/text/austen/emma.txt");
    std::stringstream text;
    text << in.rdbuf();
    CHECK(!text.str().empty()) << "data/text/austen/emma.txt missing";
    std::vector<int32_t> prompt = (*m)->tokenizer().Encode(text.str().substr(40000, 4000), false);
    prompt.resize(256);
    auto* out = new std::vector<float>;
    const ChunkLogitsSink sink = [&](int64_t, std::span<const float> logits) {
      out->insert(out->end(), logits.begin(), logits.end());
      return absl::OkStatus();
    };
    auto r = (*e)->Prefill(prompt, {}, /*build_sequence=*/false, &sink);
    CHECK(r.ok()) << r.status();
    v = (*m)->config().vocab_size;
    return out;
  }();
  *vocab = v;
  return *rows;
}

// Args: temperature x 100, top_p x 100, top_k, penalised (0/1).
void BM_SampleModelLogits(benchmark::State& state) {
  int64_t vocab = 0;
  const std::vector<float>& rows = ModelLogits(&vocab);
  const size_t n_rows = rows.size() / static_cast<size_t>(vocab);
  Sampler sampler(Params(state, 0));
  size_t row = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(sampler.Sample(
        std::span<const float>(rows.data() + row * vocab, static_cast<size_t>(vocab))));
    row = (row + 1) % n_rows;
  }
}
BENCHMARK(BM_SampleModelLogits)
    ->ArgNames({"temp100", "top_p100", "top_k", "penalty"})
    ->Args({0, 100, 0, 0})
    ->Args({100, 100, 0, 0})
    ->Args({70, 90, 0, 0})
    ->Args({70, 100, 50, 0})
    ->Args({100, 100, 0, 1})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace oscarkv::engine

BENCHMARK_MAIN();

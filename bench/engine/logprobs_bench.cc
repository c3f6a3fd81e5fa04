// CPU cost of a token's logprobs (engine::ComputeLogprobs) over the default model's vocabulary
// (49,152 logits, N(0, 3)), by the number of alternatives. What a request with logprobs adds to
// each token on the worker that samples it. Run:
//   build/bench/engine/logprobs_bench --benchmark_min_time=0.2
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "lib/engine/logprobs.h"

namespace oscarkv::engine {
namespace {

void BM_ComputeLogprobs(benchmark::State& state) {
  std::mt19937_64 rng(1);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> logits(49152);
  for (float& x : logits) x = d(rng);
  const int top_n = static_cast<int>(state.range(0));
  int32_t token = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(ComputeLogprobs(logits, token, top_n));
    token = (token + 7919) % static_cast<int32_t>(logits.size());
  }
}
BENCHMARK(BM_ComputeLogprobs)->Arg(0)->Arg(5)->Arg(20)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace oscarkv::engine

BENCHMARK_MAIN();

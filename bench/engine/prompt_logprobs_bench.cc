// What scoring a prompt (the router's echo with logprobs: PrefillRequest.prompt_logprobs) adds to
// its CPU prefill: ServingEngine::Prefill of a real text on the default model, plain (the last
// row's logits only) against every row's logits turned into logprobs (engine::
// AppendPromptLogprobs, as the CPU prefill device does) with 0 and 5 alternatives. Same process,
// same prompt, codec oscar-hadamard (no calibration file needed). Run:
//   build/bench/engine/prompt_logprobs_bench --benchmark_repetitions=3
// Args: prompt tokens, alternatives (-1 = plain prefill; -2 = every row's logits, not scored).
#include <fstream>
#include <sstream>
#include <vector>

#include "benchmark/benchmark.h"
#include "lib/base/log.h"
#include "lib/engine/logprobs.h"
#include "lib/engine/serving_engine.h"
#include "lib/model/model.h"

namespace oscarkv::engine {
namespace {

struct Setup {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<ServingEngine> engine;
  std::vector<int32_t> text;
};

const Setup& Shared() {
  static const Setup* setup = [] {
    auto* s = new Setup;
    absl::StatusOr<std::string> path = model::ResolveModelPath("default");
    CHECK(path.ok()) << path.status();
    absl::StatusOr<std::unique_ptr<model::Model>> m = model::Model::Load(*path);
    CHECK(m.ok()) << m.status();
    s->model = *std::move(m);
    auto e = ServingEngine::Create(s->model.get(), {.codec = "oscar-hadamard"});
    CHECK(e.ok()) << e.status();
    s->engine = *std::move(e);
    std::ifstream in(OSCARKV_SOURCE_DIR "/data/text/austen/emma.txt");
    std::stringstream text;
    text << in.rdbuf();
    CHECK(!text.str().empty()) << "data/text/austen/emma.txt missing";
    s->text = s->model->tokenizer().Encode(text.str().substr(40000, 40000), false);
    return s;
  }();
  return *setup;
}

void BM_Prefill(benchmark::State& state) {
  const Setup& s = Shared();
  const std::span<const int32_t> prompt(s.text.data(), static_cast<size_t>(state.range(0)));
  const int top_n = static_cast<int>(state.range(1));
  const int64_t vocab = s.model->config().vocab_size;
  for (auto _ : state) {
    std::vector<TokenLogprobs> scored;
    const ChunkLogitsSink sink = [&](int64_t first, std::span<const float> logits) {
      if (top_n >= 0) AppendPromptLogprobs(prompt, first, logits, vocab, top_n, &scored);
      return absl::OkStatus();
    };
    auto r = s.engine->Prefill(prompt, {}, /*build_sequence=*/false, top_n == -1 ? nullptr : &sink);
    CHECK(r.ok()) << r.status();
    benchmark::DoNotOptimize(scored.data());
  }
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(state.range(0)),
                         benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Prefill)
    ->ArgsProduct({{1024}, {-1, -2, 0, 5}})
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace oscarkv::engine

BENCHMARK_MAIN();

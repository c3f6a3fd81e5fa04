// Cost of the single-pass decode-equivalent emulation (lib/quant/decode_emulation.h) for one
// layer: building the FP + dequantised K/V, then the masked attention for every position.
// SmolLM2-135M shape: Hkv = 3, Hq = 9, D = 64. Args: {codec id, tokens}.
//   build-*/bench/attention/decode_emulation_bench
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "lib/quant/codec_spec.h"
#include "lib/quant/decode_emulation.h"

namespace oscarkv::quant {
namespace {

constexpr int kKvHeads = 3, kQHeads = 9, kHeadDim = 64;

void BM_EmulateLayer(benchmark::State& state) {
  const CodecSpec& spec = GetCodecSpec(static_cast<kvformat::CodecId>(state.range(0)));
  const int T = static_cast<int>(state.range(1));
  std::mt19937 rng(1);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(T) * kKvHeads * kHeadDim), v(k.size());
  std::vector<float> q(static_cast<size_t>(T) * kQHeads * kHeadDim), out(q.size());
  for (auto* x : {&k, &v, &q}) {
    for (auto& e : *x) e = n(rng);
  }
  for (auto _ : state) {
    auto kv = BuildEmulatedLayerKv(spec, nullptr, nullptr, T, kKvHeads, kHeadDim, k.data(),
                                   v.data());
    if (!kv.ok()) state.SkipWithError("build failed");
    if (!EmulateDecodeAttention(spec, *kv, nullptr, nullptr, q.data(), kQHeads, out.data()).ok()) {
      state.SkipWithError("emulation failed");
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["positions/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * T, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EmulateLayer)
    ->ArgNames({"codec", "T"})
    ->Args({6, 1024})
    ->Args({6, 4096})
    ->Args({8, 4096})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace oscarkv::quant

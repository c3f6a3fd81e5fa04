// CPU quantize throughput of every codec: the fused reference path (kernels::KvQuantRef:
// rotate -> [token norms] -> clip -> quantize -> pack) over one (layer, K|V) of 64 tokens x 8 KV
// heads, input BF16. Reported bytes/s count BF16 input bytes. Run:
//   build-*/bench/quant/kv_quant_bench --benchmark_min_time=0.2
#include <memory>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/quant/kv_quant_ref.h"
#include "lib/kvformat/float16.h"
#include "lib/quant/calibration.h"
#include "lib/quant/codec.h"
#include "lib/quant/synthetic_activations.h"

namespace oscarkv::quant {
namespace {

constexpr int kTokens = 64;
constexpr int kHeads = 8;

void BM_Quantize(benchmark::State& state) {
  const auto id = static_cast<kvformat::CodecId>(state.range(0));
  const int d = static_cast<int>(state.range(1));
  const bool key = state.range(2) == 0;
  const CodecSpec& spec = GetCodecSpec(id);
  const LayerActivations act = SyntheticActivations(kTokens, kHeads, kHeads, d, 3);
  Calibration cal;
  if (spec.needs_calibration) {
    auto acc = CovarianceAccumulator::Create(kHeads, kHeads, d);
    if (!acc.ok() || !acc->AddPass1(act.q, act.k, act.v, kTokens).ok() ||
        !acc->AddPass2(act.k, act.v, kTokens).ok()) {
      state.SkipWithError("calibration failed");
      return;
    }
    const std::vector<LayerCovariances> covs = {*acc->Finish()};
    auto c = CalibrateFromCovariances(covs, spec.k_objective, spec.v_objective, 0, 0.96f, 0.92f);
    if (!c.ok()) {
      state.SkipWithError("calibration failed");
      return;
    }
    cal = *c;
  }
  auto codec = Codec::Create(spec, d, spec.needs_calibration ? &cal : nullptr, 0);
  if (!codec.ok()) {
    state.SkipWithError("codec create failed");
    return;
  }
  const KvSide side = key ? KvSide::kKey : KvSide::kValue;
  const std::vector<float>& src = key ? act.k : act.v;
  std::vector<uint16_t> bf16(src.size());
  for (size_t i = 0; i < src.size(); ++i) bf16[i] = kvformat::FloatToBf16Bits(src[i]);
  std::vector<uint8_t> out((*codec)->SegmentBytes(side, kTokens) * kHeads);
  std::vector<float> norms(kTokens);
  kernels::KvQuantParams p;
  p.input_bf16 = bf16.data();
  p.rotation = key ? (*codec)->key_rotation() : (*codec)->value_rotation();
  p.token_norms_out = key && (*codec)->uses_token_norms() ? norms.data() : nullptr;
  p.output = out.data();
  p.tokens = kTokens;
  p.heads = kHeads;
  p.head_dim = d;
  p.kind = (*codec)->segment_kind(side);
  p.clip_ratio = (*codec)->clip_ratio(side);
  for (auto _ : state) {
    if (kernels::KvQuantRef(p) != kernels::KvQuantStatus::kOk) {
      state.SkipWithError("KvQuantRef failed");
      return;
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bf16.size()) * 2);
  state.SetLabel(std::string(spec.name) + (key ? " K" : " V"));
}

void Args(benchmark::internal::Benchmark* b) {
  for (int id = 0; id < kvformat::kNumCodecs; ++id) {
    for (int d : {64, 128}) {
      for (int side : {0, 1}) b->Args({id, d, side});
    }
  }
  b->ArgNames({"codec", "d", "v"});
}
BENCHMARK(BM_Quantize)->Apply(Args);

}  // namespace
}  // namespace oscarkv::quant

BENCHMARK_MAIN();

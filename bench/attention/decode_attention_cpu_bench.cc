// CPU throughput of decode attention over the paged three-tier cache (DecodeAttentionRef):
// one sequence, one layer, OSCAR layout (64 sink + 256 recent BF16 tokens, the rest INT2), and
// the all-BF16 baseline on the same context. Reports bytes of KV read per second.
//   build-*/bench/attention/decode_attention_cpu_bench [--benchmark_filter=...]
// Args: {head_dim, context tokens}. Hkv = 2, Hq = 6 (GQA g = 3).
#include <cmath>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/attention/decode_attention.h"
#include "lib/kvformat/float16.h"

namespace oscarkv::kernels {
namespace {

constexpr int kKvHeads = 2;
constexpr int kQHeads = 6;

struct Setup {
  std::vector<uint8_t> bf16_pool, int2_pool;
  std::vector<int32_t> bf16_indptr, bf16_indices, int2_indptr, int2_indices;
  int32_t bf16_tokens = 0, int2_tokens = 0;
  std::vector<float> q, out, partial_out, partial_lse;
  DecodePlan plan;
  DecodeAttentionParams params;
  int64_t kv_bytes = 0;  // bytes of K/V read per call
};

void Build(Setup& s, int d, int context, bool mixed) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> byte(0, 255);
  s.bf16_tokens = mixed ? std::min(context, 64 + 256) : context;
  s.int2_tokens = context - s.bf16_tokens;
  const int bf16_pages = (s.bf16_tokens + kPageTokens - 1) / kPageTokens;
  const int int2_pages = (s.int2_tokens + kPageTokens - 1) / kPageTokens;
  const int64_t bu = Bf16PageUnitBytes(d), iu = Int2PageUnitBytes(d);
  s.bf16_pool.resize(bf16_pages * bu * kKvHeads);
  s.int2_pool.resize(std::max<int64_t>(1, int2_pages * iu * kKvHeads));
  // Random bf16 in [-2, 2) and random codes with sane fp16 params.
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto* b16 = reinterpret_cast<uint16_t*>(s.bf16_pool.data());
  for (size_t i = 0; i < s.bf16_pool.size() / 2; ++i) b16[i] = kvformat::FloatToBf16Bits(normal(rng));
  for (auto& x : s.int2_pool) x = static_cast<uint8_t>(byte(rng));
  for (int p = 0; p < int2_pages; ++p) {
    for (int h = 0; h < kKvHeads; ++h) {
      uint8_t* unit = s.int2_pool.data() + (p * kKvHeads + h) * iu;
      for (int64_t off : {Int2PageKParamsOffset(d), Int2PageVParamsOffset(d)}) {
        auto* params = reinterpret_cast<kvformat::Int2Params*>(unit + off);
        for (int r = 0; r < kPageTokens; ++r) {
          params[r] = {kvformat::FloatToHalfBits(0.6f), kvformat::FloatToHalfBits(-0.9f)};
        }
      }
    }
  }
  s.bf16_indptr = {0, bf16_pages};
  s.int2_indptr = {0, int2_pages};
  s.bf16_indices.resize(bf16_pages);
  s.int2_indices.resize(int2_pages);
  for (int i = 0; i < bf16_pages; ++i) s.bf16_indices[i] = i;
  for (int i = 0; i < int2_pages; ++i) s.int2_indices[i] = i;
  s.q.resize(kQHeads * d);
  for (auto& x : s.q) x = normal(rng);
  s.out.resize(kQHeads * d);
  s.plan = PlanDecodeAttention(DecodePlanConfig{}, 1, &s.bf16_tokens, &s.int2_tokens);
  s.partial_out.resize(s.plan.PartialOutFloats(kQHeads, d));
  s.partial_lse.resize(s.plan.PartialLseFloats(kQHeads));
  DecodeAttentionParams& p = s.params;
  p.num_seqs = 1;
  p.num_q_heads = kQHeads;
  p.num_kv_heads = kKvHeads;
  p.head_dim = d;
  p.sm_scale = 1.0f / std::sqrt(static_cast<float>(d));
  p.q = s.q.data();
  p.q_seq_stride = kQHeads * d;
  p.bf16 = {s.bf16_indptr.data(), s.bf16_indices.data(), &s.bf16_tokens, s.bf16_pool.data(),
            bu * kKvHeads, bu};
  if (s.int2_tokens > 0) {
    p.int2 = {s.int2_indptr.data(), s.int2_indices.data(), &s.int2_tokens, s.int2_pool.data(),
              iu * kKvHeads, iu};
  }
  p.work = s.plan.work.data();
  p.seq_work_indptr = s.plan.seq_work_indptr.data();
  p.num_work = s.plan.num_work();
  p.partial_out = s.partial_out.data();
  p.partial_lse = s.partial_lse.data();
  p.out = s.out.data();
  p.out_seq_stride = kQHeads * d;
  // Bytes actually read: whole rows of K and V (codes + params, or bf16) per token and head.
  s.kv_bytes = static_cast<int64_t>(s.bf16_tokens) * kKvHeads * d * 2 * 2 +
               static_cast<int64_t>(s.int2_tokens) * kKvHeads * (d / 4 + 4) * 2;
}

void Run(benchmark::State& state, bool mixed) {
  Setup s;
  const int d = static_cast<int>(state.range(0));
  const int context = static_cast<int>(state.range(1));
  Build(s, d, context, mixed);
  for (auto _ : state) {
    const char* err = DecodeAttentionRef(s.params);
    if (err != nullptr) state.SkipWithError(err);
    benchmark::DoNotOptimize(s.out.data());
  }
  state.SetBytesProcessed(state.iterations() * s.kv_bytes);
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * context,
                         benchmark::Counter::kIsRate);
  state.counters["kv_bytes"] = static_cast<double>(s.kv_bytes);
  state.counters["splits"] = s.plan.num_work();
}

void BM_MixedOscar(benchmark::State& state) { Run(state, true); }
void BM_Bf16Only(benchmark::State& state) { Run(state, false); }

#define OSCARKV_ATTN_ARGS                                                                  \
  ->ArgNames({"D", "ctx"})                                                                 \
      ->Args({64, 1024})->Args({64, 4096})->Args({64, 16384})->Args({128, 1024})          \
      ->Args({128, 4096})->Args({128, 16384})->Unit(benchmark::kMicrosecond)
BENCHMARK(BM_MixedOscar) OSCARKV_ATTN_ARGS;
BENCHMARK(BM_Bf16Only) OSCARKV_ATTN_ARGS;

}  // namespace
}  // namespace oscarkv::kernels

// GPU decode attention (DecodeAttentionCuda) against the CPU reference (DecodeAttentionRef) and
// a float64 reference, on fresh random paged pools: shuffled physical pages, partial last pages
// whose unused rows hold NaN (they must never reach the output), GQA groups of 4 and 3,
// head_dim 128 and 64, one and several sequences, few and many splits, plans with the BF16 tier
// fused into the INT2 splits (sequences without INT2 history keep BF16 splits) and with separate
// BF16 splits, by GpuDecodePlanConfig's choice and forced. Outputs are poisoned with
// NaN before each run. Launches that overlap the kernel before them (overlap_prior_kernel) must
// give the plain launch's output bit for bit, with q written by a slow kernel that lets them
// start early and two calls back to back on one set of partials. Exit 0 = pass, 1 = fail,
// 77 = no GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/decode_attention.h"
#include "kernels/attention/decode_attention_cuda.h"
#include "lib/kvformat/float16.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/slow_writer.h"

namespace oscarkv {
namespace {

using kernels::DecodeAttentionParams;
using kernels::kPageTokens;
using testing::RelErr;
using testing::ToDevice;
using testing::ToHost;

struct Case {
  const char* name;
  int hq, hkv, d;
  std::vector<int32_t> bf16_tokens, int2_tokens;
  int fixed_split;  // 0 = GpuDecodePlanConfig
  float q_scale;
  // 0: GpuDecodePlanConfig's choice; 1: BF16 tier fused into the INT2 splits; -1: separate
  // BF16 splits (DecodePlanConfig::fuse_bf16_into_int2).
  int fuse = 0;
};

// n lengths spread evenly over [lo, hi].
std::vector<int32_t> Lengths(int n, int lo, int hi) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = lo + (hi - lo) * i / std::max(1, n - 1);
  return v;
}

struct Tier {
  std::vector<uint8_t> pool;
  std::vector<int32_t> indptr, idx;
  int64_t unit = 0;
};

// Pages of every sequence, shuffled over a pool with some unused pages in between.
void BuildTier(const std::vector<int32_t>& tokens, int hkv, int64_t unit, bool int2, int d,
               std::mt19937_64& rng, Tier& t) {
  const int b = static_cast<int>(tokens.size());
  t.unit = unit;
  t.indptr.assign(1, 0);
  int total = 0;
  for (int i = 0; i < b; ++i) {
    total += (tokens[i] + kPageTokens - 1) / kPageTokens;
    t.indptr.push_back(total);
  }
  const int num_pages = total + 3;
  std::vector<int32_t> perm(num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  t.idx.assign(perm.begin(), perm.begin() + total);
  t.pool.assign(static_cast<size_t>(num_pages) * hkv * unit, 0);
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  for (auto& x : t.pool) x = static_cast<uint8_t>(byte(rng));
  // Every row: valid values; rows past a sequence's end: NaN.
  for (int i = 0; i < b; ++i) {
    for (int pg = t.indptr[i]; pg < t.indptr[i + 1]; ++pg) {
      for (int h = 0; h < hkv; ++h) {
        uint8_t* u = t.pool.data() + (static_cast<int64_t>(t.idx[pg]) * hkv + h) * unit;
        for (int row = 0; row < kPageTokens; ++row) {
          const bool valid = (pg - t.indptr[i]) * kPageTokens + row < tokens[i];
          if (int2) {
            for (int kv = 0; kv < 2; ++kv) {
              const int64_t poff = kv * unit / 2 + kPageTokens * (d / 4) + 4 * row;
              const float scale = 0.05f + 0.4f * uni(rng);
              const float mn = -1.5f * scale + 0.3f * normal(rng);
              const uint16_t s16 = valid ? kvformat::FloatToHalfBits(scale) : 0x7e00;
              const uint16_t m16 = valid ? kvformat::FloatToHalfBits(mn) : 0x7e00;
              std::memcpy(u + poff, &s16, 2);
              std::memcpy(u + poff + 2, &m16, 2);
            }
          } else {
            for (int kv = 0; kv < 2; ++kv) {
              uint16_t* rowp = reinterpret_cast<uint16_t*>(u + kv * unit / 2) + row * d;
              for (int c = 0; c < d; ++c) {
                rowp[c] = valid ? kvformat::FloatToBf16Bits(normal(rng)) : 0x7fc0;
              }
            }
          }
        }
      }
    }
  }
}

// Float64 attention over the dequantised cache (both tiers), straight from the pools.
void Reference64(const Case& c, const std::vector<float>& q, const Tier& bf, const Tier& i2,
                 float sm_scale, std::vector<double>& out) {
  const int b = static_cast<int>(c.int2_tokens.size()), d = c.d, g = c.hq / c.hkv;
  out.assign(static_cast<size_t>(b) * c.hq * d, 0.0);
  for (int s = 0; s < b; ++s) {
    for (int qh = 0; qh < c.hq; ++qh) {
      const int h = qh / g;
      std::vector<double> scores;
      std::vector<std::vector<double>> values;
      auto add = [&](const std::vector<double>& k, const std::vector<double>& v) {
        double dot = 0.0;
        for (int x = 0; x < d; ++x) dot += static_cast<double>(q[(s * c.hq + qh) * d + x]) * k[x];
        scores.push_back(dot * sm_scale);
        values.push_back(v);
      };
      for (int tier = 0; tier < 2; ++tier) {
        const Tier& t = tier == 0 ? bf : i2;
        const int n = tier == 0 ? c.bf16_tokens[s] : c.int2_tokens[s];
        for (int tok = 0; tok < n; ++tok) {
          const uint8_t* u = t.pool.data() +
                             (static_cast<int64_t>(t.idx[t.indptr[s] + tok / kPageTokens]) * c.hkv + h) * t.unit;
          const int row = tok % kPageTokens;
          std::vector<double> k(d), v(d);
          for (int kv = 0; kv < 2; ++kv) {
            std::vector<double>& dst = kv == 0 ? k : v;
            const uint8_t* seg = u + kv * t.unit / 2;
            if (tier == 0) {
              const uint16_t* r = reinterpret_cast<const uint16_t*>(seg) + row * d;
              for (int x = 0; x < d; ++x) dst[x] = kvformat::Bf16BitsToFloat(r[x]);
            } else {
              uint16_t s16, m16;
              std::memcpy(&s16, seg + kPageTokens * (d / 4) + 4 * row, 2);
              std::memcpy(&m16, seg + kPageTokens * (d / 4) + 4 * row + 2, 2);
              const double sc = kvformat::HalfBitsToFloat(s16), mn = kvformat::HalfBitsToFloat(m16);
              for (int x = 0; x < d; ++x) {
                const int j = x % (d / 4), quarter = x / (d / 4);
                const int code = (seg[row * (d / 4) + j] >> (2 * quarter)) & 3;
                dst[x] = code * sc + mn;
              }
            }
          }
          add(k, v);
        }
      }
      if (scores.empty()) continue;
      const double mx = *std::max_element(scores.begin(), scores.end());
      double sum = 0.0;
      for (double& x : scores) sum += (x = std::exp(x - mx));
      for (size_t j = 0; j < scores.size(); ++j) {
        for (int x = 0; x < d; ++x) out[(s * c.hq + qh) * d + x] += scores[j] / sum * values[j][x];
      }
    }
  }
}

// Errors of one GPU run against float64, the CPU path and the CPU lse; prints one line.
bool CheckOutputs(const Case& c, const char* cta, const kernels::DecodePlan& plan,
                  const std::vector<float>& out, const std::vector<float>& lse,
                  const std::vector<float>& out_ref, const std::vector<float>& lse_ref,
                  const std::vector<double>& ref64, const std::vector<double>& cpu64) {
  const double err_gpu_64 = RelErr(out.data(), ref64.data(), out.size());
  const double err_cpu_64 = RelErr(out_ref.data(), ref64.data(), out.size());
  const double err_gpu_cpu = RelErr(out.data(), cpu64.data(), out.size());
  double err_lse = 0.0;  // max |lse - lse_ref| over rows; empty rows must be -inf on both
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(lse_ref[i]) || std::isinf(lse[i])) {
      if (lse[i] != lse_ref[i]) err_lse = INFINITY;
    } else {
      err_lse = std::max(err_lse, std::fabs(static_cast<double>(lse[i]) - lse_ref[i]));
    }
  }
  // Budgets: q is bf16 and P fp16/bf16 on the GPU (~1e-3); the CPU path is float (~1e-6).
  const bool ok = err_gpu_64 < 5e-3 && err_gpu_cpu < 5e-3 && err_cpu_64 < 1e-4 && err_lse < 2e-2;
  std::printf("[%s, %s] %s  splits=%d  rel err gpu-f64 %.2e  gpu-cpu %.2e  cpu-f64 %.2e  lse %.2e\n",
              c.name, cta, ok ? "PASS" : "FAIL", plan.num_work(), err_gpu_64, err_gpu_cpu,
              err_cpu_64, err_lse);
  return ok;
}

// overlap_prior_kernel: q, both tiers' pools and the partials poisoned, q and the pools then
// written by a kernel that spins first and lets the next kernel start at once (as lib/model_gpu's
// page write before attention does); two calls back to back (the second's stage 1 may start
// while the first's merge still reads the partials), each into its own output. Both must equal
// the plain launch's out / lse bit for bit (the same arithmetic; only the order of loads differs).
bool CheckOverlapped(DecodeAttentionParams dp, kernels::Stage1Cta cta, float* d_q,
                     const std::vector<float>& q, const std::vector<uint8_t>& bf16_pool,
                     const std::vector<uint8_t>& int2_pool, const std::vector<float>& out_plain,
                     const std::vector<float>& lse_plain, const std::string& label) {
  cudaStream_t stream;
  GPU_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  float* q_src = ToDevice(q);
  std::vector<testing::SlowCopy> copies = {{q_src, d_q, static_cast<int64_t>(q.size()) * 4}};
  std::vector<void*> pool_srcs;
  for (const auto& [host, pool] :
       {std::pair{&bf16_pool, dp.bf16.pool}, std::pair{&int2_pool, dp.int2.pool}}) {
    if (pool == nullptr || host->empty()) continue;  // an empty tier has no table
    void* src = ToDevice(*host);
    pool_srcs.push_back(src);
    copies.push_back({src, const_cast<uint8_t*>(pool), static_cast<int64_t>(host->size())});
  }
  float* outs[2];
  float* lses[2];
  for (int i = 0; i < 2; ++i) {
    GPU_CHECK(cudaMalloc(&outs[i], out_plain.size() * 4));
    GPU_CHECK(cudaMalloc(&lses[i], lse_plain.size() * 4));
    GPU_CHECK(cudaMemset(outs[i], 0xff, out_plain.size() * 4));
    GPU_CHECK(cudaMemset(lses[i], 0xff, lse_plain.size() * 4));
  }
  // q, the pools and the partials poisoned: a stage 1 that read q or a tier before its wait, or
  // a merge that read the partials before its stage 1 finished, would read NaN, not the plain
  // launch's equal values.
  const size_t rows = static_cast<size_t>(dp.num_work) * dp.num_q_heads;
  for (const testing::SlowCopy& c : copies) GPU_CHECK(cudaMemset(c.dst, 0xff, c.bytes));
  GPU_CHECK(cudaMemset(dp.partial_out, 0xff, rows * dp.head_dim * 4));
  GPU_CHECK(cudaMemset(dp.partial_lse, 0xff, rows * 4));
  GPU_CHECK(cudaDeviceSynchronize());
  GPU_CHECK(testing::LaunchSlowWriter(copies.data(), static_cast<int>(copies.size()), 50, stream));
  dp.overlap_prior_kernel = true;
  for (int i = 0; i < 2; ++i) {
    dp.out = outs[i];
    dp.out_lse = lses[i];
    GPU_CHECK(kernels::DecodeAttentionCuda(dp, stream, cta));
  }
  GPU_CHECK(cudaStreamSynchronize(stream));
  bool ok = true;
  for (int i = 0; i < 2; ++i) {
    const std::vector<float> out = ToHost(outs[i], out_plain.size());
    const std::vector<float> lse = ToHost(lses[i], lse_plain.size());
    ok = ok && std::memcmp(out.data(), out_plain.data(), out.size() * 4) == 0 &&
         std::memcmp(lse.data(), lse_plain.data(), lse.size() * 4) == 0;
    GPU_CHECK(cudaFree(outs[i]));
    GPU_CHECK(cudaFree(lses[i]));
  }
  GPU_CHECK(cudaFree(q_src));
  for (void* src : pool_srcs) GPU_CHECK(cudaFree(src));
  GPU_CHECK(cudaStreamDestroy(stream));
  // DecodeAttentionCuda overlaps only with few query rows (B * Hq < SMs); the other cases
  // launch the plain way and check only that the flag changes nothing.
  int sms = 0;
  GPU_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const bool overlapped = static_cast<int64_t>(dp.num_seqs) * dp.num_q_heads < sms;
  std::printf("[%s, %s] %s  (bit-identical to the plain launch, 2 calls)\n", label.c_str(),
              overlapped ? "overlapping the prior kernel" : "overlap asked, launched plain",
              ok ? "PASS" : "FAIL");
  return ok;
}

bool RunCase(const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int b = static_cast<int>(c.int2_tokens.size()), d = c.d;
  Tier bf, i2;
  BuildTier(c.bf16_tokens, c.hkv, kernels::Bf16PageUnitBytes(d), false, d, rng, bf);
  BuildTier(c.int2_tokens, c.hkv, kernels::Int2PageUnitBytes(d), true, d, rng, i2);
  std::vector<float> q(static_cast<size_t>(b) * c.hq * d);
  std::normal_distribution<float> normal(0.0f, c.q_scale);
  for (float& x : q) x = normal(rng);
  const float sm_scale = 1.0f / std::sqrt(static_cast<float>(d));

  int sms = 132;
  GPU_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int max_int2 = *std::max_element(c.int2_tokens.begin(), c.int2_tokens.end());
  kernels::DecodePlanConfig config =
      kernels::GpuDecodePlanConfig(b, c.hkv, c.hq, d, max_int2, sms);
  if (c.fixed_split > 0) config.fixed_tokens_per_split = c.fixed_split;
  if (c.fuse != 0) config.fuse_bf16_into_int2 = c.fuse > 0;
  const kernels::DecodePlan plan =
      kernels::PlanDecodeAttention(config, b, c.bf16_tokens.data(), c.int2_tokens.data());

  // CPU reference through the same params (host pointers).
  DecodeAttentionParams hp;
  hp.num_seqs = b;
  hp.num_q_heads = c.hq;
  hp.num_kv_heads = c.hkv;
  hp.head_dim = d;
  hp.sm_scale = sm_scale;
  hp.q = q.data();
  hp.q_seq_stride = static_cast<int64_t>(c.hq) * d;
  auto table = [&](const Tier& t, const std::vector<int32_t>& tokens, const uint8_t* pool,
                   const int32_t* indptr, const int32_t* idx) {
    kernels::PagedTierTable tab;
    tab.page_indptr = indptr;
    tab.page_indices = idx;
    tab.seq_tokens = tokens.data();
    tab.pool = pool;
    tab.page_stride_bytes = c.hkv * t.unit;
    tab.head_stride_bytes = t.unit;
    return tab;
  };
  hp.bf16 = table(bf, c.bf16_tokens, bf.pool.data(), bf.indptr.data(), bf.idx.data());
  hp.int2 = table(i2, c.int2_tokens, i2.pool.data(), i2.indptr.data(), i2.idx.data());
  const auto empty = [](const std::vector<int32_t>& tokens) {
    return std::all_of(tokens.begin(), tokens.end(), [](int32_t n) { return n == 0; });
  };
  const bool no_int2 = empty(c.int2_tokens), no_bf16 = empty(c.bf16_tokens);
  if (no_int2) hp.int2 = kernels::PagedTierTable{};  // an empty tier has no table
  if (no_bf16) hp.bf16 = kernels::PagedTierTable{};
  hp.work = plan.work.data();
  hp.seq_work_indptr = plan.seq_work_indptr.data();
  hp.num_work = plan.num_work();
  std::vector<float> part_out(plan.PartialOutFloats(c.hq, d)), part_lse(plan.PartialLseFloats(c.hq));
  std::vector<float> out_ref(static_cast<size_t>(b) * c.hq * d), lse_ref(b * c.hq);
  hp.partial_out = part_out.data();
  hp.partial_lse = part_lse.data();
  hp.out = out_ref.data();
  hp.out_seq_stride = static_cast<int64_t>(c.hq) * d;
  hp.out_lse = lse_ref.data();
  if (const char* err = kernels::DecodeAttentionRef(hp)) {
    std::printf("[%s] CPU reference failed: %s\n", c.name, err);
    return false;
  }

  // Device copies.
  DecodeAttentionParams dp = hp;
  std::vector<void*> to_free;
  auto dev = [&](const auto& v) {
    auto* ptr = ToDevice(v);
    to_free.push_back(const_cast<void*>(static_cast<const void*>(ptr)));
    return ptr;
  };
  float* d_q = dev(q);
  dp.q = d_q;
  int32_t* d_bf_tok = dev(c.bf16_tokens);
  int32_t* d_i2_tok = dev(c.int2_tokens);
  dp.bf16 = table(bf, c.bf16_tokens, dev(bf.pool), dev(bf.indptr), dev(bf.idx));
  dp.bf16.seq_tokens = d_bf_tok;
  dp.int2 = table(i2, c.int2_tokens, dev(i2.pool), dev(i2.indptr), dev(i2.idx));
  dp.int2.seq_tokens = d_i2_tok;
  if (no_int2) dp.int2 = kernels::PagedTierTable{};
  if (no_bf16) dp.bf16 = kernels::PagedTierTable{};
  dp.work = dev(plan.work);
  dp.seq_work_indptr = dev(plan.seq_work_indptr);
  float* d_po = dev(part_out);
  float* d_pl = dev(part_lse);
  float* d_out = dev(out_ref);
  float* d_lse = dev(lse_ref);
  dp.partial_out = d_po;
  dp.partial_lse = d_pl;
  dp.out = d_out;
  dp.out_lse = d_lse;
  // The merge inside stage 1 (D = 128, 2 or more but few sequences) counts splits here; every
  // call must leave the counters zero, or the next call would merge too early.
  const std::vector<int32_t> zero_counters(static_cast<size_t>(b) * c.hq, 0);
  int32_t* d_counters = dev(zero_counters);
  auto counters_left_zero = [&](const std::string& label) {
    const bool zero = ToHost(d_counters, zero_counters.size()) == zero_counters;
    if (!zero) std::printf("[%s, %s] FAIL  merge counters not zero after the call\n", c.name,
                           label.c_str());
    return zero;
  };
  std::vector<double> ref64;
  Reference64(c, q, bf, i2, sm_scale, ref64);
  std::vector<double> cpu64(out_ref.begin(), out_ref.end());
  // Every stage-1 CTA layout (kAuto picks one of them by grid size), and, when the plan has one
  // split per sequence, with the merge launch and with stage 1 writing out itself; outputs
  // poisoned each time.
  bool ok = true;
  for (const kernels::Stage1Cta cta : {kernels::Stage1Cta::kPlain, kernels::Stage1Cta::kBf16Warp,
                                       kernels::Stage1Cta::kBf16Warp3}) {
    for (const bool direct : {false, true}) {
      if (direct && !plan.OneSplitPerSequence()) continue;
      GPU_CHECK(cudaMemset(d_po, 0xff, part_out.size() * 4));  // NaN poison
      GPU_CHECK(cudaMemset(d_pl, 0xff, part_lse.size() * 4));
      GPU_CHECK(cudaMemset(d_out, 0xff, out_ref.size() * 4));
      GPU_CHECK(cudaMemset(d_lse, 0xff, lse_ref.size() * 4));
      dp.one_split_per_seq = direct;
      // The 4-warp layout runs without counters (the merge kernel, as for a caller that passes
      // none), the others with them (the merge inside stage 1 where it applies).
      dp.merge_counters = cta == kernels::Stage1Cta::kPlain ? nullptr : d_counters;
      GPU_CHECK(kernels::DecodeAttentionCuda(dp, nullptr, cta));
      GPU_CHECK(cudaDeviceSynchronize());
      const std::vector<float> out = ToHost(d_out, out_ref.size());
      const std::vector<float> lse = ToHost(d_lse, lse_ref.size());
      const std::string label =
          std::string(cta == kernels::Stage1Cta::kPlain      ? "4 warps"
                      : cta == kernels::Stage1Cta::kBf16Warp ? "4+bf16 warp"
                                                             : "4+bf16 warp, 128 regs") +
          (direct ? ", out from stage 1" : "");
      ok = CheckOutputs(c, label.c_str(), plan, out, lse, out_ref, lse_ref, ref64, cpu64) && ok;
      ok = counters_left_zero(label) && ok;
      if (!direct) {
        ok = CheckOverlapped(dp, cta, d_q, q, bf.pool, i2.pool, out, lse, label) && ok;
        ok = counters_left_zero(label + ", overlapped") && ok;
      }
    }
  }
  for (void* ptr : to_free) GPU_CHECK(cudaFree(ptr));
  return ok;
}

}  // namespace
}  // namespace oscarkv

int main(int argc, char** argv) {
  using oscarkv::Case;
  const bool small = argc > 1 && std::string(argv[1]) == "--small";  // for compute-sanitizer
  if (!oscarkv::testing::HaveGpu() && std::getenv("OSCARKV_FORCE_GPU_TEST") == nullptr) {
    std::printf("no GPU: skipped\n");
    return 77;
  }
  const std::vector<Case> cases = {
      {"d128 g4 b1 long", 32, 8, 128, {320}, {6000}, 0, 1.0f},
      // No BF16 tier (the bench's bf=0 rows): INT2 splits only.
      {"d128 g4 b1 int2 only", 32, 8, 128, {0}, {6001}, 0, 1.0f},
      {"d64 g3 b2 int2 only", 9, 3, 64, {0, 0}, {3000, 777}, 0, 1.0f},
      {"d128 g4 b1 hot q", 32, 8, 128, {300}, {3001}, 0, 4.0f},
      {"d128 g4 b3 fixed40", 32, 8, 128, {64, 263, 100}, {1000, 8, 0}, 40, 2.0f},
      {"d128 g4 b3 fixed40 fused", 32, 8, 128, {64, 263, 100}, {1000, 8, 0}, 40, 2.0f, 1},
      {"d64 g3 b4", 9, 3, 64, {320, 70, 5, 256}, {2000, 333, 0, 17}, 0, 2.0f},
      {"d64 g3 b4 fused", 9, 3, 64, {320, 70, 5, 256}, {700, 333, 0, 17}, 0, 2.0f, 1},
      {"d64 g3 b2 fixed24", 9, 3, 64, {320, 200}, {900, 77}, 24, 1.0f},
      // D = 64, one sequence of many splits (separate BF16 splits of 16 tokens): 63 + 13, merged
      // by one block per head in one round; 125 + 13, more than such a block holds (the general
      // merge, three rounds).
      {"d64 g3 b1 many splits", 9, 3, 64, {200}, {1000}, 16, 1.0f, -1},
      {"d64 g3 b1 more splits", 9, 3, 64, {200}, {2000}, 16, 1.0f, -1},
      {"d128 g8 b2", 16, 2, 128, {256, 40}, {1500, 250}, 0, 2.0f},
      {"d128 g12 b1", 24, 2, 128, {300}, {700}, 0, 2.0f},
      {"d64 g1 b2 empty", 4, 4, 64, {0, 9}, {0, 0}, 0, 1.0f},
      // Fused BF16 shares (forced): a
      // partial last BF16 page inside the last share, a share shorter than a tile, and a long
      // sequence whose many splits leave most shares empty.
      {"d128 g4 b2 fused shares", 32, 8, 128, {263, 33}, {900, 24}, 0, 2.0f, 1},
      {"d64 g3 b3 fused long", 9, 3, 64, {300, 16, 320}, {40000, 700, 8}, 0, 1.0f, 1},
      // 12 sequences x 3 KV heads: GpuDecodePlanConfig fuses by itself (132 SMs); then forced
      // separate BF16 splits.
      {"d64 g3 b12 default", 9, 3, 64, {320, 7, 64, 300, 0, 16, 320, 100, 263, 320, 1, 50},
       {500, 900, 8, 0, 300, 1200, 64, 17, 333, 40, 600, 0}, 0, 2.0f},
      {"d64 g3 b12 unfused", 9, 3, 64, {320, 7, 64, 300, 0, 16, 320, 100, 263, 320, 1, 50},
       {500, 900, 8, 0, 300, 1200, 64, 17, 333, 40, 600, 0}, 0, 2.0f, -1},
      // Short sequences: one split each (also written from stage 1 directly).
      {"d128 g4 b2 one split", 32, 8, 128, {64, 100}, {200, 96}, 0, 2.0f},
      {"d64 g3 b1 one split", 9, 3, 64, {70}, {120}, 0, 2.0f},
      // The bench's B=32 shape, shorter: GpuDecodePlanConfig fuses, one split per sequence.
      {"d128 g4 b32 default", 32, 8, 128, std::vector<int32_t>(32, 320),
       oscarkv::Lengths(32, 200, 700), 0, 2.0f},
      // A sequence with no tokens (no work item) between two others: its zeros come from stage 1
      // when that merges (D = 128, few sequences). Last, so that the cases above keep their seeds.
      {"d128 g4 b3 one empty", 32, 8, 128, {100, 0, 64}, {2000, 0, 500}, 0, 2.0f},
  };
  bool ok = true;
  uint64_t seed = 1234;
  for (const Case& c : cases) {
    if (small && (c.int2_tokens[0] > 1000 || c.int2_tokens.size() > 12)) continue;
    ok = oscarkv::RunCase(c, seed++) && ok;
  }
  std::printf("%s\n", ok ? "ALL PASS" : "SOME FAILED");
  return ok ? 0 : 1;
}

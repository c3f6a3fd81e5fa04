// GPU fused quantizer (KvQuantCuda, DemoteToPagesCuda) against the CPU reference KvQuantRef:
// byte-for-byte equal segments (codes and fp16 params), on fresh random bf16 and f32 rows with a
// random orthogonal rotation, K (0.96) and V (0.92) clip ratios and no clip, head_dim 128 and 64;
// and demotion into shuffled INT2 pages of the decode pool layout. Outputs are poisoned first.
// Exit 0 = pass, 1 = fail, 77 = no GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/attention/decode_attention.h"
#include "kernels/quant/kv_quant_cuda.h"
#include "kernels/quant/kv_quant_ref.h"
#include "lib/kvformat/float16.h"
#include "tests/kernels/gpu_test_util.h"

namespace oscarkv {
namespace {

using kernels::KvQuantParams;
using kvformat::SegmentKind;
using testing::ToDevice;
using testing::ToHost;

// Random orthogonal matrix (Gram-Schmidt on Gaussian rows, in double).
std::vector<float> RandomRotation(int d, std::mt19937_64& rng) {
  std::normal_distribution<double> n(0.0, 1.0);
  std::vector<double> m(static_cast<size_t>(d) * d);
  for (double& x : m) x = n(rng);
  for (int i = 0; i < d; ++i) {
    for (int j = 0; j < i; ++j) {
      double dot = 0.0;
      for (int k = 0; k < d; ++k) dot += m[i * d + k] * m[j * d + k];
      for (int k = 0; k < d; ++k) m[i * d + k] -= dot * m[j * d + k];
    }
    double norm = 0.0;
    for (int k = 0; k < d; ++k) norm += m[i * d + k] * m[i * d + k];
    norm = std::sqrt(norm);
    for (int k = 0; k < d; ++k) m[i * d + k] /= norm;
  }
  return std::vector<float>(m.begin(), m.end());
}

bool RunCase(int tokens, int heads, int d, float clip, bool bf16, bool rotate, bool paged,
             uint64_t seed, SegmentKind kind = SegmentKind::kInt2PerToken,
             bool token_norms = false) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::student_t_distribution<float> heavy(3.0f);  // outliers, so the clip matters
  const size_t elems = static_cast<size_t>(tokens) * heads * d;
  std::vector<float> xf(elems);
  for (float& x : xf) x = 0.5f * heavy(rng) + 0.1f * n(rng);
  std::vector<uint16_t> xb(elems);
  for (size_t i = 0; i < elems; ++i) {
    xb[i] = kvformat::FloatToBf16Bits(xf[i]);
    if (bf16) xf[i] = kvformat::Bf16BitsToFloat(xb[i]);
  }
  const std::vector<float> rot = RandomRotation(d, rng);
  const size_t seg = kvformat::SegmentBytes(kind, tokens, d);

  KvQuantParams hp;
  if (bf16) hp.input_bf16 = xb.data(); else hp.input_f32 = xf.data();
  hp.rotation = rotate ? rot.data() : nullptr;
  hp.tokens = tokens;
  hp.heads = heads;
  hp.head_dim = d;
  hp.kind = kind;
  hp.clip_ratio = clip;
  std::vector<uint8_t> ref(seg * heads);
  hp.output = ref.data();
  std::vector<float> ref_norms(token_norms ? tokens : 0);
  if (token_norms) hp.token_norms_out = ref_norms.data();
  if (kernels::KvQuantRef(hp) != kernels::KvQuantStatus::kOk) {
    std::printf("reference failed\n");
    return false;
  }

  KvQuantParams dp = hp;
  uint16_t* d_xb = ToDevice(xb);
  float* d_xf = ToDevice(xf);
  float* d_rot = ToDevice(rot);
  if (bf16) dp.input_bf16 = d_xb; else dp.input_f32 = d_xf;
  dp.rotation = rotate ? d_rot : nullptr;
  std::vector<uint8_t> got;
  size_t mismatches = 0;
  if (!paged) {
    uint8_t* d_out = ToDevice(ref);
    GPU_CHECK(cudaMemset(d_out, 0xa5, ref.size()));
    dp.output = d_out;
    float* d_norms = nullptr;
    if (token_norms) {
      d_norms = ToDevice(ref_norms);
      GPU_CHECK(cudaMemset(d_norms, 0xff, ref_norms.size() * sizeof(float)));  // NaN poison
      dp.token_norms_out = d_norms;
    }
    GPU_CHECK(kernels::KvQuantCuda(dp, nullptr));
    GPU_CHECK(cudaDeviceSynchronize());
    got = ToHost(d_out, ref.size());
    GPU_CHECK(cudaFree(d_out));
    for (size_t i = 0; i < ref.size(); ++i) {
      if (got[i] != ref[i] && mismatches++ < 6) {
        std::printf("  byte %zu (head %zu, offset %zu of %zu): got 0x%02x want 0x%02x\n", i,
                    i / seg, i % seg, seg, got[i], ref[i]);
      }
    }
    if (token_norms) {
      const std::vector<float> norms = ToHost(d_norms, ref_norms.size());
      for (size_t i = 0; i < norms.size(); ++i) {
        if (std::memcmp(&norms[i], &ref_norms[i], sizeof(float)) != 0 && mismatches++ < 12) {
          std::printf("  norm %zu: got %.9g want %.9g\n", i, norms[i], ref_norms[i]);
        }
      }
      GPU_CHECK(cudaFree(d_norms));
    }
  } else {
    // tokens % 8 == 0 here: each 8-token page unit of head h must equal the reference's rows.
    const int pages = tokens / kernels::kPageTokens;
    const int64_t unit = kernels::Int2PageUnitBytes(d);
    std::vector<int32_t> ids(pages + 5);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    ids.resize(pages);
    std::vector<uint8_t> pool(static_cast<size_t>(pages + 5) * heads * unit);
    uint8_t* d_pool = ToDevice(pool);
    GPU_CHECK(cudaMemset(d_pool, 0xa5, pool.size()));
    int32_t* d_ids = ToDevice(ids);
    kernels::DemotePagesTarget tgt;
    tgt.pool = d_pool;
    tgt.page_ids = d_ids;
    tgt.page_stride_bytes = heads * unit;
    tgt.head_stride_bytes = unit;
    tgt.segment_offset_bytes = kernels::Int2PageVCodesOffset(d);  // as if V
    GPU_CHECK(kernels::DemoteToPagesCuda(dp, tgt, nullptr));
    GPU_CHECK(cudaDeviceSynchronize());
    pool = ToHost(d_pool, pool.size());
    GPU_CHECK(cudaFree(d_pool));
    GPU_CHECK(cudaFree(d_ids));
    const int m = d / 4;
    for (int h = 0; h < heads; ++h) {
      const uint8_t* rs = ref.data() + h * seg;
      for (int t = 0; t < tokens; ++t) {
        const uint8_t* u = pool.data() + (static_cast<int64_t>(ids[t / 8]) * heads + h) * unit +
                           tgt.segment_offset_bytes;
        for (int j = 0; j < m; ++j) mismatches += u[(t % 8) * m + j] != rs[t * m + j];
        for (int j = 0; j < 4; ++j) {
          mismatches += u[8 * m + (t % 8) * 4 + j] != rs[static_cast<size_t>(tokens) * m + t * 4 + j];
        }
      }
    }
  }
  GPU_CHECK(cudaFree(d_xb));
  GPU_CHECK(cudaFree(d_xf));
  GPU_CHECK(cudaFree(d_rot));
  const bool ok = mismatches == 0;
  std::printf("[kv_quant T=%d H=%d D=%d clip=%.2f %s rot=%d paged=%d kind=%d norms=%d] %s "
              "mismatched bytes %zu\n",
              tokens, heads, d, clip, bf16 ? "bf16" : "f32", rotate, paged,
              static_cast<int>(kind), token_norms, ok ? "PASS" : "FAIL", mismatches);
  return ok;
}

}  // namespace
}  // namespace oscarkv

int main() {
  if (!oscarkv::testing::HaveGpu()) {
    std::printf("no GPU: skipped\n");
    return 77;
  }
  bool ok = true;
  ok = oscarkv::RunCase(256, 8, 128, 0.96f, true, true, false, 1) && ok;
  ok = oscarkv::RunCase(256, 8, 128, 0.92f, true, true, false, 2) && ok;
  ok = oscarkv::RunCase(100, 3, 64, 0.96f, true, true, false, 3) && ok;
  ok = oscarkv::RunCase(64, 3, 64, 1.0f, false, true, false, 4) && ok;
  ok = oscarkv::RunCase(50, 4, 128, 0.92f, false, false, false, 5) && ok;
  ok = oscarkv::RunCase(64, 8, 128, 0.96f, true, true, true, 6) && ok;
  ok = oscarkv::RunCase(48, 3, 64, 0.92f, true, true, true, 7) && ok;
  // KIVI-2 (M7): K channel groups, V token groups, no rotation or clip; OScaR (M8): rotated,
  // clipped, K divided by the token norms over all heads.
  using oscarkv::kvformat::SegmentKind;
  ok = oscarkv::RunCase(256, 8, 128, 1.0f, true, false, false, 8, SegmentKind::kInt2ChannelGroup) && ok;
  ok = oscarkv::RunCase(96, 3, 64, 1.0f, true, false, false, 9, SegmentKind::kInt2ChannelGroup) && ok;
  ok = oscarkv::RunCase(100, 8, 128, 1.0f, true, false, false, 10, SegmentKind::kInt2TokenGroup) && ok;
  ok = oscarkv::RunCase(45, 3, 64, 1.0f, false, false, false, 11, SegmentKind::kInt2TokenGroup) && ok;
  ok = oscarkv::RunCase(256, 8, 128, 0.96f, true, true, false, 12, SegmentKind::kInt2ChannelGroup,
                        true) && ok;
  ok = oscarkv::RunCase(64, 3, 64, 0.96f, true, true, false, 13, SegmentKind::kInt2ChannelGroup,
                        true) && ok;
  ok = oscarkv::RunCase(256, 8, 128, 0.92f, true, true, false, 14, SegmentKind::kInt2TokenGroup) && ok;
  ok = oscarkv::RunCase(70, 3, 64, 0.92f, false, true, false, 15, SegmentKind::kInt2PerToken,
                        true) && ok;
  std::printf("%s\n", ok ? "ALL PASS" : "SOME FAILED");
  return ok ? 0 : 1;
}

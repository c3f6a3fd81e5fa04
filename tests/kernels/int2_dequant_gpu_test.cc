// GPU per-token INT2 dequantisation (DequantInt2PerTokenCuda) against its CPU reference
// (DequantInt2PerTokenRef, itself checked against quant::DecodePerTokenRow in CI): bit for bit on
// segments written by KvQuantRef from random rows (tokens 1, 7, 64, 256; heads 3 and 8; D 64 and
// 128), dense and padded strides (padded: odd segment stride and base, row stride not a multiple
// of 4, i.e. the scalar-store path), outputs and their padding poisoned with NaN. Then the round
// trip the chunked prefill runs: KvQuantCuda -> DequantInt2PerTokenCuda equals KvQuantRef ->
// DequantInt2PerTokenRef. Exit 0 = pass, 1 = fail, 77 = no GPU.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/quant/int2_dequant.h"
#include "kernels/quant/int2_dequant_cuda.h"
#include "kernels/quant/kv_quant_cuda.h"
#include "kernels/quant/kv_quant_ref.h"
#include "lib/kvformat/int2_block.h"
#include "tests/kernels/int2_test_rows.h"
#include "tests/kernels/gpu_test_util.h"

namespace oscarkv {
namespace {

using ::oscarkv::kernels::testing::Int2TestRows;

using kernels::DequantInt2Params;
using kernels::KvQuantParams;
using kvformat::SegmentKind;
using testing::ToDevice;
using testing::ToHost;

constexpr uint32_t kPoisonBits = 0xffffffffu;  // NaN; what cudaMemset(0xff) leaves

int g_failures = 0;

void Report(bool ok, const std::string& name, const std::string& detail) {
  std::printf("%s %s %s\n", ok ? "PASS" : "FAIL", name.c_str(), detail.c_str());
  if (!ok) ++g_failures;
}

// Compares every float of out (rows and padding) by bits; returns mismatches, printing a few.
size_t CountMismatches(const std::vector<float>& got, const std::vector<float>& want) {
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], 4) != 0 && bad++ < 4) {
      uint32_t g, w;
      std::memcpy(&g, &got[i], 4);
      std::memcpy(&w, &want[i], 4);
      std::printf("  float %zu: got 0x%08x want 0x%08x\n", i, g, w);
    }
  }
  return bad;
}

// Reference output buffer: poison everywhere, then the reference's rows.
std::vector<float> ReferenceOut(const DequantInt2Params& host_params, size_t out_floats) {
  std::vector<float> want(out_floats);
  for (float& v : want) std::memcpy(&v, &kPoisonBits, 4);
  DequantInt2Params p = host_params;
  p.out = want.data();
  kernels::DequantInt2PerTokenRef(p);
  return want;
}

void RunCase(int tokens, int heads, int d, bool padded) {
  const size_t seg_bytes = kvformat::SegmentBytes(SegmentKind::kInt2PerToken, tokens, d);
  // Padded: odd segment stride and base (byte loads must not care), row stride % 4 != 0.
  const int64_t seg_stride = static_cast<int64_t>(seg_bytes) + (padded ? 13 : 0);
  const size_t seg_base = padded ? 1 : 0;
  const int64_t out_stride = static_cast<int64_t>(heads) * d + (padded ? 5 : 0);
  const size_t out_floats = static_cast<size_t>(out_stride) * tokens;
  const auto rows = Int2TestRows(tokens, heads, d, 900 + tokens * 7 + heads + d);

  std::vector<uint8_t> segments(seg_base + static_cast<size_t>(seg_stride) * heads, 0xa5);
  KvQuantParams qp;
  qp.input_f32 = rows.data();
  qp.tokens = tokens;
  qp.heads = heads;
  qp.head_dim = d;
  qp.kind = SegmentKind::kInt2PerToken;
  qp.output = segments.data() + seg_base;
  qp.output_head_stride = seg_stride;
  if (kernels::KvQuantRef(qp) != kernels::KvQuantStatus::kOk) {
    Report(false, "DequantInt2 reference encode", "");
    return;
  }
  DequantInt2Params p;
  p.segment_head_stride = seg_stride;
  p.tokens = tokens;
  p.heads = heads;
  p.head_dim = d;
  p.out_row_stride = out_stride;
  DequantInt2Params hp = p;
  hp.segments = segments.data() + seg_base;
  const std::vector<float> want = ReferenceOut(hp, out_floats);

  uint8_t* d_segments = ToDevice(segments);
  float* d_out = nullptr;
  GPU_CHECK(cudaMalloc(&d_out, out_floats * sizeof(float)));
  GPU_CHECK(cudaMemset(d_out, 0xff, out_floats * sizeof(float)));
  DequantInt2Params dp = p;
  dp.segments = d_segments + seg_base;
  dp.out = d_out;
  GPU_CHECK(kernels::DequantInt2PerTokenCuda(dp, nullptr));
  GPU_CHECK(cudaDeviceSynchronize());
  const size_t bad = CountMismatches(ToHost(d_out, out_floats), want);
  char buf[96];
  std::snprintf(buf, sizeof(buf), "mismatched floats %zu/%zu", bad, out_floats);
  const std::string shape = "T=" + std::to_string(tokens) + " H=" + std::to_string(heads) +
                            " D=" + std::to_string(d) + (padded ? " padded" : " dense");
  Report(bad == 0, "DequantInt2 " + shape, buf);

  // Round trip on the GPU from the same rows (KvQuantCuda writes what KvQuantRef writes; 2-byte
  // aligned params for its 16-bit stores, so an even stride here).
  const int64_t rt_stride = static_cast<int64_t>(seg_bytes) + (padded ? 16 : 0);
  std::vector<uint8_t> rt_segments(static_cast<size_t>(rt_stride) * heads, 0xa5);
  qp.output = rt_segments.data();
  qp.output_head_stride = rt_stride;
  if (kernels::KvQuantRef(qp) != kernels::KvQuantStatus::kOk) {
    Report(false, "DequantInt2 reference encode (round trip)", "");
    return;
  }
  hp.segments = rt_segments.data();
  hp.segment_head_stride = rt_stride;
  const std::vector<float> rt_want = ReferenceOut(hp, out_floats);
  float* d_rows = ToDevice(rows);
  uint8_t* d_rt = nullptr;
  GPU_CHECK(cudaMalloc(&d_rt, rt_segments.size()));
  GPU_CHECK(cudaMemset(d_rt, 0xa5, rt_segments.size()));
  KvQuantParams dq = qp;
  dq.input_f32 = d_rows;
  dq.output = d_rt;
  GPU_CHECK(kernels::KvQuantCuda(dq, nullptr));
  GPU_CHECK(cudaMemset(d_out, 0xff, out_floats * sizeof(float)));
  dp.segments = d_rt;
  dp.segment_head_stride = rt_stride;
  GPU_CHECK(kernels::DequantInt2PerTokenCuda(dp, nullptr));
  GPU_CHECK(cudaDeviceSynchronize());
  const size_t rt_bad = CountMismatches(ToHost(d_out, out_floats), rt_want);
  std::snprintf(buf, sizeof(buf), "mismatched floats %zu/%zu", rt_bad, out_floats);
  Report(rt_bad == 0, "KvQuantCuda->DequantInt2 " + shape, buf);

  GPU_CHECK(cudaFree(d_segments));
  GPU_CHECK(cudaFree(d_out));
  GPU_CHECK(cudaFree(d_rows));
  GPU_CHECK(cudaFree(d_rt));
}

void TestInvalidArguments() {
  uint8_t seg[64];
  float out[64];
  DequantInt2Params p;
  p.segments = seg;  // never dereferenced: rejected before launch
  p.out = out;
  p.tokens = 1;
  p.heads = 2;
  p.head_dim = 96;
  p.segment_head_stride = 1000;
  p.out_row_stride = 1000;
  bool ok = kernels::DequantInt2PerTokenCuda(p, nullptr) == cudaErrorInvalidValue;  // D = 96
  p.head_dim = 64;
  p.segment_head_stride = 16;  // below one segment (16 + 4 bytes)
  ok &= kernels::DequantInt2PerTokenCuda(p, nullptr) == cudaErrorInvalidValue;
  p.segment_head_stride = 20;
  p.out_row_stride = 127;  // rows of 2 x 64 floats would overlap
  ok &= kernels::DequantInt2PerTokenCuda(p, nullptr) == cudaErrorInvalidValue;
  p.out_row_stride = 128;
  p.out = nullptr;
  ok &= kernels::DequantInt2PerTokenCuda(p, nullptr) == cudaErrorInvalidValue;
  p.tokens = -1;
  ok &= kernels::DequantInt2PerTokenCuda(p, nullptr) == cudaErrorInvalidValue;
  p.tokens = 0;  // empty: nothing to do, nothing checked
  ok &= kernels::DequantInt2PerTokenCuda(p, nullptr) == cudaSuccess;
  GPU_CHECK(cudaGetLastError());
  Report(ok, "DequantInt2 InvalidArguments", "");
}

}  // namespace
}  // namespace oscarkv

int main() {
  if (!oscarkv::testing::HaveGpu()) {
    std::printf("no GPU: skipped\n");
    return 77;
  }
  for (const int tokens : {1, 7, 64, 256}) {
    for (const int heads : {3, 8}) {
      for (const int d : {64, 128}) {
        for (const bool padded : {false, true}) oscarkv::RunCase(tokens, heads, d, padded);
      }
    }
  }
  oscarkv::RunCase(300, 8, 128, true);
  oscarkv::TestInvalidArguments();
  std::printf("%s: %d failure(s)\n", oscarkv::g_failures == 0 ? "PASSED" : "FAILED",
              oscarkv::g_failures);
  return oscarkv::g_failures == 0 ? 0 : 1;
}

// Causal prefill attention (PrefillAttentionCuda) timings on the GPU: q/k/v as one fused f32 QKV
// buffer ([T][(Hq + 2 Hkv) D], as the QKV GEMM writes it), filled on the device; 3 warm-up runs,
// then the median of 20 runs timed with CUDA events. TFLOP/s counts the causal FLOPs
// 2 * 2 * T * T / 2 * D * Hq (QK^T and PV over the lower triangle). Each shape runs the mma.sync
// kernel (no workspace) and the Hopper kernel (with its workspace; the time includes
// its bf16 staging pre-pass), in the same process; the sm90 row gives its speedup over mma.
// bench/kernels/prefill_sdpa_baseline.py times PyTorch's cuDNN and flash SDPA on the same shapes.
//   prefill_attention_bench [--quick]   (--quick: T = 8192 only; --help: usage; other arguments
//                                       are an error, exit 2)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/model/model_kernels_cuda.h"
#include "tests/kernels/gpu_test_util.h"

namespace {

__global__ void FillUniform(float* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint64_t x = seed + static_cast<uint64_t>(i);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    p[i] = (static_cast<uint32_t>(x) & 0xffffff) * (4.0f / 16777216.0f) - 2.0f;
  }
}

// Median ms of 20 timed calls after 3 warm-up calls.
double MedianMs(const oscarkv::kernels::PrefillAttentionParams& p) {
  for (int i = 0; i < 3; ++i) GPU_CHECK(oscarkv::kernels::PrefillAttentionCuda(p, nullptr));
  GPU_CHECK(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  GPU_CHECK(cudaEventCreate(&start));
  GPU_CHECK(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int i = 0; i < 20; ++i) {
    GPU_CHECK(cudaEventRecord(start));
    GPU_CHECK(oscarkv::kernels::PrefillAttentionCuda(p, nullptr));
    GPU_CHECK(cudaEventRecord(stop));
    GPU_CHECK(cudaEventSynchronize(stop));
    float m = 0;
    GPU_CHECK(cudaEventElapsedTime(&m, start, stop));
    ms.push_back(m);
  }
  GPU_CHECK(cudaEventDestroy(start));
  GPU_CHECK(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void Run(int64_t t, int hq, int hkv, int d) {
  const int64_t stride = static_cast<int64_t>(hq + 2 * hkv) * d;
  float* qkv = nullptr;
  uint16_t* out = nullptr;
  GPU_CHECK(cudaMalloc(&qkv, t * stride * sizeof(float)));
  GPU_CHECK(cudaMalloc(&out, t * hq * d * sizeof(uint16_t)));
  FillUniform<<<1024, 256>>>(qkv, t * stride, 1234);
  GPU_CHECK(cudaGetLastError());
  oscarkv::kernels::PrefillAttentionParams p;
  p.q = qkv;
  p.k = qkv + static_cast<int64_t>(hq) * d;
  p.v = qkv + static_cast<int64_t>(hq + hkv) * d;
  p.q_row_stride = p.k_row_stride = p.v_row_stride = stride;
  p.num_tokens = t;
  p.num_q_heads = hq;
  p.num_kv_heads = hkv;
  p.head_dim = d;
  p.sm_scale = 1.0f / std::sqrt(static_cast<float>(d));
  p.out_bf16 = out;
  const double flops = 2.0 * 2.0 * static_cast<double>(t) * t / 2.0 * d * hq;
  const double mma_ms = MedianMs(p);
  std::printf(
      "prefill_attention T=%-6lld Hq=%-2d Hkv=%-2d D=%-3d mma   median %9.3f ms  %7.1f TFLOP/s\n",
      static_cast<long long>(t), hq, hkv, d, mma_ms, flops / (mma_ms * 1e-3) / 1e12);
  p.workspace_bytes = oscarkv::kernels::PrefillAttentionWorkspaceBytes(p);
  if (p.workspace_bytes > 0) {
    GPU_CHECK(cudaMalloc(&p.workspace, static_cast<size_t>(p.workspace_bytes)));
    const double ms = MedianMs(p);
    std::printf(
        "prefill_attention T=%-6lld Hq=%-2d Hkv=%-2d D=%-3d sm90  median %9.3f ms  %7.1f TFLOP/s"
        "  %.2fx mma\n",
        static_cast<long long>(t), hq, hkv, d, ms, flops / (ms * 1e-3) / 1e12, mma_ms / ms);
    GPU_CHECK(cudaFree(p.workspace));
  }
  GPU_CHECK(cudaFree(qkv));
  GPU_CHECK(cudaFree(out));
}

}  // namespace

int main(int argc, char** argv) {
  constexpr char kUsage[] =
      "Causal prefill attention timings on the GPU (PrefillAttentionCuda, mma.sync and Hopper\n"
      "kernels), T = 8192 and 32768 tokens at Hq32/Hkv8/D128 and Hq9/Hkv3/D64.\n"
      "Usage: prefill_attention_bench [--quick]   (--quick: T = 8192 only)\n";
  const std::string arg = argc == 2 ? argv[1] : "";
  if (arg == "--help" || arg == "-h") {
    std::printf("%s", kUsage);
    return 0;
  }
  if (argc > 2 || (argc == 2 && arg != "--quick")) {
    std::fprintf(stderr, "prefill_attention_bench: unknown arguments\n%s", kUsage);
    return 2;
  }
  if (!oscarkv::testing::HaveGpu()) {
    std::printf("no GPU: skipped\n");
    return 0;
  }
  const bool quick = arg == "--quick";
  for (const int64_t t : {int64_t{8192}, int64_t{32768}}) {
    if (quick && t != 8192) continue;
    Run(t, 32, 8, 128);
    Run(t, 9, 3, 64);
  }
  return 0;
}

// Does a static partition of a decode-sized read (78 MB, B=1 128k at D = 128) run at the same
// speed on every SM? Session 32's traces of the no-math decode kernel put each SM's loop time
// between 15.9 and 19.3 us, persistent from call to call. This micro reads the same bytes with
// one wave of 2 CTAs per SM, each CTA a contiguous chunk, each warp a contiguous quarter of it
// (as the decode splits do), at several warps per SM and loads per batch, and prints per config
// the time, the bandwidth, and the spread of the per-SM spans (first CTA start to last CTA end
// on that SM, %globaltimer), with how alike the spans are from one launch to the next.
//   nvcc -I. -O3 -std=c++17 -arch=sm_90a -o /tmp/sm_stream_probe bench/kernels/results/attn_v32/sm_stream_probe.cu && /tmp/sm_stream_probe
//   (from the repository root)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <vector>

#include "tests/kernels/gpu_test_util.h"  // GPU_CHECK


__device__ __forceinline__ unsigned long long Now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned Smid() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

// CTA b reads words [b * per_cta, (b + 1) * per_cta); warp w of it a contiguous quarter (or
// 1/warps) of that, U 16-byte loads per lane per batch (U * 512 bytes per warp in flight).
template <int U>
__global__ void ReadChunks(const uint4* __restrict__ x, int64_t per_cta,
                           unsigned long long* rec, uint32_t* sink) {
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t per_warp = per_cta / warps;
  const uint4* p = x + blockIdx.x * per_cta + warp * per_warp;
  __syncthreads();
  const unsigned long long t0 = Now();
  uint32_t acc = 0;
  for (int64_t i = lane; i + 32 * (U - 1) < per_warp; i += 32 * U) {
    uint4 v[U];
#pragma unroll
    for (int k = 0; k < U; ++k) v[k] = __ldcs(p + i + 32 * k);
#pragma unroll
    for (int k = 0; k < U; ++k) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    rec[3 * blockIdx.x] = t0;
    rec[3 * blockIdx.x + 1] = Now();
    rec[3 * blockIdx.x + 2] = Smid();
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

template <int U>
void Launch(int grid, int threads, const uint4* x, int64_t per_cta, unsigned long long* rec,
            uint32_t* sink, cudaStream_t s) {
  ReadChunks<U><<<grid, threads, 0, s>>>(x, per_cta, rec, sink);
}

double Corr(const std::vector<double>& a, const std::vector<double>& b) {
  const double ma = std::accumulate(a.begin(), a.end(), 0.0) / a.size();
  const double mb = std::accumulate(b.begin(), b.end(), 0.0) / b.size();
  double n = 0, da = 0, db = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    n += (a[i] - ma) * (b[i] - mb);
    da += (a[i] - ma) * (a[i] - ma);
    db += (b[i] - mb) * (b[i] - mb);
  }
  return n / std::sqrt(da * db);
}

int main() {
  int sms = 0;
  GPU_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int64_t bytes = 78LL * 1000 * 1000;  // ~ the INT2 history + BF16 tier at B=1 128k
  const int kBuffers = 5;                     // 390 MB in turn: each launch reads from DRAM
  std::vector<uint4*> buf(kBuffers);
  for (auto& b : buf) {
    GPU_CHECK(cudaMalloc(&b, bytes + (1 << 20)));
    GPU_CHECK(cudaMemset(b, 1, bytes + (1 << 20)));
  }
  uint32_t* sink;
  GPU_CHECK(cudaMalloc(&sink, 4));
  const int kCtasPerSm = 2, kStamped = 8, kTimed = 40;
  unsigned long long* rec;
  GPU_CHECK(cudaMalloc(&rec, sizeof(unsigned long long) * 3 * sms * kCtasPerSm * kStamped));
  cudaStream_t s;
  GPU_CHECK(cudaStreamCreate(&s));
  cudaEvent_t e0, e1;
  GPU_CHECK(cudaEventCreate(&e0));
  GPU_CHECK(cudaEventCreate(&e1));
  std::printf("SMs %d, %d CTAs per SM, %.1f MB per launch, %d buffers in turn\n", sms,
              kCtasPerSm, bytes / 1e6, kBuffers);
  std::printf("%-8s %-5s %9s %9s | %6s %6s %6s %7s | %s\n", "warps/SM", "U",
              "time us", "GB/s", "SM min", "median", "max", "max/hm", "corr of per-SM spans between launches");
  std::vector<double> keep_span;  // per-SM mean span of the config printed in full
  for (int warps_per_cta : {4, 8, 16, 32}) {
    for (int u : {4, 8, 16}) {
      const int grid = sms * kCtasPerSm, threads = 32 * warps_per_cta;
      const int64_t quantum = int64_t(32) * u * warps_per_cta;
      const int64_t per_cta = (bytes / 16 / grid) / quantum * quantum;
      auto go = [&](int i, unsigned long long* r) {
        const uint4* x = buf[i % kBuffers];
        if (u == 4) Launch<4>(grid, threads, x, per_cta, r, sink, s);
        if (u == 8) Launch<8>(grid, threads, x, per_cta, r, sink, s);
        if (u == 16) Launch<16>(grid, threads, x, per_cta, r, sink, s);
      };
      for (int i = 0; i < 5; ++i) go(i, rec);  // warm-up
      std::vector<float> ms(kTimed);
      for (int i = 0; i < kTimed; ++i) {
        GPU_CHECK(cudaEventRecord(e0, s));
        go(i, rec);
        GPU_CHECK(cudaEventRecord(e1, s));
        GPU_CHECK(cudaEventSynchronize(e1));
        GPU_CHECK(cudaEventElapsedTime(&ms[i], e0, e1));
      }
      std::sort(ms.begin(), ms.end());
      const double us = ms[kTimed / 2] * 1e3;
      for (int i = 0; i < kStamped; ++i) go(i, rec + 3 * grid * i);
      GPU_CHECK(cudaStreamSynchronize(s));
      GPU_CHECK(cudaGetLastError());
      std::vector<unsigned long long> h(3 * grid * kStamped);
      GPU_CHECK(cudaMemcpy(h.data(), rec, h.size() * 8, cudaMemcpyDeviceToHost));
      std::vector<std::vector<double>> span(kStamped, std::vector<double>(sms, 0));
      for (int i = 0; i < kStamped; ++i) {
        std::vector<unsigned long long> lo(sms, ~0ull), hi(sms, 0);
        for (int b = 0; b < grid; ++b) {
          const unsigned long long* r = &h[3 * (grid * i + b)];
          lo[r[2]] = std::min(lo[r[2]], r[0]);
          hi[r[2]] = std::max(hi[r[2]], r[1]);
        }
        for (int m = 0; m < sms; ++m) span[i][m] = hi[m] > lo[m] ? (hi[m] - lo[m]) / 1e3 : 0;
      }
      std::vector<double> mean(sms, 0);
      for (int m = 0; m < sms; ++m) {
        for (int i = 0; i < kStamped; ++i) mean[m] += span[i][m] / kStamped;
      }
      std::vector<double> sorted = mean;
      std::sort(sorted.begin(), sorted.end());
      double inv = 0;
      for (double d : mean) inv += 1.0 / d;
      const double hm = sms / inv;
      double corr = 0;
      int pairs = 0;
      for (int i = 0; i < kStamped; ++i) {
        for (int j = i + 1; j < kStamped; ++j, ++pairs) corr += Corr(span[i], span[j]);
      }
      std::printf("%-8d %-5d %9.2f %9.1f | %6.2f %6.2f %6.2f %7.3f | %.2f\n",
                  warps_per_cta * kCtasPerSm, u, us, per_cta * grid * 16 / (us * 1e3),
                  sorted.front(), sorted[sms / 2], sorted.back(), sorted.back() / hm,
                  corr / pairs);
      if (warps_per_cta == 4 && u == 16) keep_span = mean;
    }
  }
  std::printf("per-SM mean span (us) at 8 warps/SM, U = 16, by SM id:\n");
  for (int m = 0; m < sms; ++m) std::printf("%3d:%5.2f%s", m, keep_span[m], m % 8 == 7 ? "\n" : "  ");
  std::printf("\n");
  return 0;
}

// Throughput of mma.sync flavours on this GPU: warp MMAs per SM per cycle (8 independent chains).
#include <cstdio>
#include <cstdint>
template <int kKind>
__global__ void K(int iters, uint32_t seed, float* out, long long* cyc) {
  uint32_t a0 = seed ^ threadIdx.x, a1 = a0 * 3, a2 = a0 * 5, a3 = a0 * 7, b0 = a0 * 11, b1 = a0 * 13;
  float f[8][4] = {};
  int32_t d[8][4] = {};
  long long t0 = clock64();
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      if constexpr (kKind == 0) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
          : "+f"(f[c][0]), "+f"(f[c][1]), "+f"(f[c][2]), "+f"(f[c][3]) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
      } else if constexpr (kKind == 1) {
        asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
          : "+r"(d[c][0]), "+r"(d[c][1]), "+r"(d[c][2]), "+r"(d[c][3]) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
      } else if constexpr (kKind == 2) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
          : "+r"(d[c][0]), "+r"(d[c][1]), "+r"(d[c][2]), "+r"(d[c][3]) : "r"(a0), "r"(a1), "r"(b0));
      } else if constexpr (kKind == 3) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
          : "+f"(f[c][0]), "+f"(f[c][1]), "+f"(f[c][2]), "+f"(f[c][3]) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
      } else if constexpr (kKind == 4) {  // alternate IMMA and HMMA
        if (c & 1) {
          asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+r"(d[c][0]), "+r"(d[c][1]), "+r"(d[c][2]), "+r"(d[c][3]) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        } else {
          asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(f[c][0]), "+f"(f[c][1]), "+f"(f[c][2]), "+f"(f[c][3]) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        }
      } else if constexpr (kKind == 5) {  // 2 IMMA then 6 HMMA (the new step's mix)
        if (c < 2) {
          asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+r"(d[c][0]), "+r"(d[c][1]), "+r"(d[c][2]), "+r"(d[c][3]) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        } else {
          asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(f[c][0]), "+f"(f[c][1]), "+f"(f[c][2]), "+f"(f[c][3]) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        }
      } else {
        asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
          : "+f"(f[c][0]), "+f"(f[c][1]), "+f"(f[c][2]), "+f"(f[c][3]) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
      }
    }
  }
  long long t1 = clock64();
  float s = 0;
  for (int c = 0; c < 8; ++c) for (int k = 0; k < 4; ++k) s += f[c][k] + d[c][k];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
  if (threadIdx.x == 0 && blockIdx.x == 0) *cyc = t1 - t0;
}
// Latency: one dependent chain in one warp.
template <int kKind>
__global__ void L(int iters, uint32_t seed, float* out, long long* cyc) {
  uint32_t a0 = seed ^ threadIdx.x, a1 = a0 * 3, a2 = a0 * 5, a3 = a0 * 7, b0 = a0 * 11, b1 = a0 * 13;
  float f[4] = {}; int32_t d[4] = {};
  long long t0 = clock64();
  for (int i = 0; i < iters; ++i) {
    if constexpr (kKind == 0) {
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(f[0]), "+f"(f[1]), "+f"(f[2]), "+f"(f[3]) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    } else {
      asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
  }
  long long t1 = clock64();
  out[threadIdx.x] = f[0] + f[1] + f[2] + f[3] + d[0] + d[1] + d[2] + d[3];
  if (threadIdx.x == 0) *cyc = t1 - t0;
}
int main() {
  float* out; long long* cyc; cudaMalloc(&out, 1 << 24); cudaMalloc(&cyc, 8);
  const char* names[7] = {"HMMA f16 m16n8k16", "IMMA u8s8 m16n8k32", "IMMA u8s8 m16n8k16", "HMMA bf16 m16n8k16", "IMMA/HMMA alternating", "2 IMMA + 6 HMMA", "FP8 e4m3 m16n8k32"};
  const int iters = 4096;
  for (int w = 8; w <= 8; w *= 2) {
    for (int k = 0; k < 7; ++k) {
      long long c = 0;
      for (int rep = 0; rep < 2; ++rep) {
        if (k == 0) K<0><<<132, 32 * w>>>(iters, 1, out, cyc);
        if (k == 1) K<1><<<132, 32 * w>>>(iters, 1, out, cyc);
        if (k == 2) K<2><<<132, 32 * w>>>(iters, 1, out, cyc);
        if (k == 3) K<3><<<132, 32 * w>>>(iters, 1, out, cyc);
        if (k == 4) K<4><<<132, 32 * w>>>(iters, 1, out, cyc);
        if (k == 5) K<5><<<132, 32 * w>>>(iters, 1, out, cyc);
        if (k == 6) K<6><<<132, 32 * w>>>(iters, 1, out, cyc);
        cudaDeviceSynchronize();
        cudaMemcpy(&c, cyc, 8, cudaMemcpyDeviceToHost);
      }
      printf("%-22s warps/SM %2d: %.3f warp MMAs per cycle per SM sub-partition\n", names[k], w,
             8.0 * iters * w / 4.0 / c);
    }
  }
  for (int k = 0; k < 2; ++k) {
    long long c = 0;
    for (int rep = 0; rep < 2; ++rep) {
      if (k == 0) L<0><<<1, 32>>>(iters, 1, out, cyc); else L<1><<<1, 32>>>(iters, 1, out, cyc);
      cudaDeviceSynchronize(); cudaMemcpy(&c, cyc, 8, cudaMemcpyDeviceToHost);
    }
    printf("%-22s dependent latency %.1f cycles\n", names[k], double(c) / iters);
  }
  printf("%s\n", cudaGetErrorString(cudaGetLastError()));
}

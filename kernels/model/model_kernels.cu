// CUDA kernels of the GPU forward other than prefill attention (model_kernels_cuda.h): embedding
// gather, RMSNorm to bf16, Q/K/V post-processing (bias, qk-norm, RoPE; for a decode step also
// its rotated copies), SiLU-mul to bf16, f32 -> bf16, row argmax, and BF16 page-unit
// write/gather. All are memory bound: vectorised 16-byte
// accesses where the alignment allows (checked on the host, scalar fallback otherwise), one block
// per row for the row reductions, warp shuffles for the reductions.
//
// Bit-for-bit intent: the float operations follow model_kernels_ref.cc in the same order with
// __f*_rn intrinsics (no FMA contraction); sums of squares run in double as the reference does;
// RoPE angles and SiLU's exp are computed in double and rounded to float. The remaining
// differences are ulps of CUDA's double libm and summation order, well under one bf16 ulp.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/model/model_kernels_cuda.h"

namespace oscarkv::kernels {
namespace {

using cuda::Bf16BitsToFloatDev;

constexpr int kRowThreads = 256;

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

__device__ __forceinline__ uint16_t ToBf16Bits(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
__device__ __forceinline__ uint2 Pack4Bf16(float4 v) {
  return make_uint2(cuda::PackBf16x2(v.x, v.y), cuda::PackBf16x2(v.z, v.w));
}

__device__ __forceinline__ double WarpSumDouble(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block-wide double sum; every thread gets the result. `red` holds >= 32 doubles.
__device__ __forceinline__ double BlockSumDouble(double v, double* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = WarpSumDouble(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  const int nwarps = (blockDim.x + 31) >> 5;
  double t = lane < nwarps ? red[lane] : 0.0;
  t = WarpSumDouble(t);
  __syncthreads();  // red may be reused by the caller
  return t;
}

// ---- Embedding ----
template <bool kVec>
__global__ void EmbedRowsKernel(const uint16_t* __restrict__ table, const int32_t* __restrict__ tokens,
                                int d_model, float* __restrict__ x) {
  cuda::StartChainedKernel();
  const int64_t r = blockIdx.x;
  const uint16_t* src = table + static_cast<int64_t>(tokens[r]) * d_model;
  float* dst = x + r * d_model;
  if constexpr (kVec) {
    for (int i = threadIdx.x; i < d_model / 8; i += blockDim.x) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(src) + i);
      float4* o = reinterpret_cast<float4*>(dst) + 2 * i;
      o[0] = make_float4(cuda::Bf16LoToFloat(v.x), cuda::Bf16HiToFloat(v.x),
                         cuda::Bf16LoToFloat(v.y), cuda::Bf16HiToFloat(v.y));
      o[1] = make_float4(cuda::Bf16LoToFloat(v.z), cuda::Bf16HiToFloat(v.z),
                         cuda::Bf16LoToFloat(v.w), cuda::Bf16HiToFloat(v.w));
    }
  } else {
    for (int i = threadIdx.x; i < d_model; i += blockDim.x) dst[i] = Bf16BitsToFloatDev(src[i]);
  }
}

// ---- RMSNorm -> bf16, one block per row ----
template <bool kVec>
__global__ void __launch_bounds__(kRowThreads) RmsNormToBf16Kernel(
    const float* __restrict__ x, const float* __restrict__ weight, int n, float eps,
    uint16_t* __restrict__ out) {
  __shared__ double red[32];
  cuda::StartChainedKernel();
  const int64_t r = blockIdx.x;
  const float* xr = x + r * n;
  uint16_t* o = out + r * n;
  double ss = 0.0;
  if constexpr (kVec) {
    for (int i = threadIdx.x; i < n / 4; i += blockDim.x) {
      const float4 v = reinterpret_cast<const float4*>(xr)[i];
      ss += double(v.x) * v.x + double(v.y) * v.y + double(v.z) * v.z + double(v.w) * v.w;
    }
  } else {
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss += double(xr[i]) * xr[i];
  }
  ss = BlockSumDouble(ss, red);
  const float inv = static_cast<float>(1.0 / sqrt(ss / n + static_cast<double>(eps)));
  if constexpr (kVec) {
    for (int i = threadIdx.x; i < n / 4; i += blockDim.x) {
      const float4 v = reinterpret_cast<const float4*>(xr)[i];
      const float4 w = __ldg(reinterpret_cast<const float4*>(weight) + i);
      const float4 y = make_float4(__fmul_rn(__fmul_rn(v.x, inv), w.x),
                                   __fmul_rn(__fmul_rn(v.y, inv), w.y),
                                   __fmul_rn(__fmul_rn(v.z, inv), w.z),
                                   __fmul_rn(__fmul_rn(v.w, inv), w.w));
      reinterpret_cast<uint2*>(o)[i] = Pack4Bf16(y);
    }
  } else {
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      o[i] = ToBf16Bits(__fmul_rn(__fmul_rn(xr[i], inv), weight[i]));
    }
  }
}

// ---- Q/K/V post: one block per token row; each warp takes whole heads ----
// Dynamic shared memory: [warps][head_dim] float staging + cos[half] + sin[half].

// RoPE angles of row r as lib/model ApplyRope: double, then cos/sin rounded to float. The block's
// threads fill cs/sn; the caller synchronises.
__device__ void RopeAngles(const QkvPostParams& p, int64_t r, float* cs, float* sn) {
  const int half = p.rope_dim / 2;
  const double pos = static_cast<double>(p.positions[r]) / p.rope_scale;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    double freq = pow(p.rope_theta, -2.0 * i / p.rope_dim);
    if (p.freq_div != nullptr) freq /= p.freq_div[i];
    double s, c;
    sincos(pos * freq, &s, &c);
    cs[i] = static_cast<float>(c);
    sn[i] = static_cast<float>(s);
  }
}

// Head hh of row r (q heads first, then k, then v), by one warp: bias, qk-norm and RoPE in place.
// On return buf[0, D) holds the head's final values (the warp is synchronised).
__device__ void PostHead(const QkvPostParams& p, int64_t r, int hh, float* buf, const float* cs,
                         const float* sn) {
  const int lane = threadIdx.x & 31;
  const int d = p.head_dim, half = p.rope_dim / 2;
  float* x;
  const float* bias;
  const float* norm;
  bool rope = true;
  if (hh < p.num_q_heads) {
    x = p.q + r * p.q_row_stride + static_cast<int64_t>(hh) * d;
    bias = p.bq != nullptr ? p.bq + static_cast<int64_t>(hh) * d : nullptr;
    norm = p.q_norm;
  } else if (hh < p.num_q_heads + p.num_kv_heads) {
    const int h = hh - p.num_q_heads;
    x = p.k + r * p.k_row_stride + static_cast<int64_t>(h) * d;
    bias = p.bk != nullptr ? p.bk + static_cast<int64_t>(h) * d : nullptr;
    norm = p.k_norm;
  } else {
    const int h = hh - p.num_q_heads - p.num_kv_heads;
    x = p.v + r * p.v_row_stride + static_cast<int64_t>(h) * d;
    bias = p.bv != nullptr ? p.bv + static_cast<int64_t>(h) * d : nullptr;
    norm = nullptr;
    rope = false;
  }
  double ss = 0.0;
  for (int i = lane; i < d; i += 32) {
    float v = x[i];
    if (bias != nullptr) v = __fadd_rn(v, bias[i]);
    buf[i] = v;
    ss += double(v) * v;
  }
  if (norm != nullptr) {
    ss = WarpSumDouble(ss);
    const float inv = static_cast<float>(1.0 / sqrt(ss / d + static_cast<double>(p.eps)));
    for (int i = lane; i < d; i += 32) buf[i] = __fmul_rn(__fmul_rn(buf[i], inv), norm[i]);
  }
  __syncwarp();
  if (rope) {
    for (int i = lane; i < half; i += 32) {
      const bool adj = p.pairing == RopePairing::kAdjacentPairs;
      const int i0 = adj ? 2 * i : i;
      const int i1 = adj ? 2 * i + 1 : i + half;
      const float a = buf[i0], b = buf[i1];
      buf[i0] = __fsub_rn(__fmul_rn(a, cs[i]), __fmul_rn(b, sn[i]));
      buf[i1] = __fadd_rn(__fmul_rn(a, sn[i]), __fmul_rn(b, cs[i]));
    }
    __syncwarp();
  }
  for (int i = lane; i < d; i += 32) x[i] = buf[i];
}

// Row r's bf16 page row for KV head h of K (is_v false) or V, D channels.
__device__ __forceinline__ uint16_t* PageRow(const QkvPageWrite& w, int64_t r, int h, bool is_v,
                                             int d) {
  return reinterpret_cast<uint16_t*>(
      w.pool + static_cast<int64_t>(w.page_ids[r]) * w.page_stride_bytes + h * w.head_stride_bytes +
      (is_v ? w.v_segment_offset_bytes : w.k_segment_offset_bytes) +
      static_cast<int64_t>(w.rows_in_page[r]) * d * 2);
}

__global__ void __launch_bounds__(kRowThreads)
    QkvPostKernel(const __grid_constant__ QkvPostParams p,
                  const __grid_constant__ QkvPageWrite pages) {
  extern __shared__ float smem[];
  cuda::StartChainedKernel();
  const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const int d = p.head_dim;
  float* buf = smem + warp * d;
  float* cs = smem + nwarps * d;
  float* sn = cs + p.rope_dim / 2;
  const int64_t r = blockIdx.x;
  RopeAngles(p, r, cs, sn);
  __syncthreads();
  const int total_heads = p.num_q_heads + 2 * p.num_kv_heads;
  for (int hh = warp; hh < total_heads; hh += nwarps) {
    PostHead(p, r, hh, buf, cs, sn);
    if (pages.pool != nullptr && hh >= p.num_q_heads) {
      // WriteBf16PageRowsKernel's rounding of the row just stored (each lane its own channels).
      const bool is_v = hh >= p.num_q_heads + p.num_kv_heads;
      uint16_t* page_row =
          PageRow(pages, r, hh - p.num_q_heads - (is_v ? p.num_kv_heads : 0), is_v, d);
      for (int i = threadIdx.x & 31; i < d; i += 32) page_row[i] = ToBf16Bits(buf[i]);
    }
    __syncwarp();  // buf is rewritten by this warp's next head
  }
}

// ---- Q/K/V post with rotated copies: one block per (row, group of up to 8 heads) ----
// A group holds q/k heads (rotated by qk_rotation) or v heads (v_rotation), one head per warp, so
// a batch-1 decode step spreads over several SMs and each block stages one R. R is copied to
// shared memory with all its loads in flight (it is cold in a decode step: RotateRowsKernel's
// comment), then each warp multiplies its head as RotateRowsKernel does: ascending i, separate
// round-to-nearest multiply and add, hence the same bits as QkvPostCuda + RotateRowsCuda.
// Dynamic shared memory: R [D][D] (filled when the group needs it), [warps][D] staging, cos, sin.
constexpr int kGroupHeads = kRowThreads / 32;

template <int D>
__global__ void __launch_bounds__(kRowThreads) QkvPostRotateKernel(
    const __grid_constant__ QkvPostParams p, const __grid_constant__ QkvRotatedOut rotated,
    int qk_groups, int groups) {
  extern __shared__ float4 smem4[];
  cuda::AllowDependentLaunch();  // chained (StartChainedKernel), R staged before the wait
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t r = blockIdx.x / groups;
  const int g = static_cast<int>(blockIdx.x % groups);
  const int qk_heads = p.num_q_heads + p.num_kv_heads;
  const bool v_group = g >= qk_groups;
  const int first = v_group ? qk_heads + (g - qk_groups) * kGroupHeads : g * kGroupHeads;
  const int last = min(first + kGroupHeads, v_group ? qk_heads + p.num_kv_heads : qk_heads);
  const bool rotate_q = rotated.q != nullptr && first < p.num_q_heads;
  const bool rotate_k = rotated.k != nullptr && !v_group && last > p.num_q_heads;
  const bool needs_r = v_group ? rotated.v != nullptr : rotate_q || rotate_k;
  float* rs = reinterpret_cast<float*>(smem4);  // [D][D], filled only when needs_r
  float* buf = rs + D * D + warp * D;
  float* cs = rs + D * D + kGroupHeads * D;
  float* sn = cs + p.rope_dim / 2;
  if (needs_r) {
    const float4* r4 = reinterpret_cast<const float4*>(v_group ? rotated.v_rotation
                                                               : rotated.qk_rotation);
#pragma unroll 8
    for (int i = threadIdx.x; i < D * D / 4; i += kRowThreads) smem4[i] = __ldg(r4 + i);
  }
  cuda::WaitForPriorGrid();  // R is a weight: staged while the kernel before drains
  if (!v_group) RopeAngles(p, r, cs, sn);  // v has no RoPE
  __syncthreads();
  const int hh = first + warp;
  if (hh >= last) return;
  PostHead(p, r, hh, buf, cs, sn);
  float* out;
  uint16_t* page_row = nullptr;  // this head's BF16 page row, when the step writes the cache
  if (hh < p.num_q_heads) {
    out = rotated.q;
    if (out != nullptr) out += (r * p.num_q_heads + hh) * D;
  } else {
    const int h = hh - (hh < qk_heads ? p.num_q_heads : qk_heads);
    out = hh < qk_heads ? rotated.k : rotated.v;
    if (out != nullptr) out += (r * p.num_kv_heads + h) * D;
    if (rotated.pages.pool != nullptr) page_row = PageRow(rotated.pages, r, h, hh >= qk_heads, D);
  }
  if (out == nullptr) return;
  __syncwarp();  // buf complete for every lane
  float acc[D / 32];
#pragma unroll
  for (int c = 0; c < D / 32; ++c) acc[c] = 0.0f;
#pragma unroll 4
  for (int i = 0; i < D; ++i) {
    const float xi = buf[i];
#pragma unroll
    for (int c = 0; c < D / 32; ++c) {
      acc[c] = __fadd_rn(acc[c], __fmul_rn(xi, rs[i * D + lane + 32 * c]));
    }
  }
#pragma unroll
  for (int c = 0; c < D / 32; ++c) out[lane + 32 * c] = acc[c];
  if (page_row != nullptr) {  // WriteBf16PageRowsKernel's rounding of the same value
#pragma unroll
    for (int c = 0; c < D / 32; ++c) page_row[lane + 32 * c] = ToBf16Bits(acc[c]);
  }
}

bool ValidQkvPost(const QkvPostParams& p) {
  return p.rows >= 0 && p.rows <= INT_MAX &&
         (p.rows == 0 ||
          (p.q != nullptr && p.k != nullptr && p.v != nullptr && p.positions != nullptr &&
           p.num_q_heads > 0 && p.num_kv_heads > 0 && p.head_dim > 0 && p.head_dim <= 1024 &&
           p.rope_dim >= 0 && p.rope_dim <= p.head_dim && p.rope_dim % 2 == 0 &&
           p.rope_scale != 0.0));
}

// A page write (pool set) needs its ids and 2-byte aligned bf16 rows; no write is valid.
bool ValidPageWrite(const QkvPageWrite& w) {
  return w.pool == nullptr ||
         (w.page_ids != nullptr && w.rows_in_page != nullptr &&
          (reinterpret_cast<uintptr_t>(w.pool) & 1u) == 0 && w.page_stride_bytes % 2 == 0 &&
          w.head_stride_bytes % 2 == 0 && w.k_segment_offset_bytes % 2 == 0 &&
          w.v_segment_offset_bytes % 2 == 0);
}

template <int D>
cudaError_t LaunchQkvPostRotate(const QkvPostParams& p, const QkvRotatedOut& rotated,
                                cudaStream_t stream) {
  const int qk_groups = (p.num_q_heads + p.num_kv_heads + kGroupHeads - 1) / kGroupHeads;
  const int groups = qk_groups + (p.num_kv_heads + kGroupHeads - 1) / kGroupHeads;
  if (p.rows * groups > INT_MAX) return cudaErrorInvalidValue;
  // R, the warps' staging, cos and sin; the attribute allows the largest rope_dim (= D).
  const int smem = (D * D + kGroupHeads * D + p.rope_dim) * static_cast<int>(sizeof(float));
  static const cudaError_t attr =
      cudaFuncSetAttribute(QkvPostRotateKernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           (D * D + kGroupHeads * D + D) * static_cast<int>(sizeof(float)));
  if (attr != cudaSuccess) return attr;
  return cuda::LaunchOverlappingPrior(QkvPostRotateKernel<D>,
                                      dim3(static_cast<unsigned>(p.rows * groups)),
                                      dim3(kRowThreads), smem, stream, p, rotated, qk_groups,
                                      groups);
}

// ---- SiLU(gate) * up -> bf16 ----
__device__ __forceinline__ float SiluMul(float g, float u) {
  const float e = static_cast<float>(exp(-static_cast<double>(g)));
  return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, e)), u);
}
template <bool kVec>
__global__ void SiluMulToBf16Kernel(const float* __restrict__ gate_up, int64_t rows, int d_ff,
                                    uint16_t* __restrict__ out) {
  cuda::StartChainedKernel();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if constexpr (kVec) {
    const int q = d_ff / 4;
    const int64_t total = rows * q;
    for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
         e += stride) {
      const int64_t r = e / q;
      const int i = static_cast<int>(e - r * q);
      const float4* row = reinterpret_cast<const float4*>(gate_up + r * 2 * d_ff);
      const float4 g = row[i], u = row[q + i];
      const float4 y = make_float4(SiluMul(g.x, u.x), SiluMul(g.y, u.y), SiluMul(g.z, u.z),
                                   SiluMul(g.w, u.w));
      reinterpret_cast<uint2*>(out + r * d_ff)[i] = Pack4Bf16(y);
    }
  } else {
    const int64_t total = rows * d_ff;
    for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
         e += stride) {
      const int64_t r = e / d_ff;
      const int i = static_cast<int>(e - r * d_ff);
      const float* row = gate_up + r * 2 * d_ff;
      out[e] = ToBf16Bits(SiluMul(row[i], row[d_ff + i]));
    }
  }
}

// ---- f32 -> bf16 ----
__global__ void F32ToBf16Kernel(const float* __restrict__ in, int64_t n, uint16_t* __restrict__ out,
                                bool vec) {
  cuda::StartChainedKernel();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  int64_t done = 0;
  if (vec) {
    const int64_t n4 = n / 4;
    for (int64_t e = tid; e < n4; e += stride) {
      reinterpret_cast<uint2*>(out)[e] = Pack4Bf16(reinterpret_cast<const float4*>(in)[e]);
    }
    done = n4 * 4;
  }
  for (int64_t e = done + tid; e < n; e += stride) out[e] = ToBf16Bits(in[e]);
}

// ---- Argmax, one block per row; ties -> lowest index, NaN never wins ----
__device__ __forceinline__ void ArgmaxTake(float v, int i, float& best, int& idx) {
  if (v > best || (v == best && i < idx)) {
    best = v;
    idx = i;
  }
}
template <bool kVec>
__global__ void __launch_bounds__(kRowThreads) ArgmaxRowsKernel(const float* __restrict__ logits,
                                                                int vocab, int32_t* __restrict__ out) {
  __shared__ float red_v[32];
  __shared__ int red_i[32];
  cuda::StartChainedKernel();
  const float* x = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float best = -INFINITY;
  int idx = INT_MAX;
  if constexpr (kVec) {
    for (int i = threadIdx.x; i < vocab / 4; i += blockDim.x) {
      const float4 v = reinterpret_cast<const float4*>(x)[i];
      ArgmaxTake(v.x, 4 * i, best, idx);
      ArgmaxTake(v.y, 4 * i + 1, best, idx);
      ArgmaxTake(v.z, 4 * i + 2, best, idx);
      ArgmaxTake(v.w, 4 * i + 3, best, idx);
    }
  } else {
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) ArgmaxTake(x[i], i, best, idx);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    ArgmaxTake(ov, oi, best, idx);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  if (lane == 0) {
    red_v[warp] = best;
    red_i[warp] = idx;
  }
  __syncthreads();
  if (warp == 0) {
    best = lane < nwarps ? red_v[lane] : -INFINITY;
    idx = lane < nwarps ? red_i[lane] : INT_MAX;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, best, o);
      const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
      ArgmaxTake(ov, oi, best, idx);
    }
    if (lane == 0) out[blockIdx.x] = idx == INT_MAX ? 0 : idx;
  }
}

// ---- BF16 page units: write rows (f32 -> bf16), one block per token ----
// The writes of one launch: blockIdx.y picks the job, blockIdx.x the token.
struct PageRowsJobs {
  PageRowsParams job[kMaxPageRowsJobs];
};

template <bool kVec>
__global__ void WriteBf16PageRowsKernel(const __grid_constant__ PageRowsJobs jobs) {
  cuda::StartChainedKernel();
  const PageRowsParams& p = jobs.job[blockIdx.y];
  const int64_t t = blockIdx.x;
  if (t >= p.tokens) return;
  const int d = p.head_dim;
  const float* src = p.rows + t * p.row_stride;
  uint8_t* page = p.pool + static_cast<int64_t>(p.page_ids[t]) * p.page_stride_bytes +
                  p.segment_offset_bytes + static_cast<int64_t>(p.rows_in_page[t]) * d * 2;
  if constexpr (kVec) {
    const int per_head = d / 4;
    for (int e = threadIdx.x; e < p.heads * per_head; e += blockDim.x) {
      const int h = e / per_head, c = e - h * per_head;
      const float4 v = reinterpret_cast<const float4*>(src + static_cast<int64_t>(h) * d)[c];
      reinterpret_cast<uint2*>(page + h * p.head_stride_bytes)[c] = Pack4Bf16(v);
    }
  } else {
    for (int e = threadIdx.x; e < p.heads * d; e += blockDim.x) {
      const int h = e / d, i = e - h * d;
      reinterpret_cast<uint16_t*>(page + h * p.head_stride_bytes)[i] =
          ToBf16Bits(src[static_cast<int64_t>(h) * d + i]);
    }
  }
}

// ---- BF16 page units: gather 8 rows per page into [pages * 8][heads][D], one block per page ----
template <bool kVec>
__global__ void GatherBf16PageRowsKernel(const __grid_constant__ PageGatherParams p) {
  cuda::StartChainedKernel();
  const int64_t pg = blockIdx.x;
  const int d = p.head_dim;
  const uint8_t* unit0 = p.pool + static_cast<int64_t>(p.page_ids[pg]) * p.page_stride_bytes +
                         p.segment_offset_bytes;
  uint16_t* dst = p.out_bf16 + pg * 8 * p.heads * d;
  // Work item e: row j, head h, chunk c of one head row (8 bf16 per uint4 chunk).
  const int chunk = kVec ? 8 : 1;
  const int per_head = d / chunk;
  const int items = 8 * p.heads * per_head;
  for (int e = threadIdx.x; e < items; e += blockDim.x) {
    const int c = e % per_head;
    const int jh = e / per_head;
    const int h = jh % p.heads, j = jh / p.heads;
    const uint8_t* src = unit0 + h * p.head_stride_bytes + static_cast<int64_t>(j) * d * 2;
    uint16_t* o = dst + (static_cast<int64_t>(j) * p.heads + h) * d;
    if constexpr (kVec) {
      reinterpret_cast<uint4*>(o)[c] = reinterpret_cast<const uint4*>(src)[c];
    } else {
      o[c] = reinterpret_cast<const uint16_t*>(src)[c];
    }
  }
}

int GridStrideBlocks(int64_t work, int threads) {
  const int64_t b = (work + threads - 1) / threads;
  return static_cast<int>(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

}  // namespace

cudaError_t EmbedRowsCuda(const uint16_t* table_bf16, const int32_t* tokens, int64_t rows,
                          int d_model, float* x, cudaStream_t stream) {
  if (rows < 0 || rows > INT_MAX || d_model <= 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (table_bf16 == nullptr || tokens == nullptr || x == nullptr) return cudaErrorInvalidValue;
  const bool vec = d_model % 8 == 0 && Aligned16(table_bf16) && Aligned16(x);
  return cuda::LaunchOverlappingPrior(vec ? EmbedRowsKernel<true> : EmbedRowsKernel<false>,
                                      dim3(static_cast<unsigned>(rows)), dim3(128), 0, stream,
                                      table_bf16, tokens, d_model, x);
}

cudaError_t RmsNormToBf16Cuda(const float* x, const float* weight, int64_t rows, int n, float eps,
                              uint16_t* out_bf16, cudaStream_t stream) {
  if (rows < 0 || rows > INT_MAX || n <= 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (x == nullptr || weight == nullptr || out_bf16 == nullptr) return cudaErrorInvalidValue;
  const bool vec = n % 4 == 0 && Aligned16(x) && Aligned16(weight) &&
                   (reinterpret_cast<uintptr_t>(out_bf16) & 7u) == 0;
  return cuda::LaunchOverlappingPrior(vec ? RmsNormToBf16Kernel<true> : RmsNormToBf16Kernel<false>,
                                      dim3(static_cast<unsigned>(rows)), dim3(kRowThreads), 0,
                                      stream, x, weight, n, eps, out_bf16);
}

cudaError_t QkvPostCuda(const QkvPostParams& params, const QkvPageWrite& pages,
                        cudaStream_t stream) {
  const QkvPostParams& p = params;
  if (!ValidQkvPost(p) || !ValidPageWrite(pages)) return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  const int nwarps = kRowThreads / 32;
  const size_t smem = (static_cast<size_t>(nwarps) * p.head_dim + p.rope_dim) * sizeof(float);
  return cuda::LaunchOverlappingPrior(QkvPostKernel, dim3(static_cast<unsigned>(p.rows)),
                                      dim3(kRowThreads), smem, stream, p, pages);
}

cudaError_t QkvPostCuda(const QkvPostParams& params, cudaStream_t stream) {
  return QkvPostCuda(params, QkvPageWrite{}, stream);
}

cudaError_t QkvPostCuda(const QkvPostParams& params, const QkvRotatedOut& rotated,
                        cudaStream_t stream) {
  const QkvPostParams& p = params;
  if (!ValidQkvPost(p)) return cudaErrorInvalidValue;
  const bool qk = rotated.q != nullptr || rotated.k != nullptr;
  if ((qk && (rotated.qk_rotation == nullptr || !Aligned16(rotated.qk_rotation))) ||
      (rotated.v != nullptr && (rotated.v_rotation == nullptr || !Aligned16(rotated.v_rotation)))) {
    return cudaErrorInvalidValue;
  }
  if (!ValidPageWrite(rotated.pages) ||
      (rotated.pages.pool != nullptr && (rotated.k == nullptr || rotated.v == nullptr))) {
    return cudaErrorInvalidValue;
  }
  if (!qk && rotated.v == nullptr) return QkvPostCuda(p, stream);
  if (p.head_dim != 64 && p.head_dim != 128) return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  return p.head_dim == 128 ? LaunchQkvPostRotate<128>(p, rotated, stream)
                           : LaunchQkvPostRotate<64>(p, rotated, stream);
}

cudaError_t SiluMulToBf16Cuda(const float* gate_up, int64_t rows, int d_ff, uint16_t* out_bf16,
                              cudaStream_t stream) {
  if (rows < 0 || d_ff <= 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (gate_up == nullptr || out_bf16 == nullptr) return cudaErrorInvalidValue;
  const bool vec = d_ff % 4 == 0 && Aligned16(gate_up) &&
                   (reinterpret_cast<uintptr_t>(out_bf16) & 7u) == 0;
  const int threads = 256;
  return cuda::LaunchOverlappingPrior(
      vec ? SiluMulToBf16Kernel<true> : SiluMulToBf16Kernel<false>,
      dim3(GridStrideBlocks(vec ? rows * (d_ff / 4) : rows * d_ff, threads)), dim3(threads), 0,
      stream, gate_up, rows, d_ff, out_bf16);
}

cudaError_t F32ToBf16Cuda(const float* in, int64_t n, uint16_t* out_bf16, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (in == nullptr || out_bf16 == nullptr) return cudaErrorInvalidValue;
  const bool vec = Aligned16(in) && (reinterpret_cast<uintptr_t>(out_bf16) & 7u) == 0;
  const int threads = 256;
  return cuda::LaunchOverlappingPrior(F32ToBf16Kernel,
                                      dim3(GridStrideBlocks(vec ? n / 4 + 1 : n, threads)),
                                      dim3(threads), 0, stream, in, n, out_bf16, vec);
}

cudaError_t ArgmaxRowsCuda(const float* logits, int rows, int vocab, int32_t* out,
                           cudaStream_t stream) {
  if (rows < 0 || vocab <= 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (logits == nullptr || out == nullptr) return cudaErrorInvalidValue;
  const bool vec = vocab % 4 == 0 && Aligned16(logits);
  return cuda::LaunchOverlappingPrior(vec ? ArgmaxRowsKernel<true> : ArgmaxRowsKernel<false>,
                                      dim3(static_cast<unsigned>(rows)), dim3(kRowThreads), 0,
                                      stream, logits, vocab, out);
}

cudaError_t WriteBf16PageRowsCuda(const PageRowsParams* params, int num_jobs,
                                  cudaStream_t stream) {
  if (params == nullptr || num_jobs < 1 || num_jobs > kMaxPageRowsJobs) {
    return cudaErrorInvalidValue;
  }
  PageRowsJobs jobs{};
  int count = 0;
  int64_t max_tokens = 0;
  bool vec = true;
  for (int i = 0; i < num_jobs; ++i) {
    const PageRowsParams& p = params[i];
    if (p.tokens < 0 || p.tokens > INT_MAX) return cudaErrorInvalidValue;
    if (p.tokens == 0) continue;  // nothing to write: left out of the launch
    if (p.rows == nullptr || p.page_ids == nullptr || p.rows_in_page == nullptr ||
        p.pool == nullptr || p.heads <= 0 || p.head_dim <= 0 || p.page_stride_bytes % 2 != 0 ||
        p.head_stride_bytes % 2 != 0 || p.segment_offset_bytes % 2 != 0) {
      return cudaErrorInvalidValue;
    }
    vec = vec && p.head_dim % 4 == 0 && p.row_stride % 4 == 0 && Aligned16(p.rows) &&
          (reinterpret_cast<uintptr_t>(p.pool) & 7u) == 0 && p.page_stride_bytes % 8 == 0 &&
          p.head_stride_bytes % 8 == 0 && p.segment_offset_bytes % 8 == 0;
    jobs.job[count++] = p;
    max_tokens = std::max(max_tokens, p.tokens);
  }
  if (count == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(max_tokens), static_cast<unsigned>(count));
  return cuda::LaunchOverlappingPrior(
      vec ? WriteBf16PageRowsKernel<true> : WriteBf16PageRowsKernel<false>, grid, dim3(128), 0,
      stream, jobs);
}

cudaError_t WriteBf16PageRowsCuda(const PageRowsParams& params, cudaStream_t stream) {
  return WriteBf16PageRowsCuda(&params, 1, stream);
}

cudaError_t GatherBf16PageRowsCuda(const PageGatherParams& params, cudaStream_t stream) {
  const PageGatherParams& p = params;
  if (p.num_pages < 0 || p.num_pages > INT_MAX) return cudaErrorInvalidValue;
  if (p.num_pages == 0) return cudaSuccess;
  if (p.pool == nullptr || p.page_ids == nullptr || p.out_bf16 == nullptr || p.heads <= 0 ||
      p.head_dim <= 0 || p.page_stride_bytes % 2 != 0 || p.head_stride_bytes % 2 != 0 ||
      p.segment_offset_bytes % 2 != 0) {
    return cudaErrorInvalidValue;
  }
  const bool vec = p.head_dim % 8 == 0 && Aligned16(p.pool) && Aligned16(p.out_bf16) &&
                   p.page_stride_bytes % 16 == 0 && p.head_stride_bytes % 16 == 0 &&
                   p.segment_offset_bytes % 16 == 0;
  return cuda::LaunchOverlappingPrior(
      vec ? GatherBf16PageRowsKernel<true> : GatherBf16PageRowsKernel<false>,
      dim3(static_cast<unsigned>(p.num_pages)), dim3(128), 0, stream, p);
}

}  // namespace oscarkv::kernels

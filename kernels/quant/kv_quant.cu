// Fused rotate -> clip -> INT2 -> pack on the GPU; see kv_quant_cuda.h.
//
// Per-token rows (kInt2PerToken, into linear segments or INT2 pages) run in KvInt2RowsKernel. A
// warp takes one unit = 8 tokens x one head, which is one page segment (8 code rows then 8
// params, contiguous); each row is held by G = D/16 lanes with 16 consecutive channels each (two
// 16-byte loads of bf16), so the warp holds 32/G rows at once: 2 passes per unit at D = 128, one
// at D = 64. The next unit's loads are issued before the current one is processed. The row
// pipeline (int2_row_group.cuh) is exact by construction, so the output is KvQuantRef's, bit for
// bit. With a rotation, R sits in shared memory as double and every lane accumulates its 16
// output channels of all its rows of the unit in double, in the reference's order (fma of exact
// products), each R load serving all of them: that path is bound by FP64 throughput.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/quant/int2_row_group.cuh"
#include "kernels/quant/kv_quant_cuda.h"
#include "kernels/quant/kv_quant_grouped.h"
#include "kernels/quant/kv_quant_ref.h"
#include "lib/kvformat/int2_block.h"

namespace oscarkv::kernels {
namespace {

namespace rows = int2_rows;

constexpr int kUnitTokens = 8;  // tokens of a unit: one INT2 page
constexpr int kWarps = 8;       // warps per block

// Input rows [tokens][heads][D], bf16 or f32.
struct RowsSource {
  const uint16_t* bf16;  // exactly one of bf16 / f32 is non-null
  const float* f32;
  int64_t token_stride;  // elements between tokens
  int tokens;
  int heads;
  bool vector_loads;  // every row 16-byte aligned
};

// Where row r of unit (token group g, head h) goes: code row at seg + row * D/4, params at
// seg + segment_tokens * D/4 + 4 * row, with seg and row below.
//   paged:  seg = base + page_ids[g] * page_stride + h * head_stride + segment_offset, row = r
//   linear: seg = base + h * head_stride, row = 8 g + r
struct RowsTarget {
  uint8_t* base;
  const int32_t* page_ids;  // paged when non-null
  int64_t page_stride;
  int64_t head_stride;
  int64_t segment_offset;
  int segment_tokens;  // 8 when paged, tokens when linear
  bool vector_stores;  // code rows 16-byte and params 4-byte aligned (else 2-byte)
};

struct RowsClip {
  bool on;           // clip_ratio < 1
  int k;             // tau = the k-th largest |y| of the row, k = D - ClipIndex(ratio, D)
  bool sorted_only;  // k too large for the top-4 lists (ClipThreshold)
};

// One lane's raw input of a unit: its 16 channels of its row in each pass.
template <int D, bool kBf16>
struct UnitRaw {
  static constexpr int kPasses = kUnitTokens / rows::RowGroup<D>::kRowsPerWarp;
  static constexpr int kWords = kBf16 ? 2 : 4;  // 16-byte words per lane and row
  uint4 w[kPasses][kWords];
};

__device__ __forceinline__ void SetWord(uint4& q, int i, uint32_t v) {
  if (i == 0) q.x = v;
  if (i == 1) q.y = v;
  if (i == 2) q.z = v;
  if (i == 3) q.w = v;
}
__device__ __forceinline__ uint32_t GetWord(const uint4& q, int i) {
  return i == 0 ? q.x : i == 1 ? q.y : i == 2 ? q.z : q.w;
}

template <int D, bool kBf16>
__device__ __forceinline__ void LoadUnit(const RowsSource& src, int group, int h,
                                         const rows::RowGroup<D>& rg, UnitRaw<D, kBf16>& raw) {
  using Raw = UnitRaw<D, kBf16>;
#pragma unroll
  for (int p = 0; p < Raw::kPasses; ++p) {
    const int t = group * kUnitTokens + p * rows::RowGroup<D>::kRowsPerWarp + rg.slot;
    if (t >= src.tokens) {
#pragma unroll
      for (int i = 0; i < Raw::kWords; ++i) raw.w[p][i] = make_uint4(0, 0, 0, 0);
      continue;
    }
    const int64_t at = t * src.token_stride + static_cast<int64_t>(h) * D +
                       rg.gl * rows::kLaneChannels;
    if constexpr (kBf16) {
      const uint16_t* row = src.bf16 + at;
      if (src.vector_loads) {
#pragma unroll
        for (int i = 0; i < Raw::kWords; ++i) {
          raw.w[p][i] = cuda::LoadStream(reinterpret_cast<const uint4*>(row) + i);
        }
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          SetWord(raw.w[p][i / 4], i % 4, row[2 * i] | static_cast<uint32_t>(row[2 * i + 1]) << 16);
        }
      }
    } else {
      const float* row = src.f32 + at;
      if (src.vector_loads) {
#pragma unroll
        for (int i = 0; i < Raw::kWords; ++i) {
          raw.w[p][i] = cuda::LoadStream(reinterpret_cast<const uint4*>(row) + i);
        }
      } else {
#pragma unroll
        for (int i = 0; i < 16; ++i) SetWord(raw.w[p][i / 4], i % 4, __float_as_uint(row[i]));
      }
    }
  }
}

// A lane's values of one pass from its raw words: bf16 stays packed, f32 as is, and bf16 becomes
// float where it is rotated first.
__device__ __forceinline__ void ToLane(const uint4 (&w)[2], rows::Bf16Lane& x) {
#pragma unroll
  for (int i = 0; i < 8; ++i) x.w[i] = GetWord(w[i / 4], i % 4);
}
__device__ __forceinline__ void ToLane(const uint4 (&w)[2], rows::FloatLane& x) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t word = GetWord(w[i / 4], i % 4);
    x.v[2 * i] = __uint_as_float(word << 16);
    x.v[2 * i + 1] = __uint_as_float(word & 0xffff0000u);
  }
}
__device__ __forceinline__ void ToLane(const uint4 (&w)[4], rows::FloatLane& x) {
#pragma unroll
  for (int i = 0; i < 16; ++i) x.v[i] = __uint_as_float(GetWord(w[i / 4], i % 4));
}

// ---- Rotation (FP64, reference order) ----

template <int D>
struct RotationSmem {
  static constexpr int kLanes = D / rows::kLaneChannels;
  // A staged row is padded by 16 bytes so that the rows of a warp start 4 banks apart.
  static constexpr int kRowDoubles = D + 2;
  static constexpr size_t kRotationBytes = sizeof(double) * D * D;
  static constexpr size_t kStageBytes = sizeof(double) * kUnitTokens * kRowDoubles;  // per warp
  static constexpr size_t kBytes = kRotationBytes + kWarps * kStageBytes;
};

// R (row-major f32) into shared memory as double pairs: pair (i, k, gl) = R[i][16 gl + 2k .. +1]
// at index (i * 8 + k) * G + gl, so a warp's load of (i, k) reads G consecutive 16-byte pairs
// (no bank conflict) and the other rows' groups read the same ones (broadcast).
template <int D>
__device__ __forceinline__ void StageRotation(const float* __restrict__ rot, double2* r_s) {
  constexpr int G = RotationSmem<D>::kLanes;
  for (int e = threadIdx.x; e < D * D / 2; e += blockDim.x) {
    const int i = e / (8 * G), k = e / G % 8, gl = e % G;
    const float* r = rot + i * D + rows::kLaneChannels * gl + 2 * k;
    r_s[e] = make_double2(r[0], r[1]);
  }
}

// v[p] <- v[p] * R for the lane's row of every pass: y_c = sum_i x_i R[i][c], accumulated in
// double in increasing i and rounded to float once, as KvQuantRef does (x_i R[i][c] is exact in
// double, so fma equals its multiply-then-add).
template <int D, int kPasses>
__device__ __forceinline__ void RotateRows(rows::FloatLane (&v)[kPasses], double* stage,
                                           const double2* r_s, const rows::RowGroup<D>& rg) {
  constexpr int G = RotationSmem<D>::kLanes;
  constexpr int kRowDoubles = RotationSmem<D>::kRowDoubles;
  constexpr int kRowsPerWarp = rows::RowGroup<D>::kRowsPerWarp;
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    double* x = stage + (p * kRowsPerWarp + rg.slot) * kRowDoubles + rows::kLaneChannels * rg.gl;
#pragma unroll
    for (int i = 0; i < rows::kLaneChannels; ++i) x[i] = static_cast<double>(v[p].v[i]);
  }
  __syncwarp();
  double acc[kPasses][rows::kLaneChannels];
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
#pragma unroll
    for (int c = 0; c < rows::kLaneChannels; ++c) acc[p][c] = 0.0;
  }
#pragma unroll 2
  for (int i = 0; i < D; i += 2) {
    double2 x[kPasses];
#pragma unroll
    for (int p = 0; p < kPasses; ++p) {
      x[p] = *reinterpret_cast<const double2*>(stage + (p * kRowsPerWarp + rg.slot) * kRowDoubles +
                                               i);
    }
#pragma unroll
    for (int ii = 0; ii < 2; ++ii) {
      const double2* r = r_s + (i + ii) * 8 * G + rg.gl;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const double2 rk = r[k * G];
#pragma unroll
        for (int p = 0; p < kPasses; ++p) {
          const double xi = ii == 0 ? x[p].x : x[p].y;
          acc[p][2 * k] = __fma_rn(xi, rk.x, acc[p][2 * k]);
          acc[p][2 * k + 1] = __fma_rn(xi, rk.y, acc[p][2 * k + 1]);
        }
      }
    }
  }
  __syncwarp();  // the next unit rewrites the stage
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
#pragma unroll
    for (int c = 0; c < rows::kLaneChannels; ++c) v[p].v[c] = __double2float_rn(acc[p][c]);
  }
}

// ---- Output ----

__device__ __forceinline__ uint8_t* SegmentOf(const RowsTarget& tgt, int group, int h,
                                              int* first_row) {
  if (tgt.page_ids != nullptr) {
    *first_row = 0;
    return tgt.base + static_cast<int64_t>(tgt.page_ids[group]) * tgt.page_stride +
           h * tgt.head_stride + tgt.segment_offset;
  }
  *first_row = group * kUnitTokens;
  return tgt.base + h * tgt.head_stride;
}

template <int D>
__device__ __forceinline__ void StoreRow(const RowsTarget& tgt, uint8_t* seg, int row,
                                         const uint32_t (&w)[4],
                                         const quant_device::GroupParams& gp,
                                         const rows::RowGroup<D>& rg) {
  constexpr int kM = D / 4;
  if (rg.gl < rows::RowGroup<D>::kStoreLanes) {
    uint8_t* codes = seg + static_cast<int64_t>(row) * kM + 16 * rg.gl;
    if (tgt.vector_stores) {
      *reinterpret_cast<uint4*>(codes) = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
#pragma unroll
      for (int b = 0; b < 16; ++b) codes[b] = static_cast<uint8_t>(w[b / 4] >> (8 * (b % 4)));
    }
  }
  if (rg.gl == 0) {
    // Scale then min, little-endian; whole 16-bit words (see quant_device::StoreParamsDev).
    uint8_t* prm = seg + static_cast<int64_t>(tgt.segment_tokens) * kM + 4 * row;
    const uint32_t s = __half_as_ushort(gp.s16);
    const uint32_t m = __half_as_ushort(gp.m16);
    if (tgt.vector_stores) {
      *reinterpret_cast<uint32_t*>(prm) = s | m << 16;
    } else {
      reinterpret_cast<uint16_t*>(prm)[0] = static_cast<uint16_t>(s);
      reinterpret_cast<uint16_t*>(prm)[1] = static_cast<uint16_t>(m);
    }
  }
}

// ---- Kernel ----

template <int D, bool kBf16, bool kRotate>
__global__ void __launch_bounds__(kWarps * 32)
    KvInt2RowsKernel(const RowsSource src, const RowsTarget tgt, const RowsClip clip,
                     const float* __restrict__ rotation) {
  using RowGroup = rows::RowGroup<D>;
  using Raw = UnitRaw<D, kBf16>;
  constexpr int kPasses = Raw::kPasses;
  // Unrotated bf16 rows stay packed bf16; rotated rows and f32 input are floats.
  using Lane = std::conditional_t<kBf16 && !kRotate, rows::Bf16Lane, rows::FloatLane>;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const RowGroup rg(lane);

  extern __shared__ __align__(16) unsigned char smem[];
  const double2* r_s = nullptr;
  double* stage = nullptr;
  if constexpr (kRotate) {
    double2* r_w = reinterpret_cast<double2*>(smem);
    StageRotation<D>(rotation, r_w);
    r_s = r_w;
    stage = reinterpret_cast<double*>(smem + RotationSmem<D>::kRotationBytes) +
            warp * (RotationSmem<D>::kStageBytes / sizeof(double));
    __syncthreads();
  }

  const int groups = (src.tokens + kUnitTokens - 1) / kUnitTokens;
  const int64_t units = static_cast<int64_t>(groups) * src.heads;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kWarps;
  int64_t u = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  Raw raw;
  if (u < units) {
    LoadUnit<D, kBf16>(src, static_cast<int>(u / src.heads), static_cast<int>(u % src.heads), rg,
                       raw);
  }
  for (; u < units; u += step) {
    const int group = static_cast<int>(u / src.heads), h = static_cast<int>(u % src.heads);
    // The next unit's loads stay in flight while this one is processed.
    Raw next;
    const int64_t n = u + step;
    if (n < units) {
      LoadUnit<D, kBf16>(src, static_cast<int>(n / src.heads), static_cast<int>(n % src.heads), rg,
                         next);
    }
    int first_row;
    uint8_t* seg = SegmentOf(tgt, group, h, &first_row);
    Lane x[kPasses];
#pragma unroll
    for (int p = 0; p < kPasses; ++p) ToLane(raw.w[p], x[p]);
    if constexpr (kRotate) RotateRows<D, kPasses>(x, stage, r_s, rg);
    rows::RowStats st[kPasses];
#pragma unroll
    for (int p = 0; p < kPasses; ++p) {
      st[p] = rows::RowStatsOf<D>(x[p], clip.on, clip.k, clip.sorted_only, rg);
    }
    float bounds[kPasses][3];
    rows::UnitCodeBounds<D>(st, clip.on, lane, rg, bounds);
#pragma unroll
    for (int p = 0; p < kPasses; ++p) {
      uint32_t w[4];
      rows::PackRowCodes<D>(x[p], bounds[p], rg, w);
      const int r = p * RowGroup::kRowsPerWarp + rg.slot;
      if (group * kUnitTokens + r < src.tokens) StoreRow<D>(tgt, seg, first_row + r, w, st[p].gp, rg);
    }
    raw = next;
  }
}

template <int D, bool kBf16, bool kRotate>
cudaError_t LaunchRows(const RowsSource& src, const RowsTarget& tgt, const RowsClip& clip,
                       const float* rotation, cudaStream_t stream) {
  const auto kernel = KvInt2RowsKernel<D, kBf16, kRotate>;
  const size_t smem = kRotate ? RotationSmem<D>::kBytes : 0;
  if (kRotate) {
    OSCARKV_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  int device = 0, sms = 0, per_sm = 0;
  OSCARKV_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  OSCARKV_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  OSCARKV_CUDA_RETURN_IF_ERROR(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarps * 32, smem));
  if (per_sm < 1) return cudaErrorInvalidConfiguration;
  const int64_t units =
      static_cast<int64_t>((src.tokens + kUnitTokens - 1) / kUnitTokens) * src.heads;
  const int64_t needed = (units + kWarps - 1) / kWarps;
  const int64_t resident = static_cast<int64_t>(per_sm) * sms;
  const int blocks = static_cast<int>(needed < resident ? needed : resident);
  kernel<<<blocks, kWarps * 32, smem, stream>>>(src, tgt, clip, rotation);
  return cudaGetLastError();
}

template <int D>
cudaError_t DispatchRows(const RowsSource& src, const RowsTarget& tgt, const RowsClip& clip,
                         const float* rotation, cudaStream_t stream) {
  const bool bf16 = src.bf16 != nullptr;
  if (rotation != nullptr) {
    return bf16 ? LaunchRows<D, true, true>(src, tgt, clip, rotation, stream)
                : LaunchRows<D, false, true>(src, tgt, clip, rotation, stream);
  }
  return bf16 ? LaunchRows<D, true, false>(src, tgt, clip, rotation, stream)
              : LaunchRows<D, false, false>(src, tgt, clip, rotation, stream);
}

bool Aligned(uintptr_t bits, uintptr_t to) { return bits % to == 0; }

cudaError_t Launch(const KvQuantParams& p, RowsTarget tgt, cudaStream_t stream) {
  if ((p.input_bf16 == nullptr) == (p.input_f32 == nullptr)) return cudaErrorInvalidValue;
  if (p.tokens <= 0 || p.heads <= 0 || !(p.clip_ratio > 0.0f)) return cudaErrorInvalidValue;
  if (p.head_dim != 64 && p.head_dim != 128) return cudaErrorNotSupported;
  const int64_t in_stride = p.input_token_stride == 0
                                ? static_cast<int64_t>(p.heads) * p.head_dim
                                : p.input_token_stride;
  if (in_stride < static_cast<int64_t>(p.heads) * p.head_dim) return cudaErrorInvalidValue;
  const bool clip = p.clip_ratio < 1.0f;
  const int clip_idx = ClipIndex(p.clip_ratio, p.head_dim);
  if (p.kind != kvformat::SegmentKind::kInt2PerToken || p.token_norms_out != nullptr) {
    // KIVI-2 / OScaR groups and token norms: linear segments only (no paged grouped layout).
    if (tgt.page_ids != nullptr) return cudaErrorNotSupported;
    return LaunchGroupedKvQuant(p, in_stride, clip_idx, clip, tgt.head_stride, stream);
  }
  // Params are stored as 16-bit words: every segment must start on an even address.
  const uintptr_t out_bits = reinterpret_cast<uintptr_t>(tgt.base) |
                             static_cast<uintptr_t>(tgt.page_stride) |
                             static_cast<uintptr_t>(tgt.head_stride) |
                             static_cast<uintptr_t>(tgt.segment_offset);
  if (!Aligned(out_bits, 2)) return cudaErrorInvalidValue;
  tgt.vector_stores = Aligned(out_bits, 16);
  RowsSource src{p.input_bf16, p.input_f32, in_stride, p.tokens, p.heads, false};
  const uintptr_t in_ptr = p.input_bf16 != nullptr ? reinterpret_cast<uintptr_t>(p.input_bf16)
                                                   : reinterpret_cast<uintptr_t>(p.input_f32);
  const int elem_bytes = p.input_bf16 != nullptr ? 2 : 4;
  src.vector_loads = Aligned(in_ptr, 16) && Aligned(static_cast<uintptr_t>(in_stride) * elem_bytes, 16);
  RowsClip rc{clip, p.head_dim - clip_idx, false};
  // Top-4 lists hold 8 G keys per row; past 2 G (one key per list on average) they would run dry
  // on most rows, so large k goes straight to sorted lists.
  rc.sorted_only = rc.k > 2 * (p.head_dim / rows::kLaneChannels);
  return p.head_dim == 128 ? DispatchRows<128>(src, tgt, rc, p.rotation, stream)
                           : DispatchRows<64>(src, tgt, rc, p.rotation, stream);
}

}  // namespace

cudaError_t KvQuantCuda(const KvQuantParams& params, cudaStream_t stream) {
  if (params.output == nullptr) return cudaErrorInvalidValue;
  const int64_t seg = static_cast<int64_t>(
      kvformat::SegmentBytes(params.kind, params.tokens, params.head_dim));
  RowsTarget tgt{params.output, nullptr, 0,
                 params.output_head_stride == 0 ? seg : params.output_head_stride, 0,
                 params.tokens, false};
  if (tgt.head_stride < seg) return cudaErrorInvalidValue;
  return Launch(params, tgt, stream);
}

cudaError_t DemoteToPagesCuda(const KvQuantParams& params, const DemotePagesTarget& target,
                              cudaStream_t stream) {
  if (target.pool == nullptr || target.page_ids == nullptr) return cudaErrorInvalidValue;
  RowsTarget tgt{target.pool, target.page_ids, target.page_stride_bytes,
                 target.head_stride_bytes, target.segment_offset_bytes, kUnitTokens, false};
  return Launch(params, tgt, stream);
}

}  // namespace oscarkv::kernels

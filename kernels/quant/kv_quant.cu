// Fused rotate -> clip -> INT2 -> pack on the GPU; see kv_quant_cuda.h.
//
// Per-token rows (kInt2PerToken, into linear segments or INT2 pages) run in KvInt2RowsKernel. The
// work unit is 8 tokens x one head, which is one page segment (8 code rows then 8 params,
// contiguous); a row is held by D/32 lanes with 32 channels each (8 in each quarter of the row,
// one 16-byte load of bf16 per quarter), so a warp takes one unit at D = 128 and two at D = 64.
// The next units' loads are issued before the current ones are processed. The row pipeline
// (int2_row_group.cuh) is exact by construction, so the output is KvQuantRef's, bit for bit.
// With a rotation (KvInt2RotatedRowsKernel), R sits in shared memory as double and the rows are
// rotated as a register-tiled product in double, in the reference's order (fma of exact
// products): that path is bound by FP64 throughput.
#include <cuda_runtime.h>

#include <cstdint>
#include <numeric>
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

constexpr int kUnitTokens = rows::kUnitRows;  // tokens of a unit: one INT2 page
constexpr int kWarps = 8;                     // warps per block

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
  bool vector_stores;  // segments 16-byte aligned (else only 2-byte)
  // The held builds' store: a unit's codes / params are these many bytes further per unit index
  // (UnitIndexOf: the page id when paged, the token group when linear). Set by Launch; held builds
  // run only while both fit (LaunchRows).
  uint32_t unit_codes;
  uint32_t unit_params;
  int linear_group_mask;  // ~0 when linear, 0 when paged (UnitIndexOf)
};

struct RowsClip {
  bool on;  // clip_ratio < 1
  int k;    // tau = the k-th largest |y| of the row, k = D - ClipIndex(ratio, D)
};

// A unit: its token group and head. Units are visited in steps of the units the grid holds; the
// next one is worked out by additions (a division per unit would cost as much as a code row).
struct Unit {
  int group;
  int h;
};
struct UnitWalk {
  int step_groups;  // step / heads
  int step_heads;   // step % heads
  int heads;
  __device__ Unit Next(Unit u) const {
    u.group += step_groups;
    u.h += step_heads;
    if (u.h >= heads) {
      u.h -= heads;
      ++u.group;
    }
    return u;
  }
};

// Held addressing. The builds with registers to spare (kHeldBuild: bf16 rows, vector loads and
// the served ratios' k) hold what a lane adds to every unit (LaneRows) and walk a pointer to its
// row (InputWalk): ~20 instructions a unit less, K -0.8%, V -1.5%. The other builds recompute both
// per unit from (group, head): holding them made those spill or re-read their thread index in the
// loop, which cost more than it saved (D = 64: +4...10%; bench/NOTES.md "Demotion v7").
template <bool kBf16, int kVector, int kClipK>
inline constexpr bool kHeldBuild = (kClipK != 0) && (kVector == 1) && kBf16;

// The input pointer's changes along the walk (host-built: kernel parameters, not registers). The
// unrotated kernel's step is a multiple of the heads (LaunchRows), so a lane keeps its head.
struct InputWalk {
  int64_t group_bytes;  // between token groups (8 tokens)
  int64_t head_bytes;   // between heads (D channels)
  int64_t step_bytes;   // a step of the walk: step / heads token groups
};
InputWalk InputWalkFor(const RowsSource& src, int d, int step) {
  const int64_t elem = src.bf16 != nullptr ? 2 : 4;
  InputWalk w;
  w.group_bytes = kUnitTokens * src.token_stride * elem;
  w.head_bytes = d * elem;
  w.step_bytes = step / src.heads * w.group_bytes;
  return w;
}
// A lane's row r = slot % 8 in every unit of its head h.
template <int D>
struct LaneRows {
  int valid_groups;  // row r of unit (g, h) is a token (8 g + r < tokens) iff g < this
  uint8_t* codes;    // the lane's code bytes at unit index 0 (UnitIndexOf) of head h
  uint8_t* params;   // its row's params there (stored by lane gl = 0)

  __device__ LaneRows(const RowsSource& src, const RowsTarget& tgt, int h,
                      const rows::RowGroup<D>& rg) {
    using L = rows::RowLayout<D>;
    const int r = rg.slot % kUnitTokens;
    valid_groups = (src.tokens - r + kUnitTokens - 1) / kUnitTokens;  // tokens - r > -8
    uint8_t* seg = tgt.base + (h * tgt.head_stride + tgt.segment_offset);
    codes = seg + (r * L::kCodeBytes + L::kChunk * rg.gl);
    params = seg + (int64_t{tgt.segment_tokens} * L::kCodeBytes + 4 * r);
  }
  // The input at row r and the lane's first channel of unit u.
  __device__ static const unsigned char* Input(const RowsSource& src, const InputWalk& walk,
                                               Unit u, const rows::RowGroup<D>& rg) {
    const int64_t elem = src.bf16 != nullptr ? 2 : 4;
    const unsigned char* base = src.bf16 != nullptr
                                    ? reinterpret_cast<const unsigned char*>(src.bf16)
                                    : reinterpret_cast<const unsigned char*>(src.f32);
    return base + (u.group * walk.group_bytes + u.h * walk.head_bytes +
                   (rg.slot % kUnitTokens * src.token_stride +
                    rows::RowLayout<D>::Channel(rg.gl, 0, 0)) * elem);
  }
};

// One lane's raw input of its row: 4 chunks of 8 values, bf16 pairs or f32 bits.
template <int D, bool kBf16>
struct LaneRaw {
  static constexpr int kChunkWords =
      kBf16 ? rows::RowLayout<D>::kChunk / 2 : rows::RowLayout<D>::kChunk;
  uint32_t w[4 * kChunkWords];
};

template <int kWords>
__device__ __forceinline__ void LoadWords(const void* p, uint32_t* dst) {
  static_assert(kWords % 4 == 0);
#pragma unroll
  for (int i = 0; i < kWords / 4; ++i) {
    const uint4 v = cuda::LoadStreamBlock(static_cast<const uint4*>(p) + i);
    dst[4 * i] = v.x;
    dst[4 * i + 1] = v.y;
    dst[4 * i + 2] = v.z;
    dst[4 * i + 3] = v.w;
  }
}

// kVector: 1 = 16-byte loads, -1 = as src.vector_loads says (a runtime choice costs the issue
// slots of both paths: the compiler predicates the scalar loads). Same for the stores below.
// The lane's words of the row whose first channel (of the lane) is at `row`.
template <int D, bool kBf16, int kVector, class T>
__device__ __forceinline__ void LoadRowAt(const RowsSource& src, const T* row,
                                          LaneRaw<D, kBf16>& raw) {
  using L = rows::RowLayout<D>;
  constexpr int kCw = LaneRaw<D, kBf16>::kChunkWords;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const T* at = row + q * L::kCodeBytes;  // chunk q: channels q D/4 + 8 gl ..
    uint32_t* dst = raw.w + q * kCw;
    if (kVector < 0 ? src.vector_loads : kVector == 1) {
      LoadWords<kCw>(at, dst);
    } else if constexpr (kBf16) {
#pragma unroll
      for (int i = 0; i < kCw; ++i) dst[i] = at[2 * i] | static_cast<uint32_t>(at[2 * i + 1]) << 16;
    } else {
#pragma unroll
      for (int i = 0; i < kCw; ++i) dst[i] = __float_as_uint(at[i]);
    }
  }
}
// The token of the lane's row of unit u, and that row's first channel of the lane.
template <int D>
__device__ __forceinline__ int LaneToken(Unit u, const rows::RowGroup<D>& rg) {
  return u.group * kUnitTokens + rg.slot % kUnitTokens;
}
template <int D, bool kBf16>
__device__ __forceinline__ const std::conditional_t<kBf16, uint16_t, float>* LaneRowStart(
    const RowsSource& src, int t, Unit u, const rows::RowGroup<D>& rg) {
  using T = std::conditional_t<kBf16, uint16_t, float>;
  const T* base =
      kBf16 ? reinterpret_cast<const T*>(src.bf16) : reinterpret_cast<const T*>(src.f32);
  return base + t * src.token_stride + u.h * D + rows::RowLayout<D>::Channel(rg.gl, 0, 0);
}
template <int D, bool kBf16, int kVector = -1>
__device__ __forceinline__ void LoadRow(const RowsSource& src, Unit u, const rows::RowGroup<D>& rg,
                                        LaneRaw<D, kBf16>& raw) {
  const int t = LaneToken(u, rg);
  // Past the last token the words stay as they were: such rows are never stored, and rows are
  // quantized independently (zeroing them cost 8 instructions per unit in the hot loop).
  if (t >= src.tokens) return;
  LoadRowAt<D, kBf16, kVector>(src, LaneRowStart<D, kBf16>(src, t, u, rg), raw);
}

// The lane's values from its raw words: bf16 stays packed unless it is rotated, f32 as is.
template <int D>
__device__ __forceinline__ void ToLane(const LaneRaw<D, true>& raw, rows::Bf16Lane<D>& x) {
#pragma unroll
  for (int i = 0; i < rows::RowLayout<D>::kWords; ++i) x.w[i] = raw.w[i];
}
template <int D>
__device__ __forceinline__ void ToLane(const LaneRaw<D, true>& raw, rows::FloatLane<D>& x) {
#pragma unroll
  for (int i = 0; i < rows::RowLayout<D>::kWords; ++i) {
    x.v[2 * i] = __uint_as_float(raw.w[i] << 16);
    x.v[2 * i + 1] = __uint_as_float(raw.w[i] & 0xffff0000u);
  }
}
template <int D>
__device__ __forceinline__ void ToLane(const LaneRaw<D, false>& raw, rows::FloatLane<D>& x) {
#pragma unroll
  for (int i = 0; i < rows::RowLayout<D>::kChannels; ++i) x.v[i] = __uint_as_float(raw.w[i]);
}

// LoadRow for the held builds (vector loads): the row at `in` (the unit's row pointer), if it is
// a token.
template <int D, bool kBf16>
__device__ __forceinline__ void LoadHeldRow(const RowsSource& src, const unsigned char* in, Unit u,
                                            const LaneRows<D>& lr, LaneRaw<D, kBf16>& raw) {
  using T = std::conditional_t<kBf16, uint16_t, float>;
  if (u.group >= lr.valid_groups) return;  // words left as they were, as in LoadRow
  LoadRowAt<D, kBf16, 1>(src, reinterpret_cast<const T*>(in), raw);
}

// ---- Rotation (FP64, reference order) ----
// Y = X R for the 2 passes' rows of a warp (16 rows at D = 128, 32 at D = 64) as a register-tiled
// product: lane (rb, cb) accumulates the 8 x 8 block of rows 8 rb.., columns 8 cb.. in double,
// in increasing i as the reference does, so each shared-memory load feeds 8 fma (a 16-byte load
// costs the load unit a cycle per quarter warp, so loads per fma decide the speed).

template <int D>
struct RotationSmem {
  static constexpr int kRows = 2 * rows::RowLayout<D>::kRowsPerWarp;  // rows rotated at once
  static constexpr int kColBlocks = D / 8;
  static_assert(kRows / 8 * kColBlocks == 32, "one 8 x 8 tile per lane");
  static constexpr size_t kRotationBytes = sizeof(double) * D * D;
  // Per warp: X^T [D][kRows] floats, then Y [kRows][D] floats in the same place.
  static constexpr size_t kStageBytes = sizeof(float) * D * kRows;
  static constexpr size_t kBytes = kRotationBytes + kWarps * kStageBytes;
  // R[i][2p], R[i][2p + 1] as one double pair: the 4 pairs of column block cb are permuted so
  // that the 8 column blocks a quarter warp reads land in 8 different 16-byte bank groups.
  __device__ static int PairIndex(int i, int cb, int k) {
    return i * (D / 2) + 4 * cb + ((k + (cb >> 1)) & 3);
  }
};

template <int D>
__device__ __forceinline__ void StageRotation(const float* __restrict__ rot, double2* r_s) {
  for (int e = threadIdx.x; e < D * D / 2; e += blockDim.x) {
    const int i = e / (D / 2), pair = e % (D / 2);
    const float* r = rot + i * D + 2 * pair;
    r_s[RotationSmem<D>::PairIndex(i, pair / 4, pair % 4)] = make_double2(r[0], r[1]);
  }
}

// x[p] <- x[p] * R for the lane's rows of both passes: y_c = sum_i x_i R[i][c], accumulated in
// double in increasing i and rounded to float once, as KvQuantRef does (x_i R[i][c] is exact in
// double, so fma equals its multiply-then-add). `stage` is the warp's.
template <int D>
__device__ __forceinline__ void RotateRows(rows::FloatLane<D> (&x)[2], float* stage,
                                           const double2* r_s, int lane,
                                           const rows::RowGroup<D>& rg) {
  using L = rows::RowLayout<D>;
  using S = RotationSmem<D>;
  constexpr int kRows = S::kRows;
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    const int row = p * L::kRowsPerWarp + rg.slot;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
#pragma unroll
      for (int b = 0; b < L::kChunk; ++b) {
        stage[L::Channel(rg.gl, q, b) * kRows + row] = x[p].v[q * L::kChunk + b];
      }
    }
  }
  __syncwarp();
  const int rb = lane / S::kColBlocks, cb = lane % S::kColBlocks;
  double acc[8][8];
#pragma unroll
  for (int a = 0; a < 8; ++a) {
#pragma unroll
    for (int c = 0; c < 8; ++c) acc[a][c] = 0.0;
  }
#pragma unroll 1
  for (int i = 0; i < D; ++i) {
    const float4 x0 = *reinterpret_cast<const float4*>(stage + i * kRows + 8 * rb);
    const float4 x1 = *reinterpret_cast<const float4*>(stage + i * kRows + 8 * rb + 4);
    const double xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
    double rv[8];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const double2 r = r_s[S::PairIndex(i, cb, k)];
      rv[2 * k] = r.x;
      rv[2 * k + 1] = r.y;
    }
#pragma unroll
    for (int a = 0; a < 8; ++a) {
#pragma unroll
      for (int c = 0; c < 8; ++c) acc[a][c] = __fma_rn(xv[a], rv[c], acc[a][c]);
    }
  }
  __syncwarp();  // X^T read by every lane: the stage now takes Y
#pragma unroll
  for (int a = 0; a < 8; ++a) {
    float* y = stage + (8 * rb + a) * D + 8 * cb;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      *reinterpret_cast<float4*>(y + 4 * h) =
          make_float4(__double2float_rn(acc[a][4 * h]), __double2float_rn(acc[a][4 * h + 1]),
                      __double2float_rn(acc[a][4 * h + 2]), __double2float_rn(acc[a][4 * h + 3]));
    }
  }
  __syncwarp();
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    const float* y = stage + (p * L::kRowsPerWarp + rg.slot) * D;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float4 v = *reinterpret_cast<const float4*>(y + L::Channel(rg.gl, q, 0) + 4 * h);
        x[p].v[q * L::kChunk + 4 * h] = v.x;
        x[p].v[q * L::kChunk + 4 * h + 1] = v.y;
        x[p].v[q * L::kChunk + 4 * h + 2] = v.z;
        x[p].v[q * L::kChunk + 4 * h + 3] = v.w;
      }
    }
  }
  __syncwarp();  // the next rows rewrite the stage
}

// ---- Output ----

// The unit's page id (0 when linear or past the last unit).
__device__ __forceinline__ int PageOf(const RowsTarget& tgt, Unit u, int groups) {
  return tgt.page_ids != nullptr && u.group < groups ? tgt.page_ids[u.group] : 0;
}
// Page ids, heads and rows are non-negative: unsigned 32 x 64-bit products (one IMAD.WIDE.U32 and
// one IMAD each, no sign extension).
__device__ __forceinline__ uint64_t Times(int i, int64_t stride) {
  return static_cast<uint64_t>(static_cast<uint32_t>(i)) * static_cast<uint64_t>(stride);
}
__device__ __forceinline__ uint8_t* SegmentOf(const RowsTarget& tgt, Unit u, int page,
                                              int* first_row) {
  if (tgt.page_ids != nullptr) {
    *first_row = 0;
    return tgt.base + (Times(page, tgt.page_stride) + Times(u.h, tgt.head_stride) +
                       static_cast<uint64_t>(tgt.segment_offset));
  }
  *first_row = u.group * kUnitTokens;
  return tgt.base + Times(u.h, tgt.head_stride);
}

// The lane's code bytes at `codes`, and (lane gl = 0) its row's params at params_at(), worked out
// only in those lanes (computed before the branch, the address cost every lane a few instructions
// at D = 64).
template <int D, int kVector, class ParamsAt>
__device__ __forceinline__ void StoreWords(const RowsTarget& tgt, uint8_t* codes,
                                           ParamsAt params_at, const uint32_t (&w)[2],
                                           const quant_device::GroupParams& gp,
                                           const rows::RowGroup<D>& rg) {
  using L = rows::RowLayout<D>;
  const bool vector_stores = kVector < 0 ? tgt.vector_stores : kVector == 1;
  if (vector_stores) {
    *reinterpret_cast<uint2*>(codes) = make_uint2(w[0], w[1]);
  } else {
#pragma unroll
    for (int b = 0; b < L::kChunk; ++b) codes[b] = static_cast<uint8_t>(w[b / 4] >> (8 * (b % 4)));
  }
  if (rg.gl == 0) {
    // Scale then min, little-endian; whole 16-bit words (see quant_device::StoreParamsDev).
    uint8_t* prm = params_at();
    const uint32_t s = __half_as_ushort(gp.s16);
    const uint32_t m = __half_as_ushort(gp.m16);
    if (vector_stores) {
      *reinterpret_cast<uint32_t*>(prm) = s | m << 16;
    } else {
      reinterpret_cast<uint16_t*>(prm)[0] = static_cast<uint16_t>(s);
      reinterpret_cast<uint16_t*>(prm)[1] = static_cast<uint16_t>(m);
    }
  }
}
template <int D, int kVector>
__device__ __forceinline__ void StoreRow(const RowsTarget& tgt, uint8_t* seg, int row,
                                         const uint32_t (&w)[2],
                                         const quant_device::GroupParams& gp,
                                         const rows::RowGroup<D>& rg) {
  using L = rows::RowLayout<D>;
  StoreWords<D, kVector>(
      tgt, seg + (Times(row, L::kCodeBytes) + L::kChunk * rg.gl),
      [&] { return seg + (Times(tgt.segment_tokens, L::kCodeBytes) + Times(row, 4)); }, w, gp, rg);
}

// ---- Kernel ----

// Asks L2 for the lane's row of unit u (its 128-byte lines; every lane's offset in the row is
// under 128 bytes). No data comes back, so it may run before the wait for the kernel that writes
// the rows: L2 is where those writes land. For the first unit only: the first load then no
// longer starts at the release (H200, same run: D=64 K 7.92 -> 7.46 us, V 8.96 -> 8.71, D=128
// within 0.6%; the next unit as well: D=128 K +3.2%; bench/NOTES.md "Session 22").
template <int D, bool kBf16>
__device__ __forceinline__ void PrefetchRowL2(const RowsSource& src, Unit u,
                                              const rows::RowGroup<D>& rg) {
  const int t = LaneToken(u, rg);
  if (t >= src.tokens) return;
  const auto* row = LaneRowStart<D, kBf16>(src, t, u, rg);
#pragma unroll
  for (int off = 0; off < D * static_cast<int>(sizeof(*row)); off += 128) {
    cuda::PrefetchL2(reinterpret_cast<const unsigned char*>(row) + off);
  }
}

// Zero, computed on the GPU from v (popc(v) >> 6 in inline PTX, which ptxas does not fold). A load
// whose address adds it is issued only once v's own load has landed. The prefetch needs that: the
// loads of both raw buffers share one scoreboard, and without the dependency ptxas let the second
// buffer's first use wait on that scoreboard after the next loads were issued, so every other
// unit waited for a whole fresh DRAM round trip (bench/NOTES.md "Demotion v6").
__device__ __forceinline__ int ZeroAfter(uint32_t v) {
  uint32_t bits;
  asm("popc.b32 %0, %1;" : "=r"(bits) : "r"(v));
  return static_cast<int>(bits >> 6);
}

// The held builds' unit index: the page id when paged (0 past the last unit), the token group
// when linear. A unit's segment is then one 32 x 32-bit product past the lane's (StoreHeldRow).
__device__ __forceinline__ int UnitIndexOf(const RowsTarget& tgt, Unit u, int groups) {
  // PageOf is 0 when linear: one LOP3 with the mask, where a select made ptxas branch around the
  // page id's load.
  return PageOf(tgt, u, groups) | (u.group & tgt.linear_group_mask);
}

// StoreRow for the held builds: paged, the segment of the unit's page at the lane's head; linear,
// the head's segment, in which the unit's rows start at row 8 group. One product each for the
// codes and the params (IMAD.WIDE.U32 with the 64-bit add): the 64-bit sum of head, page and
// group terms it replaced took ~17 instructions a unit.
template <int D, int kVector>
__device__ __forceinline__ void StoreHeldRow(const RowsTarget& tgt, int unit_index,
                                             const LaneRows<D>& lr, const uint32_t (&w)[2],
                                             const quant_device::GroupParams& gp,
                                             const rows::RowGroup<D>& rg) {
  const uint32_t at = static_cast<uint32_t>(unit_index);
  StoreWords<D, kVector>(
      tgt, lr.codes + uint64_t{at} * tgt.unit_codes,
      [&] { return lr.params + uint64_t{at} * tgt.unit_params; }, w, gp, rg);
}

// The row pipeline for one pass of a warp's rows (its units u) and the stores.
// kClipK: clip.k as a compile-time constant (0: read clip.k). `lr` (non-null): the held builds'
// store (StoreHeldRow), and page_or_index is the unit index (UnitIndexOf); else the page id.
template <int D, int kVector = -1, int kClipK = 0, class Lane>
__device__ __forceinline__ void QuantizeAndStore(const Lane& x, Unit u, int page_or_index,
                                                 const RowsSource& src, const RowsTarget& tgt,
                                                 const RowsClip& clip, int lane,
                                                 const rows::RowGroup<D>& rg,
                                                 const LaneRows<D>* lr = nullptr) {
  const rows::RowStats st =
      rows::RowStatsOf<D, kClipK>(x, clip.on, kClipK != 0 ? kClipK : clip.k, rg);
  // Packed bf16 bound pairs for bf16 rows, floats otherwise.
  constexpr bool kBf16Lane = std::is_same_v<Lane, rows::Bf16Lane<D>>;
  using Bound = std::conditional_t<kBf16Lane, uint32_t, float>;
  Bound bounds[3];
  // The held builds have the registers for the width-G shuffles.
  rows::WarpCodeBounds<D, kHeldBuild<kBf16Lane, kVector, kClipK>>(st, clip.on, lane, rg, bounds);
  uint32_t w[2];
  rows::PackCodeBytes<D>(x, bounds, w);
  if (lr != nullptr) {
    if (u.group < lr->valid_groups) {
      StoreHeldRow<D, kVector>(tgt, page_or_index, *lr, w, st.gp, rg);
    }
    return;
  }
  const int r = rg.slot % kUnitTokens;
  if (u.group * kUnitTokens + r < src.tokens) {  // a row of this unit (the unit exists)
    int first_row;
    uint8_t* seg = SegmentOf(tgt, u, page_or_index, &first_row);
    StoreRow<D, kVector>(tgt, seg, first_row + r, w, st.gp, rg);
  }
}

// Unrotated rows. Three blocks (24 warps) per SM for the model's path (bf16), at most 80
// registers. A fourth block (64 registers, the rows staged through a cp.async ring in shared
// memory) measured no faster: the kernel is bound by the issue of its half-rate instructions, not
// by loads in flight (bench/NOTES.md "Demotion v4"); nor were more blocks than fit at once, or
// one-warp blocks at 28 warps per SM ("v6"). Two units in flight per warp (a 3-slot cp.async
// ring, or L2 asked for the unit after next) measured 6-9% slower at D = 128 ("v9").
// kVector: 1 when every input row and output segment is 16-byte aligned (vector loads and
// stores), -1 to look at the flags. kClipK: the clip's k when the launcher has a build for it (the
// served ratios' k at D = 128: the merges then keep only what the k-th entry needs), else 0.
template <int D, bool kBf16, int kVector, int kClipK = 0>
__global__ void __launch_bounds__(kWarps * 32, kBf16 ? 3 : 1)
    KvInt2RowsKernel(const RowsSource src, const RowsTarget tgt, const RowsClip clip,
                     const InputWalk in_walk) {
  // bf16 rows stay packed bf16; f32 input is floats.
  using Lane = std::conditional_t<kBf16, rows::Bf16Lane<D>, rows::FloatLane<D>>;
  using Raw = LaneRaw<D, kBf16>;
  constexpr int kUnitsPerWarp = rows::RowLayout<D>::kUnitsPerWarp;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const rows::RowGroup<D> rg(lane);
  // The warp's units are consecutive; the lanes of unit slot / 8 walk them in steps of the grid.
  const int groups = (src.tokens + kUnitTokens - 1) / kUnitTokens;
  const int step = static_cast<int>(gridDim.x) * kWarps * kUnitsPerWarp;
  const UnitWalk walk{step / src.heads, step % src.heads, src.heads};
  const int first =
      (static_cast<int>(blockIdx.x) * kWarps + warp) * kUnitsPerWarp + rg.slot / kUnitTokens;
  Unit u{first / src.heads, first % src.heads};
  constexpr bool kHold = kHeldBuild<kBf16, kVector, kClipK>;
  const LaneRows<D> lr(src, tgt, u.h, rg);  // only the held builds keep it
  const unsigned char* in = kHold ? LaneRows<D>::Input(src, in_walk, u, rg) : nullptr;
  // Two raw buffers used in turn (the loop body twice), so the prefetched words are not copied.
  Raw raw[2] = {};
  int page[2];  // each unit's page id (held builds: its UnitIndexOf), loaded with its rows
  // Launched overlapping the kernel before it (LaunchRows): no memory access before the wait,
  // only L2 asked for the first rows.
  PrefetchRowL2<D, kBf16>(src, u, rg);
  cuda::AllowDependentLaunch();
  cuda::WaitForPriorGrid();
  if constexpr (kHold) {
    LoadHeldRow<D, kBf16>(src, in, u, lr, raw[0]);
  } else {
    LoadRow<D, kBf16, kVector>(src, u, rg, raw[0]);
  }
  // Held builds: the unit index (UnitIndexOf) instead of the page id.
  page[0] = kHold ? UnitIndexOf(tgt, u, groups) : PageOf(tgt, u, groups);
  // The next unit's rows and page id stay in flight while this one is processed. They are issued
  // after the current unit's words have landed (ZeroAfter), which also covers its page id: the
  // store then never waits on the scoreboard that the loads in flight share (bench/NOTES.md
  // "Demotion v6"). Returns false when the warp is done.
  const auto step_unit = [&](const Raw& cur, int page_cur, Raw& next, int& page_next) {
    const int zero = ZeroAfter(cur.w[0]);
    Unit n;
    if constexpr (kHold) {
      // The step is a multiple of the heads (LaunchRows): the lane keeps its head (the general
      // walk's wrap test and selects cost ~8 half-rate instructions a unit). The other builds
      // keep the general walk: this one made them spill (D = 64, no clip).
      n = {u.group + walk.step_groups + zero, u.h};
      in += in_walk.step_bytes;
      LoadHeldRow<D, kBf16>(src, in + zero, n, lr, next);
    } else {
      n = walk.Next(u);
      n.group += zero;
      LoadRow<D, kBf16, kVector>(src, n, rg, next);
    }
    page_next = kHold ? UnitIndexOf(tgt, n, groups) : PageOf(tgt, n, groups);
    Lane x;
    ToLane(cur, x);
    QuantizeAndStore<D, kVector, kClipK>(x, u, page_cur, src, tgt, clip, lane, rg,
                                         kHold ? &lr : nullptr);
    u = n;
    return __any_sync(rows::kFullMask, u.group < groups);
  };
  if (!__any_sync(rows::kFullMask, u.group < groups)) return;
  while (step_unit(raw[0], page[0], raw[1], page[1]) &&
         step_unit(raw[1], page[1], raw[0], page[0])) {
  }
}

// Rotated rows: R staged once per block, then each warp takes two passes' units at a time
// (rotation bound by FP64; one block per SM for the shared memory).
template <int D, bool kBf16>
__global__ void __launch_bounds__(kWarps * 32, 1)
    KvInt2RotatedRowsKernel(const RowsSource src, const RowsTarget tgt, const RowsClip clip,
                            const float* __restrict__ rotation) {
  using Raw = LaneRaw<D, kBf16>;
  constexpr int kUnitsPerWarp = rows::RowLayout<D>::kUnitsPerWarp;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const rows::RowGroup<D> rg(lane);
  extern __shared__ __align__(16) unsigned char smem[];
  double2* r_s = reinterpret_cast<double2*>(smem);
  float* stage = reinterpret_cast<float*>(smem + RotationSmem<D>::kRotationBytes) +
                 warp * (RotationSmem<D>::kStageBytes / sizeof(float));
  StageRotation<D>(rotation, r_s);
  __syncthreads();

  const int groups = (src.tokens + kUnitTokens - 1) / kUnitTokens;
  const int step = static_cast<int>(gridDim.x) * kWarps * 2 * kUnitsPerWarp;
  const UnitWalk walk{step / src.heads, step % src.heads, src.heads};
  const int first =
      (static_cast<int>(blockIdx.x) * kWarps + warp) * 2 * kUnitsPerWarp + rg.slot / kUnitTokens;
  Unit u[2];
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    u[p] = {(first + p * kUnitsPerWarp) / src.heads, (first + p * kUnitsPerWarp) % src.heads};
  }
  while (__any_sync(rows::kFullMask, u[0].group < groups)) {
    rows::FloatLane<D> x[2];
    int page[2];
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      page[p] = PageOf(tgt, u[p], groups);
      Raw raw = {};
      LoadRow<D, kBf16>(src, u[p], rg, raw);
      ToLane(raw, x[p]);
    }
    RotateRows<D>(x, stage, r_s, lane, rg);
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      QuantizeAndStore<D>(x[p], u[p], page[p], src, tgt, clip, lane, rg);
      u[p] = walk.Next(u[p]);
    }
  }
}

// A grid of at most one resident wave of `kernel`, enough blocks for `units`.
template <class Kernel>
cudaError_t GridFor(Kernel kernel, size_t smem, int64_t units, int64_t units_per_block,
                    int* blocks) {
  int sms = 0, per_sm = 0;
  OSCARKV_CUDA_RETURN_IF_ERROR(cuda::CurrentDeviceSms(&sms));
  OSCARKV_CUDA_RETURN_IF_ERROR(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarps * 32, smem));
  if (per_sm < 1) return cudaErrorInvalidConfiguration;
  const int64_t needed = (units + units_per_block - 1) / units_per_block;
  const int64_t resident = static_cast<int64_t>(per_sm) * sms;
  *blocks = static_cast<int>(needed < resident ? needed : resident);
  return cudaSuccess;
}

// The unrotated kernel's grid: its step (blocks x units per block) a multiple of the heads, so
// that every lane keeps its head along the walk. A full wave rounds down (a few blocks fewer for
// head counts that share no factor with the block's units), a smaller grid up (the extra blocks
// find no unit and leave).
int WholeHeadsGrid(int blocks, int64_t units, int heads, int64_t units_per_block) {
  const int period = heads / std::gcd(heads, static_cast<int>(units_per_block));
  const bool full_wave = static_cast<int64_t>(blocks) * units_per_block < units;
  if (full_wave && blocks >= period) return blocks / period * period;
  return (blocks + period - 1) / period * period;
}

// Clip k with a build of their own (D = 128, bf16 rows): 128 - ClipIndex(0.96 / 0.92, 128).
constexpr int kClipKeyK = 6;
constexpr int kClipValueK = 11;

template <int D, bool kBf16>
cudaError_t LaunchRows(const RowsSource& src, const RowsTarget& tgt, const RowsClip& clip,
                       const float* rotation, cudaStream_t stream) {
  const int64_t units =
      static_cast<int64_t>((src.tokens + kUnitTokens - 1) / kUnitTokens) * src.heads;
  constexpr int64_t kWarpUnits = rows::RowLayout<D>::kUnitsPerWarp;
  int blocks = 0;
  if (rotation == nullptr) {
    const bool vector = src.vector_loads && tgt.vector_stores;
    auto kernel = vector ? KvInt2RowsKernel<D, kBf16, 1> : KvInt2RowsKernel<D, kBf16, -1>;
    if constexpr (D == 128 && kBf16) {
      // The model's K and V ratios (0.96, 0.92): k = 6 and 11. The vector builds of these are the
      // held builds, whose unit strides are 32-bit (RowsTarget::unit_codes).
      const bool held = vector && tgt.page_stride <= int64_t{UINT32_MAX};
      if (clip.on && clip.k == kClipKeyK) {
        kernel = held ? KvInt2RowsKernel<D, kBf16, 1, kClipKeyK>
                      : KvInt2RowsKernel<D, kBf16, -1, kClipKeyK>;
      } else if (clip.on && clip.k == kClipValueK) {
        kernel = held ? KvInt2RowsKernel<D, kBf16, 1, kClipValueK>
                      : KvInt2RowsKernel<D, kBf16, -1, kClipValueK>;
      }
    }
    OSCARKV_CUDA_RETURN_IF_ERROR(GridFor(kernel, 0, units, kWarps * kWarpUnits, &blocks));
    blocks = WholeHeadsGrid(blocks, units, src.heads, kWarps * kWarpUnits);
    // Overlapping the previous kernel's drain hides the launch latency (K then V of a layer run
    // back to back): -0.2...0.5 us a call (bench/NOTES.md "Demotion v7").
    const InputWalk in_walk = InputWalkFor(src, D, blocks * kWarps * static_cast<int>(kWarpUnits));
    OSCARKV_CUDA_RETURN_IF_ERROR(cuda::LaunchOverlappingPrior(
        kernel, dim3(blocks), dim3(kWarps * 32), 0, stream, src, tgt, clip, in_walk));
  } else {
    const auto kernel = KvInt2RotatedRowsKernel<D, kBf16>;  // no InputWalk: not a held build
    constexpr size_t kSmem = RotationSmem<D>::kBytes;
    OSCARKV_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem)));
    OSCARKV_CUDA_RETURN_IF_ERROR(GridFor(kernel, kSmem, units, kWarps * 2 * kWarpUnits, &blocks));
    kernel<<<blocks, kWarps * 32, kSmem, stream>>>(src, tgt, clip, rotation);
  }
  return cudaGetLastError();
}

template <int D>
cudaError_t DispatchRows(const RowsSource& src, const RowsTarget& tgt, const RowsClip& clip,
                         const float* rotation, cudaStream_t stream) {
  return src.bf16 != nullptr ? LaunchRows<D, true>(src, tgt, clip, rotation, stream)
                             : LaunchRows<D, false>(src, tgt, clip, rotation, stream);
}

bool Aligned(uintptr_t bits, uintptr_t to) { return bits % to == 0; }

cudaError_t Launch(const KvQuantParams& p, RowsTarget tgt, cudaStream_t stream) {
  if ((p.input_bf16 == nullptr) == (p.input_f32 == nullptr)) return cudaErrorInvalidValue;
  if (p.tokens <= 0 || p.heads <= 0 || !(p.clip_ratio > 0.0f)) return cudaErrorInvalidValue;
  if (p.head_dim != 64 && p.head_dim != 128) return cudaErrorNotSupported;
  const int64_t in_stride =
      p.input_token_stride == 0 ? static_cast<int64_t>(p.heads) * p.head_dim : p.input_token_stride;
  if (in_stride < static_cast<int64_t>(p.heads) * p.head_dim) return cudaErrorInvalidValue;
  const bool clip = p.clip_ratio < 1.0f;
  const int clip_idx = ClipIndex(p.clip_ratio, p.head_dim);
  if (p.kind != kvformat::SegmentKind::kInt2PerToken || p.token_norms_out != nullptr) {
    // KIVI-2 / OScaR groups and token norms: linear segments only (no paged grouped layout).
    if (tgt.page_ids != nullptr) return cudaErrorNotSupported;
    return LaunchGroupedKvQuant(p, in_stride, clip_idx, clip, tgt.head_stride, stream);
  }
  // Params are stored as 16-bit words: every segment must start on an even address.
  const uintptr_t out_bits =
      reinterpret_cast<uintptr_t>(tgt.base) | static_cast<uintptr_t>(tgt.page_stride) |
      static_cast<uintptr_t>(tgt.head_stride) | static_cast<uintptr_t>(tgt.segment_offset);
  if (!Aligned(out_bits, 2)) return cudaErrorInvalidValue;
  tgt.vector_stores = Aligned(out_bits, 16);
  const int64_t code_bytes = p.head_dim / 4;
  // Linear segments of 4 GiB or more (over 100M tokens) are refused (kv_quant_cuda.h): the
  // per-token kernels are not tested past 32-bit offsets into a segment (their offsets were
  // 32-bit until demotion v10).
  if (tgt.segment_offset + int64_t{tgt.segment_tokens} * (code_bytes + 4) > int64_t{UINT32_MAX}) {
    return cudaErrorInvalidValue;
  }
  // Held builds only (LaunchRows checks that the page stride fits).
  const bool paged = tgt.page_ids != nullptr;
  tgt.unit_codes = static_cast<uint32_t>(paged ? tgt.page_stride : kUnitTokens * code_bytes);
  tgt.unit_params = static_cast<uint32_t>(paged ? tgt.page_stride : kUnitTokens * 4);
  tgt.linear_group_mask = paged ? 0 : ~0;
  RowsSource src{p.input_bf16, p.input_f32, in_stride, p.tokens, p.heads, false};
  const uintptr_t in_ptr = p.input_bf16 != nullptr ? reinterpret_cast<uintptr_t>(p.input_bf16)
                                                   : reinterpret_cast<uintptr_t>(p.input_f32);
  const int elem_bytes = p.input_bf16 != nullptr ? 2 : 4;
  src.vector_loads =
      Aligned(in_ptr, 16) && Aligned(static_cast<uintptr_t>(in_stride) * elem_bytes, 16);
  const RowsClip rc{clip, p.head_dim - clip_idx};
  return p.head_dim == 128 ? DispatchRows<128>(src, tgt, rc, p.rotation, stream)
                           : DispatchRows<64>(src, tgt, rc, p.rotation, stream);
}

}  // namespace

cudaError_t KvQuantCuda(const KvQuantParams& params, cudaStream_t stream) {
  if (params.output == nullptr) return cudaErrorInvalidValue;
  const int64_t seg =
      static_cast<int64_t>(kvformat::SegmentBytes(params.kind, params.tokens, params.head_dim));
  RowsTarget tgt{params.output,
                 nullptr,
                 0,
                 params.output_head_stride == 0 ? seg : params.output_head_stride,
                 0,
                 params.tokens,
                 false};
  if (tgt.head_stride < seg) return cudaErrorInvalidValue;
  return Launch(params, tgt, stream);
}

cudaError_t DemoteToPagesCuda(const KvQuantParams& params, const DemotePagesTarget& target,
                              cudaStream_t stream) {
  if (target.pool == nullptr || target.page_ids == nullptr) return cudaErrorInvalidValue;
  RowsTarget tgt{target.pool,
                 target.page_ids,
                 target.page_stride_bytes,
                 target.head_stride_bytes,
                 target.segment_offset_bytes,
                 kUnitTokens,
                 false};
  return Launch(params, tgt, stream);
}

}  // namespace oscarkv::kernels

// Device pipeline of the per-token INT2 quantizer for rows (token, head) held by groups of
// G = D / 16 consecutive lanes, 16 consecutive channels per lane: row min/max, exact clip
// threshold, params, codes, quartered packing. Every step gives KvQuantRef's bytes exactly:
//   clip threshold  tau = the k-th largest |y| (k = D - ClipIndex), found by a tournament over
//                   per-lane sorted lists (an order statistic is exact whatever finds it);
//   params          the reference's float ops on the clipped min/max, including which zero the
//                   reference's running min keeps (+0 == -0, and the sign reaches the fp16 min);
//   codes           three compares with the exact code bounds of int2_code_bounds.h.
// A lane's values come as packed bf16 (unrotated bf16 input: sorting, min/max and the code
// compares run two values per instruction) or as floats (f32 input, rotated rows).
// All functions are called by every lane of the warp (full-mask shuffles); a warp holds 32 / G
// rows at once, one per group.
#ifndef OSCARKV_KERNELS_QUANT_INT2_ROW_GROUP_CUH_
#define OSCARKV_KERNELS_QUANT_INT2_ROW_GROUP_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/quant/int2_code_bounds.h"
#include "kernels/quant/kv_quant_device.cuh"

namespace oscarkv::kernels::int2_rows {

inline constexpr int kLaneChannels = 16;
inline constexpr int kUnitRows = 8;  // rows of a unit: one INT2 page of one head
inline constexpr uint32_t kFullMask = 0xffffffffu;

// The lane's place in its row group.
template <int D>
struct RowGroup {
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static constexpr int kLanes = D / kLaneChannels;     // G: 8 for D = 128, 4 for D = 64
  static constexpr int kRowsPerWarp = 32 / kLanes;
  static constexpr int kPasses = kUnitRows / kRowsPerWarp;  // a unit takes 2 passes (D 128) or 1
  static constexpr int kCodeBytes = D / 4;             // one quartered run per row
  static constexpr int kStoreLanes = kCodeBytes / 16;  // lanes that store 16 code bytes each

  int gl;         // lane within the group; holds channels 16 gl .. 16 gl + 15
  int slot;       // which of the warp's rows
  uint32_t mask;  // the group's lanes
  int quarter;    // quarter of the row those channels fall in (bits 2q..2q+1 of their code bytes)

  __device__ explicit RowGroup(int lane)
      : gl(lane % kLanes),
        slot(lane / kLanes),
        mask(((1u << kLanes) - 1u) << (lane / kLanes * kLanes)),
        quarter(lane % kLanes * kLaneChannels / kCodeBytes) {}
};

// A lane's 16 values of one row: bf16 bits with channel 2i in the low half of w[i] and 2i + 1 in
// the high half, or floats.
struct Bf16Lane {
  uint32_t w[8];
};
struct FloatLane {
  float v[kLaneChannels];
};

// Per row: clip threshold (0 when the row is not clipped) and params.
struct RowStats {
  float tau;
  quant_device::GroupParams gp;
};

// ---- Group reductions, by xor shuffles of the whole warp ----
// (__reduce_*_sync with a group's mask compiles to a serialised collective on sm_90 when the
// masks differ between lanes.)

template <int G>
__device__ __forceinline__ uint32_t GroupMaxU(uint32_t v) {
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}
template <int G>
__device__ __forceinline__ uint32_t GroupMinU(uint32_t v) {
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}
template <int G>
__device__ __forceinline__ float GroupMin(float v) {
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) v = fminf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}
template <int G>
__device__ __forceinline__ float GroupMax(float v) {
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// ---- Packed bf16 helpers (one instruction each on sm_90) ----

__device__ __forceinline__ __nv_bfloat162 AsBf16x2(uint32_t u) {
  __nv_bfloat162 b;
  b.x = __ushort_as_bfloat16(static_cast<unsigned short>(u & 0xffffu));
  b.y = __ushort_as_bfloat16(static_cast<unsigned short>(u >> 16));
  return b;
}
__device__ __forceinline__ uint32_t Bf16x2Bits(__nv_bfloat162 b) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(b.x)) |
         static_cast<uint32_t>(__bfloat16_as_ushort(b.y)) << 16;
}
__device__ __forceinline__ uint32_t Bf16x2Min(uint32_t a, uint32_t b) {
  return Bf16x2Bits(__hmin2(AsBf16x2(a), AsBf16x2(b)));
}
__device__ __forceinline__ uint32_t Bf16x2Max(uint32_t a, uint32_t b) {
  return Bf16x2Bits(__hmax2(AsBf16x2(a), AsBf16x2(b)));
}
// 0xffff in each half where a >= b (as bf16 values), else 0.
__device__ __forceinline__ uint32_t Bf16x2GeMask(uint32_t a, uint32_t b) {
  return __hge2_mask(AsBf16x2(a), AsBf16x2(b));
}
__device__ __forceinline__ float LoBf16(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float HiBf16(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }

// ---- Clip threshold: k-th largest |y| of the row ----

// Compare-exchange orders for the sorting networks: one u32 key per register, or two u16 keys
// (|bf16| bits) per register sorted as independent columns.
struct U32Order {
  __device__ static uint32_t Max(uint32_t a, uint32_t b) { return max(a, b); }
  __device__ static uint32_t Min(uint32_t a, uint32_t b) { return min(a, b); }
};
struct U16x2Order {
  __device__ static uint32_t Max(uint32_t a, uint32_t b) { return __vmaxu2(a, b); }
  __device__ static uint32_t Min(uint32_t a, uint32_t b) { return __vminu2(a, b); }
};

// Descending compare-exchange and the small networks built from it.
template <class O>
__device__ __forceinline__ void Cas(uint32_t& a, uint32_t& b) {
  const uint32_t hi = O::Max(a, b);
  b = O::Min(a, b);
  a = hi;
}
template <class O>
__device__ __forceinline__ void Sort4(uint32_t& a, uint32_t& b, uint32_t& c, uint32_t& d) {
  Cas<O>(a, b);
  Cas<O>(c, d);
  Cas<O>(a, c);
  Cas<O>(b, d);
  Cas<O>(b, c);
}
// The 4 largest of k[0..8) in t, descending (k is scrambled).
template <class O>
__device__ __forceinline__ void Top4Of8(uint32_t (&k)[8], uint32_t (&t)[4]) {
  Sort4<O>(k[0], k[1], k[2], k[3]);
  Sort4<O>(k[4], k[5], k[6], k[7]);
#pragma unroll
  for (int i = 0; i < 4; ++i) t[i] = O::Max(k[i], k[7 - i]);  // top half of the bitonic merge
  Cas<O>(t[0], t[2]);
  Cas<O>(t[1], t[3]);
  Cas<O>(t[0], t[1]);
  Cas<O>(t[2], t[3]);
}
// k[0..8) sorted descending (Batcher's odd-even merge sort, 19 comparators).
template <class O>
__device__ __forceinline__ void Sort8(uint32_t (&k)[8]) {
  Sort4<O>(k[0], k[1], k[2], k[3]);
  Sort4<O>(k[4], k[5], k[6], k[7]);
  Cas<O>(k[0], k[4]);
  Cas<O>(k[1], k[5]);
  Cas<O>(k[2], k[6]);
  Cas<O>(k[3], k[7]);
  Cas<O>(k[2], k[4]);
  Cas<O>(k[3], k[5]);
  Cas<O>(k[1], k[2]);
  Cas<O>(k[3], k[4]);
  Cas<O>(k[5], k[6]);
}

// Pops the group's largest remaining key k times from the lanes' descending lists a and b (R
// entries each; 0 marks an emptied slot, below every key); returns the k-th key popped. One
// element leaves per step: with unique keys the list whose head is the maximum, otherwise the
// lowest (lane, list) among equal heads. Sets *emptied when a list ran out: its unlisted
// elements may then be above the result.
template <int G, int R, bool kUniqueKeys>
__device__ __forceinline__ uint32_t PopKth(uint32_t (&a)[R], uint32_t (&b)[R], int k, int gl,
                                           bool* emptied) {
  uint32_t top = 0;
  for (int step = 0; step < k; ++step) {
    top = GroupMaxU<G>(max(a[0], b[0]));
    bool pop_a = a[0] == top;
    bool pop_b = b[0] == top;
    if constexpr (!kUniqueKeys) {
      const uint32_t id_a = static_cast<uint32_t>(gl) << 1;
      const uint32_t id = pop_a ? id_a : (pop_b ? id_a + 1u : 0xffffffffu);
      const uint32_t winner = GroupMinU<G>(id);
      pop_a = winner == id_a;
      pop_b = winner == id_a + 1u;
    }
#pragma unroll
    for (int i = 0; i + 1 < R; ++i) {
      a[i] = pop_a ? a[i + 1] : a[i];
      b[i] = pop_b ? b[i + 1] : b[i];
    }
    a[R - 1] = pop_a ? 0u : a[R - 1];
    b[R - 1] = pop_b ? 0u : b[R - 1];
  }
  *emptied = a[0] == 0u || b[0] == 0u;
  return top;
}

// Tournament keys of packed |bf16| columns (low half: even channels, list a; high half: odd
// channels, list b): the 15 magnitude bits, then the lane and list, so no two lists' keys tie.
__device__ __forceinline__ void Bf16Keys(const uint32_t* col, int n, int gl, uint32_t* a,
                                         uint32_t* b) {
  const uint32_t tag = 0x80000000u | static_cast<uint32_t>(gl) << 1;
  for (int i = 0; i < n; ++i) {
    a[i] = tag | (col[i] & 0xffffu) << 4;
    b[i] = tag | 1u | (col[i] >> 16) << 4;
  }
}

// tau = the k-th largest |y| of the group's row. Fast path: each lane's top 4 of each of its two
// lists of 8; a group whose lists ran dry (some list held more than 4 of the top k: rare for the
// served ratios) repeats with fully sorted lists, which cannot run dry. `sorted_only` skips the
// fast path (k so large that it would run dry on most rows).
template <int D>
__device__ __forceinline__ float ClipThreshold(const Bf16Lane& x, int k, bool sorted_only,
                                               const RowGroup<D>& rg) {
  constexpr int G = RowGroup<D>::kLanes;
  uint32_t col[8];
  uint32_t key = 0;
  bool emptied = true;
  if (!sorted_only) {
#pragma unroll
    for (int i = 0; i < 8; ++i) col[i] = x.w[i] & 0x7fff7fffu;
    uint32_t top[4], a[4], b[4];
    Top4Of8<U16x2Order>(col, top);
    Bf16Keys(top, 4, rg.gl, a, b);
    key = PopKth<G, 4, true>(a, b, k, rg.gl, &emptied);
  }
  const bool redo = (__ballot_sync(kFullMask, emptied) & rg.mask) != 0u;
  if (__any_sync(kFullMask, redo)) {
#pragma unroll
    for (int i = 0; i < 8; ++i) col[i] = x.w[i] & 0x7fff7fffu;
    Sort8<U16x2Order>(col);
    uint32_t a[8], b[8];
    Bf16Keys(col, 8, rg.gl, a, b);
    bool unused;
    const uint32_t sorted_key = PopKth<G, 8, true>(a, b, k, rg.gl, &unused);
    if (redo) key = sorted_key;
  }
  return __uint_as_float(((key >> 4) & 0x7fffu) << 16);
}

// The same for float values: lists of channels 0-7 and 8-15, keys |y| bits + 1 (ties between
// lists broken in PopKth).
template <int D>
__device__ __forceinline__ float ClipThreshold(const FloatLane& x, int k, bool sorted_only,
                                               const RowGroup<D>& rg) {
  constexpr int G = RowGroup<D>::kLanes;
  uint32_t ka[8], kb[8];
  uint32_t key = 0;
  bool emptied = true;
  if (!sorted_only) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      ka[i] = (__float_as_uint(x.v[i]) & 0x7fffffffu) + 1u;
      kb[i] = (__float_as_uint(x.v[8 + i]) & 0x7fffffffu) + 1u;
    }
    uint32_t a[4], b[4];
    Top4Of8<U32Order>(ka, a);
    Top4Of8<U32Order>(kb, b);
    key = PopKth<G, 4, false>(a, b, k, rg.gl, &emptied);
  }
  const bool redo = (__ballot_sync(kFullMask, emptied) & rg.mask) != 0u;
  if (__any_sync(kFullMask, redo)) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      ka[i] = (__float_as_uint(x.v[i]) & 0x7fffffffu) + 1u;
      kb[i] = (__float_as_uint(x.v[8 + i]) & 0x7fffffffu) + 1u;
    }
    Sort8<U32Order>(ka);
    Sort8<U32Order>(kb);
    bool unused;
    const uint32_t sorted_key = PopKth<G, 8, false>(ka, kb, k, rg.gl, &unused);
    if (redo) key = sorted_key;
  }
  return __uint_as_float(key - 1u);
}

// ---- Params ----

struct MinMax {
  float mn, mx;
};
template <int D>
__device__ __forceinline__ MinMax RowMinMax(const Bf16Lane& x) {
  uint32_t mn = x.w[0], mx = x.w[0];
#pragma unroll
  for (int i = 1; i < 8; ++i) {
    mn = Bf16x2Min(mn, x.w[i]);
    mx = Bf16x2Max(mx, x.w[i]);
  }
  constexpr int G = RowGroup<D>::kLanes;
  return {GroupMin<G>(fminf(LoBf16(mn), HiBf16(mn))), GroupMax<G>(fmaxf(LoBf16(mx), HiBf16(mx)))};
}
template <int D>
__device__ __forceinline__ MinMax RowMinMax(const FloatLane& x) {
  float mn = x.v[0], mx = x.v[0];
#pragma unroll
  for (int i = 1; i < kLaneChannels; ++i) {
    mn = fminf(mn, x.v[i]);
    mx = fmaxf(mx, x.v[i]);
  }
  constexpr int G = RowGroup<D>::kLanes;
  return {GroupMin<G>(mn), GroupMax<G>(mx)};
}

// Bits of channel i of the lane (sign in bit 31 when read as a float).
__device__ __forceinline__ uint32_t ChannelBits(const Bf16Lane& x, int i) {
  return (x.w[i / 2] >> (16 * (i % 2))) << 16;
}
__device__ __forceinline__ uint32_t ChannelBits(const FloatLane& x, int i) {
  return __float_as_uint(x.v[i]);
}

// Row params from the raw values: min/max, clipped to [-tau, tau] when `clip`. Of equal minima the
// reference keeps the first in channel order; only +0 and -0 differ while comparing equal, and
// the sign reaches the stored fp16 min, so a zero minimum takes the sign of the first value whose
// clipped value is a zero (with tau = 0 every value clips to a zero of its own sign).
template <int D, class Lane>
__device__ __forceinline__ RowStats RowStatsOf(const Lane& x, bool clip, int k, bool sorted_only,
                                               const RowGroup<D>& rg) {
  const float tau = clip ? ClipThreshold<D>(x, k, sorted_only, rg) : 0.0f;
  MinMax r = RowMinMax<D>(x);
  if (clip) {
    // Every |y| <= max|y| and one |y| equals tau, so min <= tau and max >= -tau: clipping the
    // extremes is clipping the row and taking its extremes.
    r.mn = fmaxf(r.mn, -tau);
    r.mx = fminf(r.mx, tau);
  }
  if (__any_sync(kFullMask, r.mn == 0.0f)) {
    const bool all_zero = clip && tau == 0.0f;
    uint32_t first = 0xffffffffu;
#pragma unroll
    for (int i = kLaneChannels - 1; i >= 0; --i) {
      const uint32_t bits = ChannelBits(x, i);
      if (all_zero || (bits & 0x7fffffffu) == 0u) {
        first = static_cast<uint32_t>(rg.gl * kLaneChannels + i) << 1 | bits >> 31;
      }
    }
    first = GroupMinU<RowGroup<D>::kLanes>(first);
    if (r.mn == 0.0f) r.mn = (first & 1u) != 0u ? -0.0f : 0.0f;
  }
  return {tau, quant_device::ParamsOf(r.mn, r.mx)};
}

// ---- Codes ----

// The three code bounds of every row of a unit, computed once per unit: lane L < 24 computes
// bound L % 3 + 1 of unit row L / 3 (row r is in pass r / rows-per-warp, held by the group
// r % rows-per-warp), then each lane fetches its rows' bounds. b[p][j - 1] = bound j of the
// lane's row in pass p.
template <int D>
__device__ __forceinline__ void UnitCodeBounds(const RowStats (&st)[RowGroup<D>::kPasses],
                                               bool clip, int lane, const RowGroup<D>& rg,
                                               float (&b)[RowGroup<D>::kPasses][3]) {
  using RG = RowGroup<D>;
  const int row = min(lane / 3, kUnitRows - 1);
  const int j = min(lane - 3 * row, 2) + 1;
  const int src = row % RG::kRowsPerWarp * RG::kLanes;
  float s = 0.0f, m = 0.0f, tau = 0.0f;
#pragma unroll
  for (int p = 0; p < RG::kPasses; ++p) {
    const float sp = __shfl_sync(kFullMask, st[p].gp.s, src);
    const float mp = __shfl_sync(kFullMask, st[p].gp.m, src);
    const float tp = __shfl_sync(kFullMask, st[p].tau, src);
    if (p == row / RG::kRowsPerWarp) {
      s = sp;
      m = mp;
      tau = tp;
    }
  }
  const float mine = int2_bounds::RowCodeBound(j, s, m, clip, tau);
#pragma unroll
  for (int p = 0; p < RG::kPasses; ++p) {
    const int my_row = p * RG::kRowsPerWarp + rg.slot;
#pragma unroll
    for (int i = 0; i < 3; ++i) b[p][i] = __shfl_sync(kFullMask, mine, 3 * my_row + i);
  }
}

// The row's code bytes: after the call the group's store lanes (gl < kStoreLanes) hold bytes
// 16 gl .. 16 gl + 15 of the row's D/4 packed bytes in w (byte j = codes of channels j, j + D/4,
// j + D/2, j + 3D/4 in bits 1:0, 3:2, 5:4, 7:6). Codes: code(y) = sum_j [y >= bound j].
template <int D>
__device__ __forceinline__ void GatherQuarters(uint32_t (&w)[4]) {
  // The lanes holding the same 16 bytes in the other quarters differ in the top two bits of gl.
  constexpr int kQuarterLanes = RowGroup<D>::kStoreLanes;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    w[k] |= __shfl_xor_sync(kFullMask, w[k], kQuarterLanes);
    w[k] |= __shfl_xor_sync(kFullMask, w[k], 2 * kQuarterLanes);
  }
}
template <int D>
__device__ __forceinline__ void PackRowCodes(const Bf16Lane& x, const float (&bound)[3],
                                             const RowGroup<D>& rg, uint32_t (&w)[4]) {
  // A bf16 value is >= a float bound iff it is >= the bound rounded up to bf16.
  uint32_t b2[3];
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    const uint32_t h = __bfloat16_as_ushort(__float2bfloat16_ru(bound[i]));
    b2[i] = h | h << 16;
  }
  // Per half: code bit 0 = odd number of bounds passed, bit 1 = bound 2 passed (the masks nest).
  const uint32_t bit0 = 0x00010001u << (2 * rg.quarter);
  const uint32_t bit1 = bit0 << 1;
  uint32_t c[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t m1 = Bf16x2GeMask(x.w[i], b2[0]);
    const uint32_t m2 = Bf16x2GeMask(x.w[i], b2[1]);
    const uint32_t m3 = Bf16x2GeMask(x.w[i], b2[2]);
    c[i] = ((m1 ^ m2 ^ m3) & bit0) | (m2 & bit1);
  }
  // Byte 0 of each half: channels 4k, 4k + 1 from c[2k], 4k + 2, 4k + 3 from c[2k + 1].
#pragma unroll
  for (int k = 0; k < 4; ++k) w[k] = __byte_perm(c[2 * k], c[2 * k + 1], 0x6420);
  GatherQuarters<D>(w);
}
template <int D>
__device__ __forceinline__ void PackRowCodes(const FloatLane& x, const float (&bound)[3],
                                             const RowGroup<D>& rg, uint32_t (&w)[4]) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    uint32_t word = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float y = x.v[4 * k + i];
      const uint32_t code = static_cast<uint32_t>(y >= bound[0]) +
                            static_cast<uint32_t>(y >= bound[1]) +
                            static_cast<uint32_t>(y >= bound[2]);
      word |= code << (8 * i);
    }
    w[k] = word << (2 * rg.quarter);
  }
  GatherQuarters<D>(w);
}

}  // namespace oscarkv::kernels::int2_rows

#endif  // OSCARKV_KERNELS_QUANT_INT2_ROW_GROUP_CUH_

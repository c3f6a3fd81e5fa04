// Device pipeline of the per-token INT2 quantizer: each row (token, head) is held by a group of
// G = D/32 lanes with 32 channels each, so a warp holds 32/G rows: one unit (8 tokens x one
// head = one INT2 page segment) at D = 128, two at D = 64. Row min/max, exact clip threshold,
// params, codes, quartered packing. Every step gives KvQuantRef's bytes:
//   clip threshold  tau = the k-th largest |y| (k = D - ClipIndex), found by merging networks
//                   over per-column sorted lists (packed bf16 rows at D = 128) or a tournament
//                   over per-lane sorted lists (the rest): an order statistic is exact whatever
//                   finds it;
//   params          the reference's float ops on the clipped min/max, including which zero the
//                   reference's running min keeps (+0 == -0, and the sign reaches the fp16 min);
//   codes           three compares with the exact code bounds of int2_code_bounds.h.
//
// Channel layout: the quartered packing puts channels j, j + D/4, j + D/2, j + 3D/4 into code
// byte j, so lane gl of a group holds bytes [8 gl, 8 gl + 8) of the row and the channels that
// feed them: chunk q (q = 0..3) = channels q D/4 + 8 gl .. + 8. Each lane then packs whole code
// bytes, with no exchange between lanes.
// A lane's values come as packed bf16 (unrotated bf16 input: sorting, min/max and the code
// compares run two values per instruction) or as floats (f32 input, rotated rows).
// Every function is called by all 32 lanes of the warp (full-mask shuffles).
#ifndef OSCARKV_KERNELS_QUANT_INT2_ROW_GROUP_CUH_
#define OSCARKV_KERNELS_QUANT_INT2_ROW_GROUP_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/quant/int2_code_bounds.h"
#include "kernels/quant/kv_quant_device.cuh"

namespace oscarkv::kernels::int2_rows {

inline constexpr int kUnitRows = 8;  // rows of a unit: one INT2 page of one head
inline constexpr uint32_t kFullMask = 0xffffffffu;

template <int D>
struct RowLayout {
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static constexpr int kGroupLanes = D / 32;             // G: lanes per row
  static constexpr int kRowsPerWarp = 32 / kGroupLanes;  // 8 or 16
  static constexpr int kUnitsPerWarp = kRowsPerWarp / kUnitRows;
  static constexpr int kCodeBytes = D / 4;      // one quartered run per row
  static constexpr int kChunk = 8;              // code bytes per lane
  static constexpr int kChannels = 4 * kChunk;  // channels per lane
  static constexpr int kWords = kChannels / 2;  // packed bf16 words per lane
  static constexpr int kColumnKeys = kWords;    // keys per sorting column
  // Channel of chunk q, position b, for lane gl.
  __device__ static int Channel(int gl, int q, int b) { return q * kCodeBytes + gl * kChunk + b; }
};

// The lane's place in the warp: row `slot` of the warp's rows (unit slot / 8, row slot % 8),
// lane `gl` of its group.
template <int D>
struct RowGroup {
  static constexpr int kLanes = RowLayout<D>::kGroupLanes;
  int gl;
  int slot;
  uint32_t mask;  // the group's lanes
  __device__ explicit RowGroup(int lane)
      : gl(lane % kLanes),
        slot(lane / kLanes),
        mask(((1u << kLanes) - 1u) << (lane / kLanes * kLanes)) {}
};

// A lane's values of its row, (q, b) = position b of chunk q. Bf16: word 4q + i holds (q, 2i) in
// the low half and (q, 2i + 1) in the high half (bf16 bits). Float: v[8q + b] holds (q, b).
template <int D>
struct Bf16Lane {
  uint32_t w[RowLayout<D>::kWords];
};
template <int D>
struct FloatLane {
  float v[RowLayout<D>::kChannels];
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
  for (int o = G / 2; o > 0; o /= 2) v = max(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}
template <int G>
__device__ __forceinline__ uint32_t GroupMinU(uint32_t v) {
#pragma unroll
  for (int o = G / 2; o > 0; o /= 2) v = min(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}
template <int G>
__device__ __forceinline__ float GroupMin(float v) {
#pragma unroll
  for (int o = G / 2; o > 0; o /= 2) v = fminf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}
template <int G>
__device__ __forceinline__ float GroupMax(float v) {
#pragma unroll
  for (int o = G / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// ---- Packed bf16 helpers (one instruction each on sm_90) ----

__device__ __forceinline__ __nv_bfloat162 AsBf16x2(const uint32_t& u) {
  return *reinterpret_cast<const __nv_bfloat162*>(&u);
}
__device__ __forceinline__ uint32_t Bf16x2Bits(const __nv_bfloat162& b) {
  return *reinterpret_cast<const uint32_t*>(&b);
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
// 0xffff in each half where a > b.
__device__ __forceinline__ uint32_t Bf16x2GtMask(uint32_t a, uint32_t b) {
  return __hgt2_mask(AsBf16x2(a), AsBf16x2(b));
}
// |a| of both halves. Compiles to an HFMA2 with an |a| operand, which issues on the FMA pipe (a
// LOP3 mask takes the half-rate integer ALU); the bits are those of a & 0x7fff7fff (not NaN).
__device__ __forceinline__ uint32_t Bf16x2Abs(uint32_t a) { return Bf16x2Bits(__habs2(AsBf16x2(a))); }
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
// Two bf16 magnitudes (>= 0, not NaN) per register, ordered as values, which for these is the
// order of their bits: the same comparators as U16x2Order, but HMNMX2 runs on the FMA pipe at
// full rate, where VIMNMX takes the half-rate integer ALU.
struct Bf16x2Order {
  __device__ static uint32_t Max(uint32_t a, uint32_t b) { return Bf16x2Max(a, b); }
  __device__ static uint32_t Min(uint32_t a, uint32_t b) { return Bf16x2Min(a, b); }
};

// Descending compare-exchange and the networks built from it.
template <class O>
__device__ __forceinline__ void Cas(uint32_t& a, uint32_t& b) {
  const uint32_t hi = O::Max(a, b);
  b = O::Min(a, b);
  a = hi;
}
// k[at .. at + 8) sorted descending (Batcher's odd-even merge sort, 19 comparators).
template <class O, int N>
__device__ __forceinline__ void Sort8(uint32_t (&k)[N], int at) {
  uint32_t* x = k + at;
  Cas<O>(x[0], x[1]);
  Cas<O>(x[2], x[3]);
  Cas<O>(x[0], x[2]);
  Cas<O>(x[1], x[3]);
  Cas<O>(x[1], x[2]);
  Cas<O>(x[4], x[5]);
  Cas<O>(x[6], x[7]);
  Cas<O>(x[4], x[6]);
  Cas<O>(x[5], x[7]);
  Cas<O>(x[5], x[6]);
  Cas<O>(x[0], x[4]);
  Cas<O>(x[1], x[5]);
  Cas<O>(x[2], x[6]);
  Cas<O>(x[3], x[7]);
  Cas<O>(x[2], x[4]);
  Cas<O>(x[3], x[5]);
  Cas<O>(x[1], x[2]);
  Cas<O>(x[3], x[4]);
  Cas<O>(x[5], x[6]);
}
// x[0..n2) bitonic -> descending (half-cleaners of strides n2/2, n2/4, ..., 1).
template <class O, int N>
__device__ __forceinline__ void BitonicClean(uint32_t (&x)[N], int n2) {
#pragma unroll
  for (int stride = n2 / 2; stride > 0; stride /= 2) {
#pragma unroll
    for (int i = 0; i < n2; ++i) {
      if ((i & stride) == 0) Cas<O>(x[i], x[i + stride]);
    }
  }
}
// The smallest power of two >= n, for the networks' padded lengths (n <= 16).
constexpr int PowerOfTwoAtLeast(int n) {
  return n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : n <= 8 ? 8 : 16;
}

// BitonicClean of x[0..n2) where some entries are pads: above every key (kTop) or below every key
// (kBottom). Pads are tracked at compile time, not stored: a compare-exchange with one of them
// is a move or nothing, and the pads end up on top or at the bottom.
enum class Pad { kNone, kTop, kBottom };
template <class O, int N2>
__device__ __forceinline__ void PaddedBitonicClean(uint32_t (&x)[N2], Pad (&pad)[N2]) {
#pragma unroll
  for (int stride = N2 / 2; stride > 0; stride /= 2) {
#pragma unroll
    for (int i = 0; i < N2; ++i) {
      if ((i & stride) != 0) continue;
      const int j = i + stride;
      if (pad[i] == Pad::kTop || pad[j] == Pad::kBottom) continue;  // in order already
      if (pad[i] == Pad::kBottom || pad[j] == Pad::kTop) {          // out of order: swap
        const uint32_t xi = x[i];
        const Pad pi = pad[i];
        x[i] = x[j];
        pad[i] = pad[j];
        x[j] = xi;
        pad[j] = pi;
        continue;
      }
      Cas<O>(x[i], x[j]);
    }
  }
}
// The 4 largest of k[at .. at + 8) in t, descending (k is scrambled).
template <class O, int N>
__device__ __forceinline__ void Top4Of8(uint32_t (&k)[N], int at, uint32_t (&t)[4]) {
  uint32_t* x = k + at;
  Cas<O>(x[0], x[1]);
  Cas<O>(x[2], x[3]);
  Cas<O>(x[0], x[2]);
  Cas<O>(x[1], x[3]);
  Cas<O>(x[1], x[2]);
  Cas<O>(x[4], x[5]);
  Cas<O>(x[6], x[7]);
  Cas<O>(x[4], x[6]);
  Cas<O>(x[5], x[7]);
  Cas<O>(x[5], x[6]);
#pragma unroll
  for (int i = 0; i < 4; ++i) t[i] = O::Max(x[i], x[7 - i]);  // top half of the bitonic merge
  BitonicClean<O>(t, 4);
}
// The R largest of k[0..N) in t, descending, N = 8 or 16 (k is scrambled). R <= 8.
template <class O, int N, int R>
__device__ __forceinline__ void TopOf(uint32_t (&k)[N], uint32_t (&t)[R]) {
  static_assert(N == 8 || N == 16);
  static_assert(R <= 8);
  uint32_t m[R <= 4 ? 4 : 8];
  if constexpr (R <= 4) {
    Top4Of8<O>(k, 0, m);
    if constexpr (N == 16) {
      uint32_t b[4];
      Top4Of8<O>(k, 8, b);
#pragma unroll
      for (int i = 0; i < 4; ++i) m[i] = O::Max(m[i], b[3 - i]);
      BitonicClean<O>(m, 4);
    }
  } else {
    Sort8<O>(k, 0);
#pragma unroll
    for (int i = 0; i < 8; ++i) m[i] = k[i];
    if constexpr (N == 16) {
      Sort8<O>(k, 8);
#pragma unroll
      for (int i = 0; i < 8; ++i) m[i] = O::Max(m[i], k[15 - i]);
      BitonicClean<O>(m, 8);
    }
  }
#pragma unroll
  for (int i = 0; i < R; ++i) t[i] = m[i];
}
// k[0..N) sorted descending, N = 8 or 16.
template <class O, int N>
__device__ __forceinline__ void SortAll(uint32_t (&k)[N]) {
  static_assert(N == 8 || N == 16);
  Sort8<O>(k, 0);
  if constexpr (N == 16) {
    Sort8<O>(k, 8);
    // Reverse the second half: the whole array is then bitonic.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t t = k[8 + i];
      k[8 + i] = k[15 - i];
      k[15 - i] = t;
    }
    BitonicClean<O>(k, 16);
  }
}

// Merges of descending lists: m = a and b sorted together; a = the N largest of a and b.
// MergeAll: a, then P - N bottom pads, then as many again, then b reversed is bitonic (P = N
// rounded up to a power of two; for N a power of two this is the plain bitonic merge).
template <class O, int N>
__device__ __forceinline__ void MergeAll(const uint32_t (&a)[N], const uint32_t (&b)[N],
                                         uint32_t (&m)[2 * N]) {
  constexpr int P = PowerOfTwoAtLeast(N);
  static_assert(N <= P);
  uint32_t x[2 * P];
  Pad pad[2 * P];  // constants once unrolled
#pragma unroll
  for (int i = 0; i < 2 * P; ++i) {
    pad[i] = i >= N && i < 2 * P - N ? Pad::kBottom : Pad::kNone;
    x[i] = i < N ? a[i] : i >= 2 * P - N ? b[2 * P - 1 - i] : 0u;
  }
  PaddedBitonicClean<O>(x, pad);
#pragma unroll
  for (int i = 0; i < 2 * N; ++i) m[i] = x[i];
}
template <class O, int N>
__device__ __forceinline__ void MergeTop(uint32_t (&a)[N], const uint32_t (&b)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) a[i] = O::Max(a[i], b[N - 1 - i]);  // the top half of the merge
  BitonicClean<O>(a, N);
}

// The K largest of two descending lists a and b (K <= N), descending, into t: x_i = max(a_i,
// b_{K-1-i}) holds them as a bitonic sequence (falling, then rising), and stays bitonic with
// N2 - K top pads appended (N2 = K rounded up to a power of two), so the half cleaners sort it
// with those on top.
template <class O, int K, int NA, int NB>
__device__ __forceinline__ void MergeTopK(const uint32_t (&a)[NA], const uint32_t (&b)[NB],
                                          uint32_t (&t)[K]) {
  static_assert(1 <= K && K <= NA && K <= NB);
  constexpr int N2 = PowerOfTwoAtLeast(K);
  static_assert(K <= N2);
  uint32_t x[N2];
  Pad pad[N2];  // constants once unrolled
#pragma unroll
  for (int i = 0; i < N2; ++i) {
    pad[i] = i >= K ? Pad::kTop : Pad::kNone;
    x[i] = i < K ? O::Max(a[i], b[K - 1 - i]) : 0u;
  }
  PaddedBitonicClean<O>(x, pad);
#pragma unroll
  for (int i = 0; i < K; ++i) t[i] = x[N2 - K + i];
}

// Pops the group's largest remaining key k times from the lanes' descending lists a and b (R
// entries each; 0 marks an emptied slot, below every key); returns the k-th key popped. One
// element leaves per step: with unique keys the list whose head is the maximum, otherwise the
// lowest (lane, list) among equal heads. Sets *emptied when a list ran out before the end: its
// unlisted elements may then be above the result.
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
  // A list that ran out at the last step, or k <= R, still gives the right result.
  *emptied = k > R && (a[0] == 0u || b[0] == 0u);
  return top;
}

// Entries of the fast path's lists, by k. A list runs dry (and its row repeats on sorted lists)
// only if it holds R of the first k - 1 keys popped: never when k <= R, and for the larger k
// allowed below (8 lists per row at D = 128, 4 at D = 64) on under 1% of rows. Larger k: sorted
// lists only.
template <int D>
__device__ __forceinline__ int ListEntriesFor(int k) {
  constexpr int kShortMaxK = D == 128 ? 6 : 4;
  constexpr int kLongMaxK = D == 128 ? 12 : 8;
  return k <= kShortMaxK ? 4 : k <= kLongMaxK ? 6 : 0;
}

// Tournament keys of packed |bf16| columns (low half: list a, high half: list b): the 15
// magnitude bits, then the lane and list, so no two lists' keys tie.
template <int N, int R>
__device__ __forceinline__ void Bf16Keys(const uint32_t (&col)[N], int gl, uint32_t (&a)[R],
                                         uint32_t (&b)[R]) {
  const uint32_t tag = 0x80000000u | static_cast<uint32_t>(gl) << 1;
#pragma unroll
  for (int i = 0; i < R; ++i) {
    a[i] = tag | (col[i] & 0xffffu) << 4;
    b[i] = tag | 1u | (col[i] >> 16) << 4;
  }
}

// The fast path's k-th key: the tournament over each lane's top R of its two columns.
template <int D, int R>
__device__ __forceinline__ uint32_t FastKthKey(const Bf16Lane<D>& x, int k, int gl, bool* emptied) {
  uint32_t col[RowLayout<D>::kColumnKeys];
#pragma unroll
  for (int i = 0; i < RowLayout<D>::kColumnKeys; ++i) col[i] = Bf16x2Abs(x.w[i]);
  uint32_t top[R], a[R], b[R];
  TopOf<U16x2Order>(col, top);
  Bf16Keys(top, gl, a, b);
  return PopKth<RowLayout<D>::kGroupLanes, R, true>(a, b, k, gl, emptied);
}
template <int D, int R>
__device__ __forceinline__ uint32_t FastKthKey(const FloatLane<D>& x, int k, int gl,
                                               bool* emptied) {
  constexpr int N = RowLayout<D>::kChannels / 2;
  uint32_t ka[N], kb[N];
#pragma unroll
  for (int i = 0; i < N; ++i) {
    ka[i] = (__float_as_uint(x.v[i]) & 0x7fffffffu) + 1u;
    kb[i] = (__float_as_uint(x.v[N + i]) & 0x7fffffffu) + 1u;
  }
  uint32_t a[R], b[R];
  TopOf<U32Order>(ka, a);
  TopOf<U32Order>(kb, b);
  return PopKth<RowLayout<D>::kGroupLanes, R, false>(a, b, k, gl, emptied);
}

// The k-th key over fully sorted columns (cannot run dry).
template <int D>
__device__ __forceinline__ uint32_t SortedKthKey(const Bf16Lane<D>& x, int k, int gl) {
  constexpr int N = RowLayout<D>::kColumnKeys;
  uint32_t col[N];
#pragma unroll
  for (int i = 0; i < N; ++i) col[i] = x.w[i] & 0x7fff7fffu;
  SortAll<U16x2Order>(col);
  uint32_t a[N], b[N];
  Bf16Keys(col, gl, a, b);
  bool unused;
  return PopKth<RowLayout<D>::kGroupLanes, N, true>(a, b, k, gl, &unused);
}
template <int D>
__device__ __forceinline__ uint32_t SortedKthKey(const FloatLane<D>& x, int k, int gl) {
  constexpr int N = RowLayout<D>::kChannels / 2;
  uint32_t ka[N], kb[N];
#pragma unroll
  for (int i = 0; i < N; ++i) {
    ka[i] = (__float_as_uint(x.v[i]) & 0x7fffffffu) + 1u;
    kb[i] = (__float_as_uint(x.v[N + i]) & 0x7fffffffu) + 1u;
  }
  SortAll<U32Order>(ka);
  SortAll<U32Order>(kb);
  bool unused;
  return PopKth<RowLayout<D>::kGroupLanes, N, false>(ka, kb, k, gl, &unused);
}

// ---- Clip threshold of packed bf16 rows: merging networks ----
// The row's 2G columns (lane, low or high half: 16 values each) keep their top Rc in sorted lists
// (sorting networks on packed magnitudes, two columns per instruction); the group's lists are
// merged by xor shuffles (lists of the same half merge, both halves at once) into the row's top
// R = 2 Rc, then the two halves' lists into one; tau is its entry k - 1. The lists hold every
// value above tau unless a column holds more than Rc of them: then the column's last entry is
// above the result (a tie with it is harmless: unlisted values are <= it), and the row repeats
// with longer lists. An order statistic of a multiset is the same whatever finds it, so no keys,
// tags or tie rules are needed (bf16 magnitudes of one row, not NaN, order as their bits).

// Bits of the k-th largest |y| (1 <= k <= 2 Rc) of the group's row from lists of Rc per column;
// *dry when a column of this lane may hold more above it than its list does. The short lists
// (Rc = 4) sort their first 8 words with VIMNMX and the other 8 with HMNMX2 (same order): both
// issue at half rate on the H200, and this split measured 2 us faster at D = 128 than HMNMX2
// alone (bench/NOTES.md "Demotion v4"; apparently register allocation: that build spilled).
// The K-th largest (K compile-time, 1 <= K <= R) of the union of two descending lists, the low
// halves of m (a) and the high halves (b): the top K of the union take j + 1 entries of one list
// and K - 1 - j of the other, and its smallest is the smaller of the two last taken, so it is the
// largest such minimum over the splits (each is a lower bound): a_{K-1}, b_{K-1} and
// min(a_j, b_{K-2-j}) for j < K - 1. Against m with its halves swapped, the low half of
// min(m[j], swap(m[K-2-j])) is split j and its high half split K-2-j, so half of the splits
// cover all. Returned in both halves.
template <int K, int R>
__device__ __forceinline__ uint32_t KthOfHalves(const uint32_t (&m)[R]) {
  static_assert(1 <= K && K <= R);
  uint32_t t = m[K - 1];
#pragma unroll
  for (int j = 0; 2 * j <= K - 2; ++j) {
    t = Bf16x2Max(t, Bf16x2Min(m[j], __byte_perm(m[K - 2 - j], 0u, 0x1032)));
  }
  return Bf16x2Max(t, __byte_perm(t, 0u, 0x1032));
}

// kK: k as a compile-time constant (the served ratios' k, dispatched by the launcher), or 0 (k at
// run time). With kK the two halves' lists are not merged: KthOfHalves reads the k-th entry of
// their union, and the merges before it keep only the top kK entries (the compiler drops the
// comparators that feed only the rest).
template <int D, int Rc, int kK = 0>
__device__ __forceinline__ uint32_t MergedKthBits(const Bf16Lane<D>& x, int k, bool* dry) {
  constexpr int N = RowLayout<D>::kColumnKeys;
  constexpr int R = 2 * Rc;
  static_assert(kK != 0 || (R & (R - 1)) == 0, "run-time k merges lists of a power of two");
  uint32_t col[N];
#pragma unroll
  for (int i = 0; i < N; ++i) col[i] = Bf16x2Abs(x.w[i]);
  uint32_t c[Rc];
  if constexpr (Rc == 4) {
    uint32_t b[4];
    Top4Of8<U16x2Order>(col, 0, c);
    Top4Of8<Bf16x2Order>(col, 8, b);
#pragma unroll
    for (int i = 0; i < 4; ++i) c[i] = Bf16x2Order::Max(c[i], b[3 - i]);
    BitonicClean<Bf16x2Order>(c, 4);
  } else {
    TopOf<Bf16x2Order>(col, c);
  }
  uint32_t o[Rc];
#pragma unroll
  for (int i = 0; i < Rc; ++i) o[i] = __shfl_xor_sync(kFullMask, c[i], 1);
  uint32_t m[R];
  MergeAll<Bf16x2Order>(c, o, m);  // the two lanes' columns of each half, all of them
  uint32_t t;
  if constexpr (kK != 0) {
    // Only the top kK of each list matter from here on.
    uint32_t top[kK];
    if constexpr (RowLayout<D>::kGroupLanes == 4) {
      uint32_t p[kK];
#pragma unroll
      for (int i = 0; i < kK; ++i) p[i] = __shfl_xor_sync(kFullMask, m[i], 2);
      MergeTopK<Bf16x2Order, kK>(m, p, top);
    } else {
#pragma unroll
      for (int i = 0; i < kK; ++i) top[i] = m[i];
    }
    t = KthOfHalves<kK>(top) & 0xffffu;
  } else {
    if constexpr (RowLayout<D>::kGroupLanes == 4) {
      uint32_t p[R];
#pragma unroll
      for (int i = 0; i < R; ++i) p[i] = __shfl_xor_sync(kFullMask, m[i], 2);
      MergeTop<Bf16x2Order>(m, p);
    }
    // Low and high halves: each half of h is the other half of m.
    uint32_t h[R];
#pragma unroll
    for (int i = 0; i < R; ++i) h[i] = __byte_perm(m[i], 0u, 0x1032);
    MergeTop<Bf16x2Order>(m, h);
    t = m[0];
#pragma unroll
    for (int i = 1; i < R; ++i) t = i < k ? m[i] : t;
    t &= 0xffffu;
  }
  *dry = Bf16x2GtMask(c[Rc - 1], t | t << 16) != 0u;
  return t;
}

template <int D, int kK = 0>
__device__ __forceinline__ float ClipThreshold(const Bf16Lane<D>& x, int k, const RowGroup<D>& rg) {
  // D = 128: short lists while the chance that a column holds Rc of the k - 1 largest stays
  // small (< 1% of rows at k = 6; never when k <= Rc), then long ones, then fully sorted lists.
  // D = 64, k <= 8 (both served ratios): the tournament over top-4 / top-6 lists (PopKth), which
  // measured faster there (the H200, bench/NOTES.md "Demotion v4"); then sorted lists.
  // A group redoes its row when one of its lanes' lists may have run dry. `dry_lanes` (all
  // groups' such lanes) is tested first, warp-wide: rows almost never redo, so the group's share
  // (`redo`, through rg.mask) is worked out only on those paths (3 half-rate instructions a unit).
  constexpr bool kTournament = RowLayout<D>::kGroupLanes == 2;
  // V's ratio at D = 128 (k = 11, compile-time): lists of 6 first, the long lists only when one
  // ran dry (a column holding 6 of the 10 largest: ~0.4% of rows at random, 3% of units).
  constexpr bool kMediumLists = !kTournament && kK >= 7 && kK <= 12;
  uint32_t bits = 0;
  bool redo = true;
  uint32_t dry_lanes = kFullMask;  // no fast path: every row takes the sorted lists
  if (kTournament && k <= 8) {
    bool dry;
    const uint32_t key = k <= 4 ? FastKthKey<D, 4>(x, k, rg.gl, &dry)
                                : FastKthKey<D, 6>(x, k, rg.gl, &dry);
    bits = (key >> 4) & 0x7fffu;
    dry_lanes = __ballot_sync(kFullMask, dry);
  } else if (!kTournament && k <= 6) {
    bool dry;
    bits = MergedKthBits<D, 4, (kK >= 1 && kK <= 6 ? kK : 0)>(x, k, &dry);
    dry_lanes = __ballot_sync(kFullMask, dry);
  } else {
    if constexpr (kMediumLists) {
      bool dry;
      bits = MergedKthBits<D, 6, kK>(x, k, &dry);
      dry_lanes = __ballot_sync(kFullMask, dry);
    }
  }
  if (dry_lanes == 0u) return __uint_as_float(bits << 16);
  redo = dry_lanes == kFullMask || (dry_lanes & rg.mask) != 0u;  // (true without a fast path)
  if (k <= 16 && !(kTournament && k <= 8)) {
    bool dry;
    const uint32_t long_bits = MergedKthBits<D, 8, (kK >= 1 && kK <= 16 ? kK : 0)>(x, k, &dry);
    const uint32_t long_dry_lanes = __ballot_sync(kFullMask, dry);
    if (redo) bits = long_bits;
    if (long_dry_lanes == 0u) return __uint_as_float(bits << 16);
    if (redo) redo = (long_dry_lanes & rg.mask) != 0u;
  }
  if (__any_sync(kFullMask, redo)) {
    const uint32_t sorted_key = SortedKthKey<D>(x, k, rg.gl);
    if (redo) bits = (sorted_key >> 4) & 0x7fffu;
  }
  return __uint_as_float(bits << 16);
}

__device__ __forceinline__ float KeyMagnitude(uint32_t key, bool bf16_keys) {
  return bf16_keys ? __uint_as_float(((key >> 4) & 0x7fffu) << 16) : __uint_as_float(key - 1u);
}

// Float rows (f32 input, rotated rows): tau = the k-th largest |y| of the group's row (k uniform
// over the warp). Fast path: a tournament over each lane's top R of its two lists (R by k,
// ListEntriesFor); a group whose lists ran dry repeats with fully sorted lists.
template <int D, int kK = 0>
__device__ __forceinline__ float ClipThreshold(const FloatLane<D>& x, int k,
                                               const RowGroup<D>& rg) {
  uint32_t key = 0;
  bool emptied = true;
  const int entries = ListEntriesFor<D>(k);
  if (entries == 4) {
    key = FastKthKey<D, 4>(x, k, rg.gl, &emptied);
  } else if (entries == 6) {
    key = FastKthKey<D, 6>(x, k, rg.gl, &emptied);
  }
  const bool redo = (__ballot_sync(kFullMask, emptied) & rg.mask) != 0u;
  if (__any_sync(kFullMask, redo)) {
    const uint32_t sorted_key = SortedKthKey<D>(x, k, rg.gl);
    if (redo) key = sorted_key;
  }
  return KeyMagnitude(key, false);
}

// ---- Params ----

struct MinMax {
  float mn, mx;
};
template <int D>
__device__ __forceinline__ MinMax RowMinMax(const Bf16Lane<D>& x) {
  uint32_t mn = x.w[0], mx = x.w[0];
#pragma unroll
  for (int i = 1; i < RowLayout<D>::kWords; ++i) {
    mn = Bf16x2Min(mn, x.w[i]);
    mx = Bf16x2Max(mx, x.w[i]);
  }
  constexpr int G = RowLayout<D>::kGroupLanes;
  return {GroupMin<G>(fminf(LoBf16(mn), HiBf16(mn))), GroupMax<G>(fmaxf(LoBf16(mx), HiBf16(mx)))};
}
template <int D>
__device__ __forceinline__ MinMax RowMinMax(const FloatLane<D>& x) {
  float mn = x.v[0], mx = x.v[0];
#pragma unroll
  for (int i = 1; i < RowLayout<D>::kChannels; ++i) {
    mn = fminf(mn, x.v[i]);
    mx = fmaxf(mx, x.v[i]);
  }
  constexpr int G = RowLayout<D>::kGroupLanes;
  return {GroupMin<G>(mn), GroupMax<G>(mx)};
}

// Bits of the lane's value at chunk q, position b (sign in bit 31 when read as a float).
template <int D>
__device__ __forceinline__ uint32_t ValueBits(const Bf16Lane<D>& x, int q, int b) {
  return (x.w[q * RowLayout<D>::kChunk / 2 + b / 2] >> (16 * (b % 2))) << 16;
}
template <int D>
__device__ __forceinline__ uint32_t ValueBits(const FloatLane<D>& x, int q, int b) {
  return __float_as_uint(x.v[q * RowLayout<D>::kChunk + b]);
}

// Row params from the raw values: min/max, clipped to [-tau, tau] when `clip`. Of equal minima the
// reference keeps the first in channel order; only +0 and -0 differ while comparing equal, and
// the sign reaches the stored fp16 min, so a zero minimum takes the sign of the first value whose
// clipped value is a zero (with tau = 0 every value clips to a zero of its own sign).
template <int D, int kK = 0, class Lane>
__device__ __forceinline__ RowStats RowStatsOf(const Lane& x, bool clip, int k,
                                               const RowGroup<D>& rg) {
  const float tau = clip ? ClipThreshold<D, kK>(x, k, rg) : 0.0f;
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
    for (int q = 0; q < 4; ++q) {
#pragma unroll
      for (int b = 0; b < RowLayout<D>::kChunk; ++b) {
        const uint32_t bits = ValueBits(x, q, b);
        const uint32_t at =
            static_cast<uint32_t>(RowLayout<D>::Channel(rg.gl, q, b)) << 1 | bits >> 31;
        if (all_zero || (bits & 0x7fffffffu) == 0u) first = min(first, at);
      }
    }
    first = GroupMinU<RowLayout<D>::kGroupLanes>(first);
    if (r.mn == 0.0f) r.mn = (first & 1u) != 0u ? -0.0f : 0.0f;
  }
  return {tau, quant_device::ParamsOf(r.mn, r.mx)};
}

// ---- Codes ----

// Bound j of the row in the form PackCodeBytes compares with: for bf16 rows (T = uint32_t) the
// bf16-valued bound (RowCodeBoundBf16) as a packed pair, for two compares per instruction; for
// float rows the float bound.
__device__ __forceinline__ uint32_t BoundOperand(int j, const RowStats& st, bool clip, uint32_t) {
  const float b = int2_bounds::RowCodeBoundBf16(j, st.gp.s, st.gp.m, clip, st.tau);
  return __byte_perm(__float_as_uint(b), 0u, 0x3232);  // its high half, twice
}
__device__ __forceinline__ float BoundOperand(int j, const RowStats& st, bool clip, float) {
  return int2_bounds::RowCodeBound(j, st.gp.s, st.gp.m, clip, st.tau);
}

// The three code bounds of the lane's row, each computed once: every lane of a group holds its
// row's stats (the group reductions leave them in all G lanes), so bound j is computed by the
// group's lane (j - 1) % G in round (j - 1) / G (one round at D = 128, two at D = 64; the lanes
// past bound 3 repeat it), already in the form PackCodeBytes compares with (a packed bf16 pair
// for bf16 rows, T = uint32_t, else the float), then each lane fetches its row's three.
// kGroupWidth: fetch by shuffles of width G (lane i % G of the group, no lane arithmetic in the
// loop) instead of from lane - gl + i % G. Chosen per build by register pressure: the width form
// saves ~4 half-rate instructions a unit, but made the D = 64 and no-clip builds spill.
template <int D, bool kGroupWidth = false, class T>
__device__ __forceinline__ void WarpCodeBounds(const RowStats& st, bool clip, int lane,
                                               const RowGroup<D>& rg, T (&b)[3]) {
  constexpr int G = RowLayout<D>::kGroupLanes;
  constexpr int kRounds = (3 + G - 1) / G;
  T mine[kRounds];
#pragma unroll
  for (int round = 0; round < kRounds; ++round) {
    const int j = min(round * G + rg.gl, 2) + 1;
    mine[round] = BoundOperand(j, st, clip, T{});
  }
  const int group_lane0 = lane - rg.gl;
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    b[i] = kGroupWidth ? __shfl_sync(kFullMask, mine[i / G], i % G, G)
                       : __shfl_sync(kFullMask, mine[i / G], group_lane0 + i % G);
  }
}

// The lane's code bytes [8 gl, 8 gl + 8) of its row (byte j = codes of channels j, j + D/4,
// j + D/2, j + 3D/4 in bits 1:0, 3:2, 5:4, 7:6), little-endian in w. Codes:
// code(y) = sum_j [y >= bound j], bounds as packed bf16 pairs (BoundOperand).
// The three compares per two values give bf16 1.0 or 0.0 (HSET2, integer ALU), and the sums run
// on the FMA pipe (HFMA2), which the rest of the row pipeline leaves mostly idle: chunks 0 and 1
// add up to 128 + c0 + 4 c1, chunks 2 and 3 to 128 + c2 + 4 c3, integers up to 143 (exact in
// bf16), whose low mantissa bits are the byte's low and high nibble. This replaced a bit
// deposit per code bit (two compares, a bound select and two LOP3 per two values, all on the
// half-rate ALU; bench/NOTES.md "Demotion v6").
template <int D>
__device__ __forceinline__ void PackCodeBytes(const Bf16Lane<D>& x, const uint32_t (&b2)[3],
                                              uint32_t (&w)[RowLayout<D>::kChunk / 4]) {
  constexpr int kHalfChunk = RowLayout<D>::kChunk / 2;  // words per chunk
  const __nv_bfloat162 kOne = __float2bfloat162_rn(1.0f);
  const __nv_bfloat162 kFour = __float2bfloat162_rn(4.0f);
  const __nv_bfloat162 kBase = __float2bfloat162_rn(128.0f);  // 128 + n has n in bits 6:0
  uint32_t pairs[kHalfChunk];
#pragma unroll
  for (int i = 0; i < kHalfChunk; ++i) {
    uint32_t nibble[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // chunks 2 half and 2 half + 1
      __nv_bfloat162 sum = kBase;
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const __nv_bfloat162 v = AsBf16x2(x.w[(2 * half + c) * kHalfChunk + i]);
#pragma unroll
        for (int j = 0; j < 3; ++j) {
          sum = __hfma2(__hge2(v, AsBf16x2(b2[j])), c == 0 ? kOne : kFour, sum);
        }
      }
      nibble[half] = Bf16x2Bits(sum);
    }
    // Byte 0 of each half: the low nibble from chunks 0/1, the high one from chunks 2/3 (the
    // other bytes are not read below).
    constexpr uint32_t kLow = 0x000f000fu;
    // (nibble[0] & kLow) | (nibble[1] << 4 & ~kLow) as one bit select: written as C++, ptxas
    // masked both sides apart (2 LOP3 where one does).
    asm("lop3.b32 %0, %1, %2, %3, 0xE4;"
        : "=r"(pairs[i])
        : "r"(nibble[0]), "r"(nibble[1] << 4), "n"(kLow));
  }
  // Byte 0 of each half holds the byte of positions 2i, 2i + 1.
#pragma unroll
  for (int k = 0; k < RowLayout<D>::kChunk / 4; ++k) {
    w[k] = __byte_perm(pairs[2 * k], pairs[2 * k + 1], 0x6420);
  }
}
template <int D>
__device__ __forceinline__ void PackCodeBytes(const FloatLane<D>& x, const float (&bound)[3],
                                              uint32_t (&w)[RowLayout<D>::kChunk / 4]) {
#pragma unroll
  for (int k = 0; k < RowLayout<D>::kChunk / 4; ++k) w[k] = 0;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
#pragma unroll
    for (int b = 0; b < RowLayout<D>::kChunk; ++b) {
      const float y = x.v[q * RowLayout<D>::kChunk + b];
      const uint32_t code = static_cast<uint32_t>(y >= bound[0]) +
                            static_cast<uint32_t>(y >= bound[1]) +
                            static_cast<uint32_t>(y >= bound[2]);
      w[b / 4] |= code << (8 * (b % 4) + 2 * q);
    }
  }
}

}  // namespace oscarkv::kernels::int2_rows

#endif  // OSCARKV_KERNELS_QUANT_INT2_ROW_GROUP_CUH_

// Decode attention over the paged three-tier cache on the GPU (see decode_attention_cuda.h).
// bench/NOTES.md ("GPU decode attention and demotion") has the versions and their measurements.
//
// Fragment bookkeeping (lane l, r = l / 4, p = l % 4; mma.sync layouts):
//   scores  S^T[16 tokens x 8 columns] = K[16 x D] . Q^T[D x 8]: A rows are tokens (row r = row r
//           of the tile's first page, row r + 8 = row r of its second page); columns 2h, 2h + 1
//           belong to query head h (<= 4 heads per CTA), so lane (r, p) holds head p. INT2:
//           m16n8k32 u8 x s8 integer MMAs, A = code bytes masked in place (Int2Loader::KFragI),
//           the columns q's high and low byte (exact int32 sums); BF16: m16n8k16 with q in both
//           columns. The reduction order over D is free, so each loader picks the channel
//           permutation (QDimI, QDim) that matches the bytes a lane loads, and Q is permuted the
//           same way.
//   P.V     O^T[D x 8] = V^T[D x 16 tokens] . P^T[16 tokens x 8]: column 2h + k holds head h's
//           weights of page k's rows (zero for the other page), from the scores by one
//           movmatrix.trans per tile (WarpSoftmax::Step); output channel of (m-tile, row) is
//           OutDim, and a head's two page columns are summed once, in the epilogue.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <mutex>

#include "kernels/attention/decode_attention.h"
#include "kernels/attention/decode_attention_cuda.h"
#include "kernels/common/cuda_utils.cuh"

namespace oscarkv::kernels {
namespace {

using namespace oscarkv::kernels::cuda;  // NOLINT: device helpers

// Warps of a stage-1 CTA: kInt2W warps share the INT2 tiles of a split (each a contiguous range
// through its own cp.async ring); with kBf16W one more warp attends the BF16 share of a fused
// split (Tier::kInt2WithBf16) while the others start on INT2 tiles at once. kPerSm: the CTAs per
// SM its __launch_bounds__ promise (the register budget).
template <int kInt2W, bool kBf16W, int kPerSm>
struct CtaLayout {
  static constexpr int kCtasPerSm = kPerSm;
  static constexpr int kInt2Warps = kInt2W;
  static constexpr bool kBf16Warp = kBf16W;
  static constexpr int kWarps = kInt2W + (kBf16W ? 1 : 0);
  static constexpr int kThreads = 32 * kWarps;
};
using PlainCta = CtaLayout<4, false, kDecodeStage1CtasPerSm>;
// Launches of at most 2 CTAs per SM. H200, same runs, B=32 8k D=128: 62.9 us (then 59.9 without
// the share's L2 prefetch); 5 INT2 warps + 1: 67.8 us; 4 + 2 BF16 warps: 65.9 us (and +1.1 us
// at B=1 128k, where both idle: every 6-warp layout measured slower). B=1 128k D=128 with 4 / 5
// / 6 INT2 warps: 30.00 / 33.98 / 36.82 us (bench/NOTES.md "Session 16").
using Bf16WarpCta = CtaLayout<4, true, 2>;
// The same warps in 128 registers, for launches of at most 3 CTAs per SM. H200, same run, against
// 3 plain CTAs per SM: D=128 B=24 8k 55.26 -> 48.42 us, B=12 32k 83.84 -> 80.45, B=24 32k 155.10
// -> 149.95; D=64 B=32 8k 20.69 -> 19.89, B=48 8k 32.14 -> 29.91 (bench/NOTES.md "Session 16",
// v18). Not for 2 per SM: there 3 would fit and overlapped calls stack a third CTA on some SMs
// (D=128 B=1 128k 29.89 -> 38.38 us).
using Bf16Warp3Cta = CtaLayout<4, true, 3>;
constexpr int kMaxHeadsPerCta = 4;  // a lane's head: lane % 4 (WarpSoftmax)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
// Softmax weights 2^(s - m) may reach 2^kRescaleSlack before the reference max m moves. The
// INT2 P.V packs p times the token's V scale into fp16, so this bounds V scales to 65504 / 2^8
// = 255 (a per-token V range of 766): on 2048 tokens of the default model (SmolLM2-135M) the
// largest scale is 10.5 unrotated and at most 23.3 after any rotation (bench/kernels/
// v_scale_bound.py). A model with larger V needs a smaller slack (bench/NOTES.md "v13 lazy
// rescale").
constexpr float kRescaleSlack = 8.0f;

// ---------------------------------------------------------------------------------------------
// INT2 page loader (kvformat kInt2PerToken segments of 8 tokens, K then V, decode_attention.h).
template <int D>
struct Int2Loader {
  static constexpr int kKW = D / 64;  // u32 words of K codes a lane reads per token
  static constexpr int kMi = D / 32;  // m16n8k32 integer MMAs per tile for the scores
  static constexpr bool kHalfPv = true;
  static constexpr bool kIntQk = true;
  static constexpr bool kHasCorr = true;
  // How V codes reach the P.V operands, whose registers each pair one code byte of tokens 2p and
  // 2p + 1 (the low byte of each fp16 half). D = 64: one ldmatrix.trans per tile hands lane
  // (r, p) byte pair r of both tokens in one word (a shift serves the odd byte); D = 128: words
  // of each token and a byte permute per operand pair. H200, same run, ldmatrix at D = 64: B=1
  // 128k -3.1%, B=8 32k -4.8%, B=32 8k -3.7%; at D = 128 (one x4 or two x2 per tile, V loaded
  // late or early): B=1 128k +2.1..3.2%, 32k +4.1..6.2%, B=32 8k and B=8 32k -0.8..+1.8%
  // (bench/NOTES.md "Session 20").
  static constexpr bool kVTrans = D == 64;
  struct Raw {
    uint32_t k0[kKW], k1[kKW];  // K codes: page 0 row r, page 1 row r (bytes 4*kKW*p ...)
    // V codes of page 0 / page 1: D = 128, word r (bytes 4r..4r+3) of rows 2p, 2p + 1; D = 64,
    // [page][0] holds bytes 2r, 2r + 1 of rows 2p (low half) and 2p + 1 (high half).
    uint32_t v[2][2];
    uint32_t kp0, kp1, vp0, vp1;  // Int2Params of row r of page 0 / 1 (scale lo, min hi)
  };
  // A tile's fragments from the two page units staged in shared memory (u0, u1; the INT2 tier is
  // always read through the cp.async ring), in two parts: K codes + K params for the scores, then
  // V codes + V params for P.V (loaded late, so that a 4-tile step at D = 128 fits in 128
  // registers).
  __device__ static void LoadSharedK(Raw& raw, const uint8_t* u0, const uint8_t* u1, int lane) {
    const int r = lane >> 2, p = lane & 3;
    constexpr int kRow = D / 4;
    constexpr int kKp = kPageTokens * kRow;
    const int koff = r * kRow + p * 4 * kKW;
    if constexpr (kKW == 2) {
      const uint2 a = *reinterpret_cast<const uint2*>(u0 + koff);
      const uint2 b = *reinterpret_cast<const uint2*>(u1 + koff);
      raw.k0[0] = a.x; raw.k0[1] = a.y; raw.k1[0] = b.x; raw.k1[1] = b.y;
    } else {
      raw.k0[0] = *reinterpret_cast<const uint32_t*>(u0 + koff);
      raw.k1[0] = *reinterpret_cast<const uint32_t*>(u1 + koff);
    }
    raw.kp0 = *reinterpret_cast<const uint32_t*>(u0 + kKp + 4 * r);
    raw.kp1 = *reinterpret_cast<const uint32_t*>(u1 + kKp + 4 * r);
  }
  __device__ static void LoadSharedV(Raw& raw, const uint8_t* u0, const uint8_t* u1, int lane) {
    const int r = lane >> 2, p = lane & 3;
    constexpr int kRow = D / 4;
    constexpr int kKp = kPageTokens * kRow;
    constexpr int kV = kKp + kPageTokens * 4;
    constexpr int kVp = kV + kKp;
    if constexpr (kVTrans) {  // matrix i = lane / 8 % 2: page i's 8 rows of 16 code bytes
      const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(u0)) +
                         ((lane >> 3) & 1) * static_cast<uint32_t>(u1 - u0) + kV +
                         (lane & 7) * kRow;
      LoadMatrixX2Trans(a, raw.v[0][0], raw.v[1][0]);
    } else {
      const int voff = kV + (2 * p) * kRow + 4 * r;
      raw.v[0][0] = *reinterpret_cast<const uint32_t*>(u0 + voff);
      raw.v[0][1] = *reinterpret_cast<const uint32_t*>(u0 + voff + kRow);
      raw.v[1][0] = *reinterpret_cast<const uint32_t*>(u1 + voff);
      raw.v[1][1] = *reinterpret_cast<const uint32_t*>(u1 + voff + kRow);
    }
    raw.vp0 = *reinterpret_cast<const uint32_t*>(u0 + kVp + 4 * r);
    raw.vp1 = *reinterpret_cast<const uint32_t*>(u1 + kVp + 4 * r);
  }
  __device__ static void LoadShared(Raw& raw, const uint8_t* u0, const uint8_t* u1, int lane) {
    LoadSharedK(raw, u0, u1, lane);
    LoadSharedV(raw, u0, u1, lane);
  }
  // The scores' A operand straight from the code bytes: one AND per register keeps code position
  // pos of four bytes as u8 values c * 4^pos (no shifts). D = 128: IMMA mi takes position mi of
  // both words (k 0..15: word 0, k 16..31: word 1); D = 64: positions 2 mi (k 0..15) and 2 mi + 1
  // (k 16..31) of the one word. IMMAs of positions 0-1 and of 2-3 accumulate apart (QuantizeQ).
  __device__ static void KFragI(const Raw& raw, int mi, uint32_t (&a)[4]) {
    if constexpr (D == 128) {
      const uint32_t m = 0x03030303u << (2 * mi);
      a[0] = raw.k0[0] & m; a[1] = raw.k1[0] & m; a[2] = raw.k0[1] & m; a[3] = raw.k1[1] & m;
    } else {
      const uint32_t m0 = 0x03030303u << (4 * mi), m1 = m0 << 2;
      a[0] = raw.k0[0] & m0; a[1] = raw.k1[0] & m0; a[2] = raw.k0[0] & m1; a[3] = raw.k1[0] & m1;
    }
  }
  // Channel of k index kk (0..31) of IMMA mi for the lane quad (kk % 16) / 4 that loaded it: code
  // position pos of byte b holds channel b + pos * D / 4 (the quartered split, int2_block.h).
  __device__ static int QDimI(int mi, int kk) {
    const int q = (kk & 15) >> 2, j = kk & 3, h = kk >> 4;
    const int w = D == 128 ? h : 0, pos = D == 128 ? mi : 2 * mi + h;
    return q * 4 * kKW + 4 * w + j + pos * (D / 4);
  }
  // Whether channel d sits at an odd code position (1 or 3: codes 4c and 64c).
  __device__ static bool OddPosition(int d) { return ((d / (D / 4)) & 1) != 0; }
  // score = a * x + b * e_h with x = sum_d Q_d c_d, sq = sc / S_h (q = Q / S_h, QuantizeQ) and
  // e_h = sc * sum(q_h).
  __device__ static void ScoreAB(const Raw& raw, int page, float sq, float& a, float& b) {
    const uint32_t kp = page == 0 ? raw.kp0 : raw.kp1;
    a = HalfLoToFloat(kp) * sq;
    b = HalfHiToFloat(kp);
  }
  // V scale as fp16 in both halves (the P.V weights are fp16(p) * scale in one HMUL2) and the
  // per-token additive term (corr += p * add).
  __device__ static void VParams(const Raw& raw, int page, uint32_t& scale2, float& add) {
    const uint32_t vp = page == 0 ? raw.vp0 : raw.vp1;
    scale2 = vp;  // the low half, broadcast by the HMUL2's operand selector
    add = HalfHiToFloat(vp);
  }
  // The P.V accumulator of m-tile mt holds 2^(2q-24) sum_t w_t c_t (q: the m-tile's quarter).
  __device__ static float OutScale(int mt) {
    const int q = D == 128 ? (mt >> 1) : mt;
    return 16777216.0f / static_cast<float>(1 << (2 * q));
  }
  __device__ static int OutDim(int mt, int row) {
    const int r = row & 7, hi = row >> 3;
    if constexpr (D == 128) {
      return 4 * r + 2 * (mt & 1) + hi + 32 * (mt >> 1);
    } else {
      return 2 * r + hi + 16 * mt;
    }
  }
  // One AND per operand register keeps quarter q's two bits of each half's low byte, read as the
  // fp16 subnormal c * 4^q * 2^-24. D = 64: rows r + 8 take the ldmatrix word's odd bytes,
  // shifted down first (bits 10-15 of a half are the fp16's exponent and sign), one shift per
  // word for all quarters.
  __device__ static void VFrag(const Raw& raw, int mt, int, uint32_t (&a)[4]) {
    if constexpr (kVTrans) {
      const uint32_t m = 0x00030003u << (2 * mt);
      a[0] = raw.v[0][0] & m;
      a[1] = (raw.v[0][0] >> 8) & m;
      a[2] = raw.v[1][0] & m;
      a[3] = (raw.v[1][0] >> 8) & m;
    } else {
      const int b0 = 2 * (mt & 1);
      const uint32_t m = 0x00030003u << (2 * (mt >> 1));
      a[0] = BytesTo02(raw.v[0][0], raw.v[0][1], b0) & m;
      a[1] = BytesTo02(raw.v[0][0], raw.v[0][1], b0 + 1) & m;
      a[2] = BytesTo02(raw.v[1][0], raw.v[1][1], b0) & m;
      a[3] = BytesTo02(raw.v[1][0], raw.v[1][1], b0 + 1) & m;
    }
  }
  __device__ static void ZeroInvalidV(Raw&, int, int, int) {}
};

// ---------------------------------------------------------------------------------------------
// BF16 page loader (two kBf16Rows segments of 8 tokens, K then V).
template <int D>
struct Bf16Loader {
  static constexpr int kKW = D / 8;   // u32 words of K a lane reads per token (D/4 channels)
  static constexpr int kVW = D / 16;  // u32 words of V a lane reads per token (D/8 channels)
  static constexpr bool kHalfPv = false;
  static constexpr bool kIntQk = false;
  static constexpr bool kHasCorr = false;
  __device__ static float RoundQ(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
  __device__ static float OutScale(int) { return 1.0f; }
  struct Raw {
    uint32_t k0[kKW], k1[kKW];
    uint32_t v[2][2][kVW];  // [page][row 2p / 2p+1][word]
  };
  __device__ static void Load(Raw& raw, const uint8_t* u0, const uint8_t* u1, int lane) {
    const int r = lane >> 2, p = lane & 3;
    constexpr int kRow = D * 2;
    constexpr int kV = kPageTokens * kRow;
    const int koff = r * kRow + p * (D / 2);
#pragma unroll
    for (int i = 0; i < kKW / 4; ++i) {
      const uint4 a = LoadStream(reinterpret_cast<const uint4*>(u0 + koff) + i);
      const uint4 b = LoadStream(reinterpret_cast<const uint4*>(u1 + koff) + i);
      raw.k0[4 * i] = a.x; raw.k0[4 * i + 1] = a.y; raw.k0[4 * i + 2] = a.z; raw.k0[4 * i + 3] = a.w;
      raw.k1[4 * i] = b.x; raw.k1[4 * i + 1] = b.y; raw.k1[4 * i + 2] = b.z; raw.k1[4 * i + 3] = b.w;
    }
    const int voff = kV + (2 * p) * kRow + r * (D / 4);
#pragma unroll
    for (int pg = 0; pg < 2; ++pg) {
      const uint8_t* u = pg == 0 ? u0 : u1;
#pragma unroll
      for (int t = 0; t < 2; ++t) {
#pragma unroll
        for (int i = 0; i < kVW / 4; ++i) {
          const uint4 a = LoadStream(reinterpret_cast<const uint4*>(u + voff + t * kRow) + i);
          raw.v[pg][t][4 * i] = a.x; raw.v[pg][t][4 * i + 1] = a.y;
          raw.v[pg][t][4 * i + 2] = a.z; raw.v[pg][t][4 * i + 3] = a.w;
        }
      }
    }
  }
  __device__ static int QDim(int ks, int kk) {
    const int p = (kk & 7) >> 1;
    return p * (D / 4) + 4 * ks + (kk & 1) + 2 * (kk >> 3);
  }
  __device__ static void KFrag(const Raw& raw, int ks, uint32_t (&a)[4]) {
    a[0] = raw.k0[2 * ks];
    a[1] = raw.k1[2 * ks];
    a[2] = raw.k0[2 * ks + 1];
    a[3] = raw.k1[2 * ks + 1];
  }
  __device__ static void ScoreAB(const Raw&, int, float sc, float& a, float& b) {
    a = sc;
    b = 0.0f;
  }
  __device__ static void VParams(const Raw&, int, float& mul, float& add) {
    mul = 1.0f;
    add = 0.0f;
  }
  __device__ static int OutDim(int mt, int row) { return (D / 8) * (row & 7) + 2 * mt + (row >> 3); }
  __device__ static void VFrag(const Raw& raw, int mt, int, uint32_t (&a)[4]) {
    a[0] = __byte_perm(raw.v[0][0][mt], raw.v[0][1][mt], 0x5410);
    a[1] = __byte_perm(raw.v[0][0][mt], raw.v[0][1][mt], 0x7632);
    a[2] = __byte_perm(raw.v[1][0][mt], raw.v[1][1][mt], 0x5410);
    a[3] = __byte_perm(raw.v[1][0][mt], raw.v[1][1][mt], 0x7632);
  }
  // Rows past the tier's end may hold anything (NaN): zero their V so that 0 * V stays 0.
  __device__ static void ZeroInvalidV(Raw& raw, int tok0, int te, int lane) {
    const int p = lane & 3;
#pragma unroll
    for (int pg = 0; pg < 2; ++pg) {
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        const bool valid = tok0 + 8 * pg + 2 * p + t < te;
#pragma unroll
        for (int i = 0; i < kVW; ++i) raw.v[pg][t][i] = valid ? raw.v[pg][t][i] : 0u;
      }
    }
  }
};

// cp.async of 16 bytes to a shared-memory address given as a 32-bit shared-window offset.
__device__ __forceinline__ void CpAsync16Shared(uint32_t smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem));
}

// BF16 pages read inside an INT2 split (Tier::kInt2WithBf16): K as Bf16Loader, V fragments in
// the INT2 loader's output-channel order (Int2Loader::OutDim), so that both tiers accumulate into
// the same P.V registers. Word mt of v[pg][t] holds channels OutDim(mt, r), OutDim(mt, r + 8) of
// row 2p + t of page pg; VFrag is Bf16Loader's.
template <int D>
struct Bf16IntoInt2Loader : Bf16Loader<D> {
  using Base = Bf16Loader<D>;
  using Raw = typename Base::Raw;
  __device__ static void Load(Raw& raw, const uint8_t* u0, const uint8_t* u1, int lane) {
    const int r = lane >> 2, p = lane & 3;
    constexpr int kRow = D * 2;
    constexpr int kV = kPageTokens * kRow;
    const int koff = r * kRow + p * (D / 2);
#pragma unroll
    for (int i = 0; i < Base::kKW / 4; ++i) {
      const uint4 a = LoadStream(reinterpret_cast<const uint4*>(u0 + koff) + i);
      const uint4 b = LoadStream(reinterpret_cast<const uint4*>(u1 + koff) + i);
      raw.k0[4 * i] = a.x; raw.k0[4 * i + 1] = a.y; raw.k0[4 * i + 2] = a.z; raw.k0[4 * i + 3] = a.w;
      raw.k1[4 * i] = b.x; raw.k1[4 * i + 1] = b.y; raw.k1[4 * i + 2] = b.z; raw.k1[4 * i + 3] = b.w;
    }
#pragma unroll
    for (int pg = 0; pg < 2; ++pg) {
      const uint8_t* u = pg == 0 ? u0 : u1;
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        const uint8_t* row = u + kV + (2 * p + t) * kRow;
        if constexpr (D == 128) {  // channels 4r + {0..3} + 32q: words 2q, 2q + 1
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const uint2 a = LoadStream(reinterpret_cast<const uint2*>(row + 8 * r + 64 * q));
            raw.v[pg][t][2 * q] = a.x;
            raw.v[pg][t][2 * q + 1] = a.y;
          }
        } else {  // channels 2r + {0,1} + 16mt: word mt
#pragma unroll
          for (int mt = 0; mt < 4; ++mt) {
            raw.v[pg][t][mt] = LoadStream(reinterpret_cast<const uint32_t*>(row) + r + 8 * mt);
          }
        }
      }
    }
  }
};

__device__ __forceinline__ float WarpMaxOverRows(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 4));
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 8));
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 16));
  return v;
}
__device__ __forceinline__ float WarpSumOverRows(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 4);
  v += __shfl_xor_sync(0xffffffffu, v, 8);
  v += __shfl_xor_sync(0xffffffffu, v, 16);
  return v;
}

constexpr int kStages = 8;  // INT2 tiles in flight per warp (cp.async ring)
// BF16 pages a split prefetches into L2 at its start (the sink + recent split: 32-41 pages; 128 KB
// at D = 128, so one wave of 528 CTAs asks for at most ~the L2 size).
constexpr int kBf16PrefetchPages = 32;

template <int D, class C>
struct SplitSmem {
  static constexpr int kWarps = C::kWarps;
  float q[kMaxHeadsPerCta][D];
  float qb[kMaxHeadsPerCta][D];  // q rounded to bf16 (the BF16 share of a fused INT2 split)
  float qsum[kMaxHeadsPerCta];  // sum over d of the rounded q of each head
  float qinv[kMaxHeadsPerCta];  // INT2: 1 / S of each head (QuantizeQ)
  float m[kWarps][kMaxHeadsPerCta];
  float l[kWarps][kMaxHeadsPerCta];
  float wt[kWarps][kMaxHeadsPerCta];  // epilogue: weight of each warp's partial, per head
  int merge[2];  // MergeInStage1IfLast: the row's first split (-1: not the last CTA), splits
  // 128-byte aligned: cp.async whose shared destination sits 16 bytes off a 128-byte line (the
  // global source is line-aligned) asks L2 for twice the sectors (H200, ncu of stage 1 at D=128
  // B=1 128k: 30.6 -> 34.8 us when the fields above came to 4368 bytes; bench/NOTES.md
  // "Session 17").
  union alignas(128) {  // the ring takes 16-byte cp.async and 8-byte loads
    float o[kWarps][kMaxHeadsPerCta][D + 4];                           // epilogue
    uint8_t ring[C::kInt2Warps][kStages][2 * Int2PageUnitBytes(D)];    // INT2 main loop
  } u;
};

struct NoFetchV {
  template <class Raw>
  __device__ __forceinline__ void operator()(int, Raw&) const {}
};

// Online-softmax state of one warp in RunSplit, and one softmax step over KT 16-token tiles for
// loader LL: token of row r of tile t is tok_base + (tile0 + t) * 16 + r; tokens at or past `tend`
// are masked out. A fused INT2 split runs steps of both loaders on the same state. Lane (r, p)
// holds query head p of rows r and r + 8 of every tile (all four lanes of a quad hold real heads at
// a GQA group of 4, three at 3; v18's pairs used two): the score MMA's columns 2h, 2h + 1 both
// belong to head h (INT2: the high and low byte of the integer q; BF16: q twice), and the P.V MMA's
// column 2h + k holds head h's weights of the tile's page k (rows 8k..8k+7; zero in the other
// rows), so that o[mt][k] and o[mt][2 + k] are page k's part of channels OutDim(mt, r) and
// OutDim(mt, r + 8).
template <int D>
struct WarpSoftmax {
  static constexpr int kMt = D / 16;  // k-steps of the BF16 score MMA and m-tiles of the P.V MMA
  float m = -INFINITY, l = 0.0f, c = 0.0f;
  float o[kMt][4];
  float e = 0.0f;  // sc_log2 * sum(q) of head p (the INT2 min term)
  float sq = 0.0f;  // sc_log2 / S of head p (INT2: q = Q / S, QuantizeQ)
  float sc_log2;
  int r, lane;
  __device__ __forceinline__ WarpSoftmax(float sc, int ln) : sc_log2(sc), r(ln >> 2), lane(ln) {
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) o[mt][0] = o[mt][1] = o[mt][2] = o[mt][3] = 0.0f;
  }
  // fetch_v(t, raw[t]) fills tile t's V codes and params just before its P.V (a no-op when
  // the caller loaded whole tiles). kMasked = false: the caller knows every token of the step
  // is before tend, and the step drops the masks.
  template <class LL, int KT, class FetchV = NoFetchV, bool kMasked = true>
  __device__ __forceinline__ void Step(typename LL::Raw (&raw)[KT], const uint32_t (&qf)[kMt][2],
                                       int tok_base, int tile0, int tend,
                                       const FetchV& fetch_v = FetchV()) {
    // Scores are taken relative to the reference max (ms, 0 before the first), folded into the
    // score FMA: one FFMA per score instead of a subtraction before each exp2.
    const float ms = m == -INFINITY ? 0.0f : m;
    float s[KT][2];
#pragma unroll
    for (int t = 0; t < KT; ++t) {
      float xa, xb;  // q.k of rows r, r + 8 (INT2: sum_d Q_d c_d, exact)
      if constexpr (LL::kIntQk) {
        int32_t lo[4] = {0, 0, 0, 0}, hi[4] = {0, 0, 0, 0};  // code positions 0-1 / 2-3
#pragma unroll
        for (int mi = 0; mi < LL::kMi; ++mi) {
          uint32_t a[4];
          LL::KFragI(raw[t], mi, a);
          MmaU8S8(mi < LL::kMi / 2 ? lo : hi, a, qf[mi][0], qf[mi][1]);
        }
        // hi holds 16x its share exactly; columns 2p, 2p + 1: q's high and low byte.
        xa = static_cast<float>(((lo[0] + (hi[0] >> 4)) << 8) + lo[1] + (hi[1] >> 4));
        xb = static_cast<float>(((lo[2] + (hi[2] >> 4)) << 8) + lo[3] + (hi[3] >> 4));
      } else {
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int ks = 0; ks < kMt; ++ks) {
          uint32_t a[4];
          LL::KFrag(raw[t], ks, a);
          MmaBf16(acc, a, qf[ks][0], qf[ks][1]);
        }
        xa = acc[0];
        xb = acc[2];
      }
      const int tok = tok_base + (tile0 + t) * 16 + r;
      float aa, ba, ab, bb;
      LL::ScoreAB(raw[t], 0, LL::kIntQk ? sq : sc_log2, aa, ba);
      LL::ScoreAB(raw[t], 1, LL::kIntQk ? sq : sc_log2, ab, bb);
      const bool va = !kMasked || tok < tend, vb = !kMasked || tok + 8 < tend;
      float ca = -ms, cb = -ms;
      if constexpr (LL::kHasCorr) {
        ca = fmaf(ba, e, ca);
        cb = fmaf(bb, e, cb);
      }
      s[t][0] = va ? fmaf(aa, xa, ca) : -INFINITY;
      s[t][1] = vb ? fmaf(ab, xb, cb) : -INFINITY;
    }
    // Lazy rescaling: the reference max m moves (a warp reduction and a rescale of o) only when
    // some score exceeds it by more than kRescaleSlack (log2 units); otherwise p = 2^(s - m) is
    // at most 2^kRescaleSlack (the fp16 bound this puts on V scales: at kRescaleSlack), and
    // lse = m + log2(l) holds for any reference m. The common step then takes one vote instead
    // of 3 shuffles.
    float mx = -INFINITY;
#pragma unroll
    for (int t = 0; t < KT; ++t) mx = fmaxf(mx, fmaxf(s[t][0], s[t][1]));
    // The old max relative to ms: 0, or -inf before the first score (any finite score moves it).
    const float old = m == -INFINITY ? -INFINITY : 0.0f;
    if (__any_sync(0xffffffffu, mx > old + kRescaleSlack)) {
      // The new max relative to ms; -inf while the head has seen no valid token (it stays so).
      const float d = WarpMaxOverRows(fmaxf(mx, old));
      const float al = m == -INFINITY ? 0.0f : Exp2(-d);
      m = ms + d;
      const float sh = d == -INFINITY ? 0.0f : d;
#pragma unroll
      for (int t = 0; t < KT; ++t) {
        s[t][0] -= sh;
        s[t][1] -= sh;
      }
      l *= al;
      c *= al;
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        o[mt][0] *= al; o[mt][1] *= al; o[mt][2] *= al; o[mt][3] *= al;
      }
    }
    const bool page1 = (r & 1) != 0;  // this lane's P.V column 2(r / 2) + (r & 1)
#pragma unroll
    for (int t = 0; t < KT; ++t) {
      const int tok = tok_base + (tile0 + t) * 16 + r;
      const bool va = !kMasked || tok < tend, vb = !kMasked || tok + 8 < tend;
      fetch_v(t, raw[t]);
      const float pa = Exp2(s[t][0]), pb = Exp2(s[t][1]);
      l += pa + pb;
      uint32_t x;
      if constexpr (LL::kHasCorr) {
        uint32_t sca, scb;
        float adda, addb;
        LL::VParams(raw[t], 0, sca, adda);
        LL::VParams(raw[t], 1, scb, addb);
        if (!va) { sca = 0u; adda = 0.0f; }  // rows past the end may hold NaN params
        if (!vb) { scb = 0u; addb = 0.0f; }
        x = MulHalf2(PackHalf2(pa, pb), __byte_perm(sca, scb, 0x5410));
        c = fmaf(pa, adda, fmaf(pb, addb, c));
      } else {
        x = PackBf16x2(pa, pb);
      }
      // x is row r of the 8x8 block [page row][2 head + page]; its transpose gives lane (r, p)
      // the weights of rows 2p, 2p + 1 of page r & 1 for head r / 2.
      const uint32_t y = MoveMatrixTrans(x);
      const uint32_t b0 = page1 ? 0u : y, b1 = page1 ? y : 0u;
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        uint32_t a[4];
        LL::VFrag(raw[t], mt, lane, a);
        if constexpr (LL::kHalfPv) {
          MmaHalf(o[mt], a, b0, b1);
        } else {
          MmaBf16(o[mt], a, b0, b1);
        }
      }
    }
  }
};

// INT2 scores take q as integers (the score MMA's B operand, BuildQFrags): q ~ Q / S with
// |Q| <= 32512 = 127 * 256 (S = 32512 / max |q| of the head), Q a multiple of 4 on the channels of
// odd code positions, whose A values are 4c or 64c (Int2Loader::KFragI), so that the MMA takes
// Q / 4 there. Rounding error <= 2 / S, i.e. 6e-5 of max |q|: finer than fp16 for the large
// channels that dominate a score.
template <class L>
__device__ __forceinline__ float QuantizeQ(float x, float scale, int d) {
  return L::OddPosition(d) ? 4.0f * rintf(x * scale * 0.25f) : rintf(x * scale);
}

// Q fragments of the score MMA for loader LL (its channel order and rounding) from q staged in
// shared memory; column n of the MMA belongs to head n / 2 (WarpSoftmax). INT2: qs holds the
// integers Q of QuantizeQ; column 2h takes the high byte of Q_d / 4^(pos & 1) and column 2h + 1
// the low byte (pos: the code position of channel d; value = 256 high + low, low in [-128, 128)).
template <class LL, int D>
__device__ __forceinline__ void BuildQFrags(const float (&qs)[kMaxHeadsPerCta][D], int r, int pq,
                                            uint32_t (&qf)[D / 16][2]) {
  const int h = r >> 1;
  if constexpr (LL::kIntQk) {
#pragma unroll
    for (int mi = 0; mi < LL::kMi; ++mi) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        uint32_t word = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int d = LL::QDimI(mi, 16 * half + 4 * pq + i);
          const int v = static_cast<int>(qs[h][d]) >> (LL::OddPosition(d) ? 2 : 0);  // exact
          const int hi = (v + 128) >> 8, lo = v - 256 * hi;
          word |= (static_cast<uint32_t>(r & 1 ? lo : hi) & 0xffu) << (8 * i);
        }
        qf[mi][half] = word;
      }
    }
  } else {
    constexpr int kMt = D / 16;
#pragma unroll
    for (int ks = 0; ks < kMt; ++ks) {
      const float x0 = qs[h][LL::QDim(ks, 2 * pq)], x1 = qs[h][LL::QDim(ks, 2 * pq + 1)];
      const float x2 = qs[h][LL::QDim(ks, 2 * pq + 8)], x3 = qs[h][LL::QDim(ks, 2 * pq + 9)];
      qf[ks][0] = PackBf16x2(x0, x1);
      qf[ks][1] = PackBf16x2(x2, x3);
    }
  }
}

// One split of one tier for one (KV head, <= 4 query heads). kTiles 16-token tiles per softmax
// step. BF16: warps take interleaved steps, registers loaded straight from global memory. INT2:
// each warp takes a contiguous range of tiles and streams it through a kStages-deep cp.async ring.
template <int D, class C, template <int> class LoaderT, int kTiles, bool kRing, bool kDirect,
          bool kOverlap>
__device__ __forceinline__ void RunSplit(const DecodeAttentionParams& p, const DecodeWorkItem& item,
                                         const PagedTierTable& tab, float sc_log2,
                                         SplitSmem<D, C>& sm) {
  constexpr int kWarps = C::kWarps, kThreads = C::kThreads;
  using L = LoaderT<D>;
  using Raw = typename L::Raw;
  constexpr int kMt = D / 16;  // k-steps of the score MMA and m-tiles of the P.V MMA
  const int group = p.num_q_heads / p.num_kv_heads;
  const int kvh = blockIdx.y;
  const int head0 = blockIdx.z * kMaxHeadsPerCta;
  const int nh = min(kMaxHeadsPerCta, group - head0);
  const int qh0 = kvh * group + head0;  // first query head of this CTA
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int r = lane >> 2, pq = lane & 3;

  const int tb = item.token_begin, te = item.token_end;
  const int ntiles = (te - tb + 15) / 16;
  const int32_t* pages = tab.page_indices + tab.page_indptr[item.seq];
  const uint8_t* base = tab.pool + static_cast<int64_t>(kvh) * tab.head_stride_bytes;
  const int first_page = tb / kPageTokens;

  // q of this warp's heads (w, w + kWarps, ...) is loaded into registers first, before the page
  // ids and the ring fill: issued behind ~15 MB of tile requests from every CTA at once, its load
  // came back last and held up every warp (ncu at B=1 128k: 8% of stage 1's warp samples).
  constexpr int kHeadsPerWarp = (kMaxHeadsPerCta + kWarps - 1) / kWarps;
  const float* q = p.q + static_cast<int64_t>(item.seq) * p.q_seq_stride;
  float qreg[kHeadsPerWarp][D / 32];
  auto load_q = [&] {
#pragma unroll
    for (int i = 0; i < kHeadsPerWarp; ++i) {
      const int h = warp + i * kWarps;
#pragma unroll
      for (int k = 0; k < D / 32; ++k) {
        qreg[i][k] = h < nh ? q[(qh0 + h) * D + lane + 32 * k] : 0.0f;
      }
    }
  };
  if constexpr (!kOverlap) load_q();

  // INT2 ring state. The first kStages tiles are requested before q is staged, so the DRAM
  // latency of the first tiles overlaps the fragment build.
  constexpr int kUnit = static_cast<int>(Int2PageUnitBytes(D));
  constexpr int kIw = C::kInt2Warps;
  const bool int2_warp = kRing && (!C::kBf16Warp || warp < kIw);  // the BF16 warp: no INT2 tiles
  // The BF16 share of a fused INT2 split (Tier::kInt2WithBf16), tokens [fb, fe) of the BF16 tier.
  int fb = 0, fe = 0;
  auto share_bounds = [&] {
    const int w0 = p.seq_work_indptr[item.seq];
    FusedBf16Range(blockIdx.x - w0, p.seq_work_indptr[item.seq + 1] - w0,
                   p.bf16.seq_tokens != nullptr ? p.bf16.seq_tokens[item.seq] : 0, &fb, &fe);
  };
  // 3-per-SM waves (many sequences, short splits): the BF16 warp's share can outlast the INT2
  // warps' tiles, so that warp loads its bounds before anything else and the INT2 warps never do.
  // H200, same run: D=64 B=32 8k 17.66 -> 16.58 us, D=64 B=48 8k -0.6%, D=128 B=24 8k +0.3%.
  // In 2-per-SM waves the same change read D=128 B=8 32k -1.3% but B=1 128k +2.9%, so they keep
  // the order below. At B=1 128k every edit measured just before the wait, dead code included,
  // cost 2.5-6%, as did most others in this prologue (bench/NOTES.md "Session 25", "Session 26").
  constexpr bool kShareBoundsFirst = C::kBf16Warp && C::kCtasPerSm == 3;
  if constexpr (kRing && kShareBoundsFirst) {
    if (warp == kIw && item.tier == static_cast<int32_t>(Tier::kInt2WithBf16)) share_bounds();
  }
  const int t_begin = int2_warp ? warp * ntiles / kIw : 0;
  const int t_end = int2_warp ? (warp + 1) * ntiles / kIw : 0;
  const int nmy = t_end - t_begin;
  const int npages = (te - tb + kPageTokens - 1) / kPageTokens - 2 * t_begin;  // from t_begin
  const int32_t* plist = pages + first_page + 2 * t_begin;
  // Page ids of this warp's range, 32 at a time (one per lane), shuffled to the lanes that copy.
  // Past the range's end a lane holds the last page: the second page of a last tile that has
  // only one is then a valid (re-read, masked) page.
  auto load_batch = [&](int k) {
    const int j = min(32 * k + lane, npages - 1);
    return j >= 0 ? __ldg(plist + j) : 0;
  };
  int32_t pb_cur = 0, pb_next = 0;
  int cur_batch = 0;
  uint8_t* ring = sm.u.ring[min(warp, kIw - 1)][0];  // the BF16 warp never copies
  // Copy pattern: a softmax step's kTiles tiles are 2 * kTiles page units, copied together (one
  // cp.async group per step). Lane group g = lane / kLanesPerUnit copies unit g of the step (tile
  // g / 2, page g % 2): one shuffle gives every lane its page id. Lane li of a group copies
  // 16-byte chunks li, li + kLanesPerUnit, ... of the unit, so each cp.async instruction reads
  // 2 * kTiles contiguous runs of 32 * 16 / (2 * kTiles) bytes. The per-lane parts of both
  // addresses are worked out once.
  constexpr int kUnitChunks = kUnit / 16;  // 36 (D = 128) or 20 (D = 64)
  constexpr int kLanesPerUnit = 32 / (2 * kTiles);
  constexpr int kChunksPerLane = (kUnitChunks + kLanesPerUnit - 1) / kLanesPerUnit;
  static_assert(kStages % kTiles == 0 && 32 % (2 * kTiles) == 0);
  const int grp = lane / kLanesPerUnit, li = lane % kLanesPerUnit;
  const uint8_t* src_lane = base + 16 * li;
  const uint32_t dst_lane =
      static_cast<uint32_t>(__cvta_generic_to_shared(ring)) + grp * kUnit + 16 * li;
  // Page strides are a few KB (Hkv * 576 bytes by default): 32-bit multiplies in the hot loop.
  const uint32_t page_stride32 = static_cast<uint32_t>(tab.page_stride_bytes);
  auto issue = [&](int t) {  // t: first tile of a step, relative to t_begin; warp-uniform
    if (t < nmy) {
      const int bt = t >> 4;  // the step's 2 * kTiles pages lie in one batch of 32
      if (bt != cur_batch) {
        pb_cur = pb_next;
        pb_next = load_batch(bt + 1);
        cur_batch = bt;
      }
      const uint32_t pg = static_cast<uint32_t>(__shfl_sync(0xffffffffu, pb_cur, (2 * t + grp) & 31));
      const uint8_t* src = src_lane + static_cast<uint64_t>(pg) * page_stride32;
      const uint32_t dst = dst_lane + (t % kStages) * (2 * kUnit);
      if (t + grp / 2 < nmy) {
#pragma unroll
        for (int c = 0; c < kChunksPerLane; ++c) {
          if ((c + 1) * kLanesPerUnit <= kUnitChunks || li + c * kLanesPerUnit < kUnitChunks) {
            CpAsync16Shared(dst + 16 * kLanesPerUnit * c, src + 16 * kLanesPerUnit * c);
          }
        }
      }
    }
    CpAsyncCommit();
  };
  if constexpr (kRing) {
    pb_cur = load_batch(0);
    if constexpr (kOverlap) {
      // Before the wait only L2 is asked for the ring's first fill (one bulk request per page
      // unit): the ring itself is filled after q's load, which then no longer queues behind
      // 9 MB of tile requests (H200, same run: D=128 B=1 128k 29.68 -> 29.37 us, D=64 12.06 ->
      // 11.80; bench/NOTES.md "Session 17").
      if (nmy > 0 && lane < min(2 * kStages, npages)) {
        BulkPrefetchL2(base + static_cast<uint64_t>(static_cast<uint32_t>(pb_cur)) * page_stride32,
                       kUnit);
      }
    } else {
#pragma unroll
      for (int t = 0; t < kStages; t += kTiles) issue(t);  // tiles 0..7: batch 0 only
    }
    if (!kShareBoundsFirst && item.tier == static_cast<int32_t>(Tier::kInt2WithBf16)) {
      share_bounds();
      // Plain layout: ask L2 for the share's pages now (at most a few tiles), like a BF16 split
      // does, since every warp attends the share first. Not with the BF16 warp: its share runs
      // alongside the INT2 tiles, and the prefetch burst only competed with their ring fill
      // (H200, same run: D=128 B=32 8k 62.7 -> 59.9 us, B=8 32k 57.2 -> 54.8 without it; the
      // plain layout at D=64 B=32 8k 20.6 with, 20.95 without; bench/NOTES.md "v14").
      if constexpr (!C::kBf16Warp) {
        constexpr int kLines = static_cast<int>(Bf16PageUnitBytes(D)) / 128;
        const int32_t* bpages =
            p.bf16.page_indices + p.bf16.page_indptr[item.seq] + fb / kPageTokens;
        const uint8_t* bbase = p.bf16.pool + static_cast<int64_t>(kvh) * p.bf16.head_stride_bytes;
        const int np = min(kBf16PrefetchPages, (fe - fb + kPageTokens - 1) / kPageTokens);
        for (int i = tid; i < np * kLines; i += kThreads) {
          const int32_t pg = __ldg(bpages + i / kLines);
          PrefetchL2(bbase + static_cast<int64_t>(pg) * p.bf16.page_stride_bytes +
                     128 * (i % kLines));
        }
      }
    }
  } else {
    // BF16 (register loads, no ring): ask L2 for the split's first kBf16PrefetchPages pages now,
    // so the q staging overlaps their DRAM latency and the per-tile loads below hit L2.
    constexpr int kUnitB = static_cast<int>(Bf16PageUnitBytes(D));
    constexpr int kLines = kUnitB / 128;
    const int np = min(kBf16PrefetchPages, (te - tb + kPageTokens - 1) / kPageTokens);
    for (int i = tid; i < np * kLines; i += kThreads) {
      const int32_t pg = __ldg(pages + first_page + i / kLines);
      PrefetchL2(base + static_cast<int64_t>(pg) * tab.page_stride_bytes + 128 * (i % kLines));
    }
  }

  // Overlapping the prior kernel: everything above read the plan, the page tables and the tiers,
  // which that kernel does not write (DecodeAttentionParams::overlap_prior_kernel); q may be its
  // output, and partial_out may still be read by it (the previous call's merge).
  if constexpr (kOverlap) {
    WaitForPriorGrid();
    load_q();
    if constexpr (kRing) {
#pragma unroll
      for (int t = 0; t < kStages; t += kTiles) issue(t);
    }
  }

  // Stage q (rounded to the MMA type, QuantizeQ for INT2): warp w owns heads w, w + kWarps, ...;
  // each warp also sums its heads' rounded q (the INT2 min term) with a shuffle reduction.
#pragma unroll
  for (int i = 0; i < kHeadsPerWarp; ++i) {
    const int h = warp + i * kWarps;
    if (kMaxHeadsPerCta % kWarps != 0 && h >= kMaxHeadsPerCta) break;  // warp-uniform
    float scale = 1.0f;
    if constexpr (L::kIntQk) {
      float amax = 0.0f;
#pragma unroll
      for (int k = 0; k < D / 32; ++k) amax = fmaxf(amax, fabsf(qreg[i][k]));
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
      scale = amax > 0.0f ? 32512.0f / amax : 1.0f;
    }
    float part = 0.0f;
#pragma unroll
    for (int k = 0; k < D / 32; ++k) {
      const int d = lane + 32 * k;
      const float x = qreg[i][k];
      float v;
      if constexpr (L::kIntQk) {
        v = QuantizeQ<L>(x, scale, d);
      } else {
        v = L::RoundQ(x);
      }
      sm.q[h][d] = v;
      if constexpr (kRing) sm.qb[h][d] = Bf16Loader<D>::RoundQ(x);
      part += v;
    }
    part += __shfl_xor_sync(0xffffffffu, part, 16);
    part += __shfl_xor_sync(0xffffffffu, part, 8);
    part += __shfl_xor_sync(0xffffffffu, part, 4);
    part += __shfl_xor_sync(0xffffffffu, part, 2);
    part += __shfl_xor_sync(0xffffffffu, part, 1);
    if (lane == 0) {
      sm.qsum[h] = part / scale;
      sm.qinv[h] = 1.0f / scale;
    }
  }
  __syncthreads();
  WarpSoftmax<D> st(sc_log2, lane);
  if constexpr (L::kHasCorr) {
    st.e = sm.qsum[pq] * sc_log2;
    st.sq = sm.qinv[pq] * sc_log2;
  }

  if constexpr (kRing) {
    // The BF16 share of a fused split: on the BF16 warp, else first on every warp while the
    // ring fills.
    const int share_warp = C::kBf16Warp ? warp - kIw : warp;
    constexpr int kShareWarps = C::kBf16Warp ? 1 : kWarps;
    if (fe > fb && share_warp >= 0) {
      using BL = Bf16IntoInt2Loader<D>;
      uint32_t qfb[kMt][2];
      BuildQFrags<BL, D>(sm.qb, r, pq, qfb);
      const int32_t* bpages = p.bf16.page_indices + p.bf16.page_indptr[item.seq];
      const uint8_t* bbase = p.bf16.pool + static_cast<int64_t>(kvh) * p.bf16.head_stride_bytes;
      const int nbt = (fe - fb + 15) / 16;
      for (int it = share_warp; it < nbt; it += kShareWarps) {
        typename BL::Raw raw[1];
        const int tok0 = fb + it * 16;
        const int pg = tok0 / kPageTokens;
        const int32_t i0 = __ldg(bpages + pg);
        const int32_t i1 = tok0 + 8 < fe ? __ldg(bpages + pg + 1) : i0;
        BL::Load(raw[0], bbase + static_cast<int64_t>(i0) * p.bf16.page_stride_bytes,
                 bbase + static_cast<int64_t>(i1) * p.bf16.page_stride_bytes, lane);
        BL::ZeroInvalidV(raw[0], tok0, fe, lane);
        st.template Step<BL, 1>(raw, qfb, fb, it, fe);
      }
      // The INT2 accumulator of m-tile mt holds o / OutScale(mt) (a power of two): rescale.
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        const float f = 1.0f / L::OutScale(mt);
        st.o[mt][0] *= f; st.o[mt][1] *= f; st.o[mt][2] *= f; st.o[mt][3] *= f;
      }
    }
    uint32_t qf[kMt][2];
    BuildQFrags<L, D>(sm.q, r, pq, qf);
    pb_next = load_batch(1);
    const int tend = min(te, tb + 16 * t_end);
    for (int t = 0; t < nmy; t += kTiles) {
      Raw raw[kTiles];
      // The step's slots: tile k at step_slots + k * 2 * kUnit (t is a multiple of kTiles, so
      // every ring address of the step is one base plus immediate offsets).
      const uint8_t* step_slots = ring + ((t / kTiles) % (kStages / kTiles)) * (kTiles * 2 * kUnit);
      auto slot = [&](int k) { return step_slots + k * (2 * kUnit); };
      if constexpr (D == 128) {
        // V is read from the ring inside the step (registers for 4 tiles per step), so a step's
        // slots are refilled at the start of the next step, once every lane has read them.
        __syncwarp();
        if (t > 0) issue(t - kTiles + kStages);
        CpAsyncWait<kStages / kTiles - 1>();
        __syncwarp();
#pragma unroll
        for (int k = 0; k < kTiles; ++k) {
          L::LoadSharedK(raw[k], slot(k), slot(k) + kUnit, lane);
        }
        auto fetch = [&](int k, Raw& rk) {
          L::LoadSharedV(rk, slot(k), slot(k) + kUnit, lane);
        };
        // Steps wholly inside the range need no masks (all but a warp's last step): H200, same
        // run, D=128 B=1 128k 34.85 -> 33.87 us, B=8 32k 63.4 -> 61.6, B=32 8k 71.7 -> 72.1 (two
        // copies of the step's code; bench/NOTES.md "v13 masks").
        if (tb + 16 * (t_begin + t + kTiles) <= tend) {
          st.template Step<L, kTiles, decltype(fetch), false>(raw, qf, tb, t_begin + t, tend, fetch);
        } else {
          st.template Step<L, kTiles>(raw, qf, tb, t_begin + t, tend, fetch);
        }
      } else {
        CpAsyncWait<kStages / kTiles - 1>();
        __syncwarp();
#pragma unroll
        for (int k = 0; k < kTiles; ++k) {
          L::LoadShared(raw[k], slot(k), slot(k) + kUnit, lane);
        }
        __syncwarp();
        issue(t + kStages);
        if (tb + 16 * (t_begin + t + kTiles) <= tend) {  // as above (D=64 B=8 32k 20.97 -> 20.6 us)
          st.template Step<L, kTiles, NoFetchV, false>(raw, qf, tb, t_begin + t, tend);
        } else {
          st.template Step<L, kTiles>(raw, qf, tb, t_begin + t, tend);
        }
      }
    }
    CpAsyncWait<0>();
  } else {
    uint32_t qf[kMt][2];
    BuildQFrags<L, D>(sm.q, r, pq, qf);
    const int niters = (ntiles + kTiles - 1) / kTiles;
    for (int it = warp; it < niters; it += kWarps) {
      Raw raw[kTiles];
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        const int tok0 = tb + (it * kTiles + t) * 16;
        const int pg = tok0 / kPageTokens;
        const int32_t i0 = tok0 < te ? __ldg(pages + pg) : __ldg(pages + first_page);
        const int32_t i1 = tok0 + 8 < te ? __ldg(pages + pg + 1) : i0;
        L::Load(raw[t], base + static_cast<int64_t>(i0) * tab.page_stride_bytes,
                base + static_cast<int64_t>(i1) * tab.page_stride_bytes, lane);
        L::ZeroInvalidV(raw[t], tok0, te, lane);
      }
      st.template Step<L, kTiles>(raw, qf, tb, it * kTiles, te);
    }
  }

  // Warp totals: row sums and corrections are per-lane partials over the lane's tokens.
  st.l = WarpSumOverRows(st.l);
  if constexpr (L::kHasCorr) st.c = WarpSumOverRows(st.c);
  __syncthreads();  // the ring (INT2) aliases sm.u.o
  if (r == 0) {
    sm.m[warp][pq] = st.m;
    sm.l[warp][pq] = st.l;
  }
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {  // the two pages' parts of head pq (WarpSoftmax)
    const int d0 = L::OutDim(mt, r), d1 = L::OutDim(mt, r + 8);
    const float f = L::OutScale(mt);
    sm.u.o[warp][pq][d0] = fmaf(st.o[mt][0] + st.o[mt][1], f, st.c);
    sm.u.o[warp][pq][d1] = fmaf(st.o[mt][2] + st.o[mt][3], f, st.c);
  }
  __syncthreads();
  // The warps' weights once per head (thread h), normalisation folded in; every channel then
  // takes kWarps FMAs (the exp/divide/log per channel were 8% of stage 1's samples at B=1).
  if (tid < kMaxHeadsPerCta) {
    const int h = tid;
    float mm = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mm = fmaxf(mm, sm.m[w][h]);
    float f[kWarps], ll = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      f[w] = mm == -INFINITY ? 0.0f : Exp2(sm.m[w][h] - mm);
      ll += f[w] * sm.l[w][h];
    }
    const float inv = ll > 0.0f ? 1.0f / ll : 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sm.wt[w][h] = f[w] * inv;
    if (h < nh) {
      const float lse = ll > 0.0f ? (mm + log2f(ll)) * kLn2 : -INFINITY;
      if constexpr (!kDirect) {
        p.partial_lse[static_cast<int64_t>(blockIdx.x) * p.num_q_heads + qh0 + h] = lse;
      } else if (p.out_lse != nullptr) {
        p.out_lse[static_cast<int64_t>(item.seq) * p.num_q_heads + qh0 + h] = lse;
      }
    }
  }
  __syncthreads();
  // The CTA's normalised output: its partial row, or out itself (kDirect: one split per
  // sequence, no merge).
  float* dst =
      kDirect ? p.out + static_cast<int64_t>(item.seq) * p.out_seq_stride + qh0 * D
              : p.partial_out + (static_cast<int64_t>(blockIdx.x) * p.num_q_heads + qh0) * D;
  for (int i = tid; i < nh * D; i += kThreads) {
    const int h = i / D, d = i % D;
    float out = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) out = fmaf(sm.wt[w][h], sm.u.o[w][h][d], out);
    dst[i] = out;
  }
}

// One chunk of a log-sum-exp merge (MergeKernel, MergeInStage1IfLast): lane k holds the lse of
// the chunk's split k (-inf on lanes without one). Updates the running max m and weight sum; false
// when nothing is attended yet (warp-uniform), else *r rescales the accumulator and *my_w is lane
// k's weight, for the caller to shuffle to the lanes.
__device__ __forceinline__ bool MergeChunkWeights(float my_lse, float& m, float& sum, float* r,
                                                  float* my_w) {
  float cm = my_lse;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, o));
  cm = fmaxf(cm, m);
  if (cm == -INFINITY) return false;
  *r = __expf(m - cm);          // 0 on the first chunk (m = -inf)
  *my_w = __expf(my_lse - cm);  // 0 on lanes without a split
  float ws = *my_w;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) ws += __shfl_xor_sync(0xffffffffu, ws, o);
  sum = fmaf(sum, *r, ws);
  m = cm;
  return true;
}

// The merge inside stage 1 (DecodeAttentionParams::merge_counters), D = 128: a CTA that has
// written its partial counts itself in on its (sequence, KV head, head group); the last to arrive
// merges the row's splits, warp h head h, lane c channels 4c..4c+3, kChunk splits' loads in
// flight at once, as MergeKernel does (log-sum-exp weights, natural log), and zeroes the counter
// for the next call (which counts only after its wait for this grid). A sequence without work
// items has no CTA: the first CTA of each (KV head, head group) writes its zeros. Not inlined, so
// that the loops' register allocation never pays for it (152 is a cliff for the 2-per-SM kernel,
// bench/NOTES.md "Session 20"; inlined, v23 also compiled to 152). H200, same run, against the
// merge kernel: D=128 B=2 64k 28.61 -> 27.35 us, B=2 32k 19.41 -> 18.26, B=3 64k -0.3%, B=4 32k
// 30.12 -> 28.58, B=4 128k -2.4%; but B=1 128k +4.1% (32k +11.4%), and a D = 64 version
// +5..22% (88 splits at B=1 in 3 rounds), so DecodeAttentionCuda uses it only at D = 128 with 2
// or more sequences (bench/NOTES.md "Session 21").
__device__ __noinline__ void MergeInStage1IfLast(const DecodeWorkItem* work, int num_seqs,
                                                const int32_t* seq_work_indptr,
                                                int32_t* merge_counters, int num_kv_heads,
                                                int hq, const float* partial_out,
                                                const float* partial_lse, float* out_base,
                                                int64_t out_seq_stride, float* out_lse_base,
                                                int* s_merge) {
  constexpr int D = 128, kChunk = 17;  // up to 34 splits in two rounds, 68 registers of loads
  const int group = hq / num_kv_heads, head0 = blockIdx.z * kMaxHeadsPerCta;
  const int nh = min(kMaxHeadsPerCta, group - head0), qh0 = blockIdx.y * group + head0;
  if (blockIdx.x == 0) {
    for (int b = 0; b < num_seqs; ++b) {
      if (seq_work_indptr[b + 1] != seq_work_indptr[b]) continue;
      for (int i = threadIdx.x; i < nh * D; i += blockDim.x) {
        out_base[static_cast<int64_t>(b) * out_seq_stride + qh0 * D + i] = 0.0f;
      }
      if (threadIdx.x < nh && out_lse_base != nullptr) {
        out_lse_base[static_cast<int64_t>(b) * hq + qh0 + threadIdx.x] = -INFINITY;
      }
    }
  }
  __syncthreads();  // every partial store of the CTA issued
  const int seq = work[blockIdx.x].seq;
  if (threadIdx.x == 0) {
    const int w0 = seq_work_indptr[seq], n = seq_work_indptr[seq + 1] - w0;
    __threadfence();  // this CTA's partial before its count
    int32_t* counter =
        merge_counters + (static_cast<int64_t>(seq) * num_kv_heads + blockIdx.y) * gridDim.z +
        blockIdx.z;
    const bool last = atomicAdd(counter, 1) == n - 1;
    if (last) *counter = 0;
    s_merge[0] = last ? w0 : -1;
    s_merge[1] = n;
  }
  __syncthreads();
  if (s_merge[0] < 0) return;
  __threadfence();  // the other CTAs' partials after their counts
  const int w0 = s_merge[0], n = s_merge[1];
  const int h = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (h >= nh) return;
  const int qh = qh0 + h;
  const int64_t stride = static_cast<int64_t>(hq) * D / 4;  // float4s between splits
  const float4* po =
      reinterpret_cast<const float4*>(partial_out + (static_cast<int64_t>(w0) * hq + qh) * D) +
      lane;
  const float* lse = partial_lse + static_cast<int64_t>(w0) * hq + qh;
  float m = -INFINITY, sum = 0.0f;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int i0 = 0; i0 < n; i0 += kChunk) {
    // L2 loads (__ldcg): L1 is not coherent with the other SMs' partial stores.
    const float my_lse = lane < kChunk && i0 + lane < n
                             ? __ldcg(lse + static_cast<int64_t>(i0 + lane) * hq)
                             : -INFINITY;
    float4 ov[kChunk];
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      ov[k] = i0 + k < n ? __ldcg(po + (i0 + k) * stride) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    float r, my_w;
    if (MergeChunkWeights(my_lse, m, sum, &r, &my_w)) {  // else nothing attended yet: zeros
      acc = make_float4(acc.x * r, acc.y * r, acc.z * r, acc.w * r);
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        const float w = __shfl_sync(0xffffffffu, my_w, k);
        acc = make_float4(fmaf(w, ov[k].x, acc.x), fmaf(w, ov[k].y, acc.y),
                          fmaf(w, ov[k].z, acc.z), fmaf(w, ov[k].w, acc.w));
      }
    }
  }
  const bool empty = m == -INFINITY;  // no token attended: zeros, lse -inf
  const float inv = empty ? 0.0f : 1.0f / sum;
  reinterpret_cast<float4*>(out_base + static_cast<int64_t>(seq) * out_seq_stride + qh * D)[lane] =
      make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
  if (lane == 0 && out_lse_base != nullptr) {
    out_lse_base[static_cast<int64_t>(seq) * hq + qh] = empty ? -INFINITY : m + logf(sum);
  }
}

// Stage 1, both tiers in one launch. Grid: (num_work, Hkv, ceil(group / 4)); block:
// C::kThreads. kDirect: params.one_split_per_seq (a template argument: a runtime flag cost the
// other launches ~0.15 us, H200, bench/NOTES.md "v15 direct").
template <int D, class C, bool kDirect, bool kOverlap>
__global__ void __launch_bounds__(C::kThreads, C::kCtasPerSm)
    DecodeSplitKernel(const DecodeAttentionParams p, float sc_log2) {
  // 128-byte aligned whatever else sits in static shared memory: the ring's lines (SplitSmem).
  __shared__ __align__(128) SplitSmem<D, C> sm;
  if constexpr (kOverlap) AllowDependentLaunch();
  const DecodeWorkItem item = p.work[blockIdx.x];
  if (item.tier == static_cast<int32_t>(Tier::kBf16)) {
    RunSplit<D, C, Bf16Loader, 1, false, kDirect, kOverlap>(p, item, p.bf16, sc_log2, sm);
  } else {
    // 4 tiles per softmax step (D = 128 fits in 128 registers with V loaded inside the step).
    RunSplit<D, C, Int2Loader, 4, true, kDirect, kOverlap>(p, item, p.int2, sc_log2, sm);
  }
  if constexpr (D == 128 && !kDirect) {
    if (p.merge_counters != nullptr) {  // DecodeAttentionCuda clears it when stage 2 merges
      MergeInStage1IfLast(p.work, p.num_seqs, p.seq_work_indptr, p.merge_counters, p.num_kv_heads,
                          p.num_q_heads, p.partial_out, p.partial_lse, p.out, p.out_seq_stride,
                          p.out_lse, sm.merge);
    }
  }
}

// Stage 2. Grid: (B, Hq, Z); block: C x G threads, C = D / Z channels (C >= 32, so a warp's
// lanes share one group), G <= kMergeGroups (from the splits per sequence). Thread (c, j) loads
// channel C z + c of splits j, j + G, ..., kChunk at a time, all in flight together, and keeps
// its own max, weight sum and weighted sum; lane k of the warp loads the lse of the chunk's split
// k and computes its weight once for the warp (shuffled to the lanes), so a chunk of 16 fits in
// 40 registers. One barrier, then group 0 combines the G partial results. One round trip to
// memory for a sequence of up to G * kChunk splits (the v12 merge staged the lse block-wide
// first: three barriers and two round trips, ~6 us at B=1). Z = D / 32 when B * Hq blocks would
// leave most SMs idle (B=1), else 1 (bench/NOTES.md "v15 merge").
constexpr int kMergeGroups = 16;
template <bool kOverlap, int kChunk>
__global__ void MergeKernel(const DecodeAttentionParams p) {
  static_assert(kChunk <= 32);
  __shared__ float s_m[kMergeGroups], s_s[kMergeGroups];
  extern __shared__ float s_acc[];  // blockDim.x floats (dynamic: see the launch)
  const int b = blockIdx.x, h = blockIdx.y, D = p.head_dim, C = D / gridDim.z;
  const int tid = threadIdx.x, c = tid % C, d = blockIdx.z * C + c, j = tid / C;
  const int lane = tid & 31;
  const int groups = blockDim.x / C;
  if constexpr (kOverlap) AllowDependentLaunch();
  const int w0 = p.seq_work_indptr[b], n = p.seq_work_indptr[b + 1] - w0;
  if constexpr (kOverlap) WaitForPriorGrid();  // for the partials; the plan is not stage 1's
  const float* lse = p.partial_lse + static_cast<int64_t>(w0) * p.num_q_heads + h;
  const float* po = p.partial_out + (static_cast<int64_t>(w0) * p.num_q_heads + h) * D + d;
  const int64_t stride = static_cast<int64_t>(p.num_q_heads) * D;
  float m = -INFINITY, sum = 0.0f, acc = 0.0f;
  for (int i0 = j; i0 < n; i0 += groups * kChunk) {
    const int il = i0 + lane * groups;  // lane k: the chunk's split k
    const float my_lse =
        lane < kChunk && il < n ? lse[static_cast<int64_t>(il) * p.num_q_heads] : -INFINITY;
    float ov[kChunk];
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      const int i = i0 + k * groups;
      ov[k] = i < n ? po[i * stride] : 0.0f;
    }
    float r, my_w;
    if (MergeChunkWeights(my_lse, m, sum, &r, &my_w)) {  // else nothing attended yet: zeros
      acc *= r;
#pragma unroll
      for (int k = 0; k < kChunk; ++k) acc = fmaf(__shfl_sync(0xffffffffu, my_w, k), ov[k], acc);
    }
  }
  if (c == 0) {
    s_m[j] = m;
    s_s[j] = sum;
  }
  s_acc[j * C + c] = acc;
  __syncthreads();
  if (j != 0) return;
  float mm = -INFINITY;
  for (int g = 0; g < groups; ++g) mm = fmaxf(mm, s_m[g]);
  float* out = p.out + static_cast<int64_t>(b) * p.out_seq_stride + static_cast<int64_t>(h) * D;
  const bool write_lse = d == 0 && p.out_lse != nullptr;
  if (mm == -INFINITY) {  // no token attended: zeros, lse -inf
    out[d] = 0.0f;
    if (write_lse) p.out_lse[b * p.num_q_heads + h] = -INFINITY;
    return;
  }
  float total = 0.0f, wsum = 0.0f;
  for (int g = 0; g < groups; ++g) {
    const float f = s_m[g] == -INFINITY ? 0.0f : __expf(s_m[g] - mm);
    total = fmaf(f, s_acc[g * C + c], total);
    wsum = fmaf(f, s_s[g], wsum);
  }
  out[d] = total / wsum;
  if (write_lse) p.out_lse[b * p.num_q_heads + h] = mm + logf(wsum);
}

// Stage 2 for sequences of many splits at D = 64, one block per (sequence, query head): thread
// (c, j) of 64 x 2 threads merges channel c of splits j, j + 2, ... with all its loads in flight
// at once (n <= kMergeRowSplits), lane k having loaded the lse of splits k and k + 32 of its
// group; the 2 groups combine through shared memory. 64 registers.
constexpr int kMergeRowDim = 64;
constexpr int kMergeRowGroups = 2;
constexpr int kMergeRowThreads = kMergeRowDim * kMergeRowGroups;
constexpr int kMergeRowMaxPerThread = 48;
constexpr int kMergeRowSplits = kMergeRowGroups * kMergeRowMaxPerThread;
template <bool kOverlap>
__global__ void __launch_bounds__(kMergeRowThreads) MergeRowKernel(const DecodeAttentionParams p) {
  constexpr int D = kMergeRowDim, G = kMergeRowGroups, kPer = kMergeRowMaxPerThread;
  static_assert(kPer <= 64);  // lanes hold the lse of splits k and k + 32
  __shared__ float s_m[G], s_s[G], s_acc[G][D];
  const int b = blockIdx.x, h = blockIdx.y, hq = p.num_q_heads;
  const int tid = threadIdx.x, lane = tid & 31, c = tid % D, j = tid / D;
  if constexpr (kOverlap) AllowDependentLaunch();
  const int w0 = p.seq_work_indptr[b], n = p.seq_work_indptr[b + 1] - w0;
  if constexpr (kOverlap) WaitForPriorGrid();  // for the partials; the plan is not stage 1's
  const float* lse = p.partial_lse + static_cast<int64_t>(w0) * hq + h;
  const float* po = p.partial_out + (static_cast<int64_t>(w0) * hq + h) * D + c;
  const int64_t stride = static_cast<int64_t>(hq) * D;
  const int ia = j + G * lane, ib = j + G * (lane + 32);
  const float la = ia < n ? lse[static_cast<int64_t>(ia) * hq] : -INFINITY;
  const float lb = lane + 32 < kPer && ib < n ? lse[static_cast<int64_t>(ib) * hq] : -INFINITY;
  float ov[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int i = j + G * k;
    ov[k] = i < n ? po[i * stride] : 0.0f;
  }
  float m = fmaxf(la, lb);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float sum = 0.0f, acc = 0.0f;
  if (m != -INFINITY) {  // warp-uniform; else nothing attended in this group
    const float wa = __expf(la - m), wb = __expf(lb - m);
    sum = wa + wb;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      acc = fmaf(__shfl_sync(0xffffffffu, k < 32 ? wa : wb, k & 31), ov[k], acc);
    }
  }
  if (c == 0) {
    s_m[j] = m;
    s_s[j] = sum;
  }
  s_acc[j][c] = acc;
  __syncthreads();
  if (j != 0) return;
  m = -INFINITY;
#pragma unroll
  for (int g = 0; g < G; ++g) m = fmaxf(m, s_m[g]);
  acc = sum = 0.0f;
  if (m != -INFINITY) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float f = s_m[g] == -INFINITY ? 0.0f : __expf(s_m[g] - m);
      acc = fmaf(f, s_acc[g][c], acc);
      sum = fmaf(f, s_s[g], sum);
    }
  }
  const bool empty = m == -INFINITY;
  p.out[static_cast<int64_t>(b) * p.out_seq_stride + static_cast<int64_t>(h) * D + c] =
      empty ? 0.0f : acc / sum;
  if (c == 0 && p.out_lse != nullptr) p.out_lse[b * hq + h] = empty ? -INFINITY : m + logf(sum);
}
cudaError_t LaunchMergeRows(const DecodeAttentionParams& p, bool overlap, cudaStream_t stream) {
  const dim3 grid(p.num_seqs, p.num_q_heads);
  if (overlap) {
    return cuda::LaunchOverlappingPrior(MergeRowKernel<true>, grid, kMergeRowThreads, 0, stream,
                                        p);
  }
  MergeRowKernel<false><<<grid, kMergeRowThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

// Dynamic shared memory (never touched) that makes layout C's CTAs per SM a ceiling as well as
// the register budget: with fewer registers than the budget allows (D=64: 111), one more CTA
// fits beside them, and overlapped calls then stack the next call's early CTAs on the SMs
// (H200, D=64 B=1 128k: 12.19 us at v18, 13.07 when v19 went from 147 to 114 registers, 11.17
// with this pad; bench/NOTES.md "Session 17"). Sets the kernels' dynamic shared memory limit
// once per device.
template <int D, class C, bool kDirect>
cudaError_t Stage1SmemPad(size_t* pad) {
  static std::mutex mu;  // the one-time set-up only; launches read `pads` without it
  static std::array<std::atomic<size_t>, 64> pads{};  // per device; 0: not set up (a pad >= 128)
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  if (device < 0 || device >= static_cast<int>(pads.size())) return cudaErrorInvalidDevice;
  if ((*pad = pads[device].load(std::memory_order_acquire)) != 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(mu);
  if (pads[device].load(std::memory_order_relaxed) == 0) {
    int per_sm = 0, reserved = 0;
    if ((e = cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor,
                                    device)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock,
                                    device)) != cudaSuccess) {
      return e;
    }
    // One CTA more than C::kCtasPerSm must not fit: each takes > per_sm / (N + 1).
    const int64_t footprint = per_sm / (C::kCtasPerSm + 1) + 128 - reserved;
    const int64_t static_bytes = static_cast<int64_t>(sizeof(SplitSmem<D, C>));
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(128, footprint - static_bytes));
    e = cudaFuncSetAttribute(DecodeSplitKernel<D, C, kDirect, false>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    if constexpr (!kDirect) {  // a direct launch is never overlapped (LaunchSplits)
      if (e == cudaSuccess) {
        e = cudaFuncSetAttribute(DecodeSplitKernel<D, C, kDirect, true>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(bytes));
      }
    }
    if (e != cudaSuccess) return e;
    pads[device].store(bytes, std::memory_order_release);
  }
  *pad = pads[device].load(std::memory_order_relaxed);
  return cudaSuccess;
}

// One stage-1 launch in layout C, writing out directly when the plan has one split per sequence,
// overlapping the prior kernel when `overlap`.
template <int D, class C, bool kDirect>
cudaError_t LaunchSplits(const DecodeAttentionParams& p, dim3 grid, bool overlap,
                         cudaStream_t stream) {
  const float sc_log2 = p.sm_scale * kLog2e;
  size_t pad = 0;
  const cudaError_t e = Stage1SmemPad<D, C, kDirect>(&pad);
  if (e != cudaSuccess) return e;
  if constexpr (!kDirect) {  // a direct launch has no merge; few-row plans rarely make one
    if (overlap) {
      return cuda::LaunchOverlappingPrior(DecodeSplitKernel<D, C, kDirect, true>, grid,
                                          C::kThreads, pad, stream, p, sc_log2);
    }
  }
  DecodeSplitKernel<D, C, kDirect, false><<<grid, C::kThreads, pad, stream>>>(p, sc_log2);
  return cudaGetLastError();
}
template <int D, class C>
cudaError_t LaunchSplits(const DecodeAttentionParams& p, dim3 grid, bool overlap,
                         cudaStream_t stream) {
  return p.one_split_per_seq ? LaunchSplits<D, C, true>(p, grid, overlap, stream)
                             : LaunchSplits<D, C, false>(p, grid, overlap, stream);
}

template <int D>
cudaError_t LaunchStage1(const DecodeAttentionParams& p, Stage1Cta cta, int sms, bool overlap,
                         cudaStream_t stream) {
  const int group = p.num_q_heads / p.num_kv_heads;
  const dim3 grid(p.num_work, p.num_kv_heads, (group + kMaxHeadsPerCta - 1) / kMaxHeadsPerCta);
  // A launch that fits in one wave of 2 or 3 CTAs per SM has room for a fifth warp per CTA: it
  // takes the BF16 share of a fused split, so that the INT2 warps start on their tiles at once.
  if (cta == Stage1Cta::kAuto) {
    const int64_t ctas = static_cast<int64_t>(grid.x) * grid.y * grid.z;
    cta = ctas <= 2 * static_cast<int64_t>(sms)   ? Stage1Cta::kBf16Warp
          : ctas <= 3 * static_cast<int64_t>(sms) ? Stage1Cta::kBf16Warp3
                                                  : Stage1Cta::kPlain;
  }
  switch (cta) {
    case Stage1Cta::kBf16Warp:
      return LaunchSplits<D, Bf16WarpCta>(p, grid, overlap, stream);
    case Stage1Cta::kBf16Warp3:
      return LaunchSplits<D, Bf16Warp3Cta>(p, grid, overlap, stream);
    default:
      return LaunchSplits<D, PlainCta>(p, grid, overlap, stream);
  }
}

}  // namespace

cudaError_t DecodeAttentionCuda(const DecodeAttentionParams& params, cudaStream_t stream,
                                Stage1Cta cta) {
  // ValidateDecodeAttentionParams reads the arrays, which live on the device here: check the
  // scalars and pointers only.
  const DecodeAttentionParams& p = params;
  if (p.num_seqs < 0) return cudaErrorInvalidValue;
  if (p.num_seqs == 0) return cudaSuccess;
  if (p.num_kv_heads <= 0 || p.num_q_heads <= 0 || p.num_q_heads % p.num_kv_heads != 0 ||
      p.q == nullptr || p.out == nullptr || p.seq_work_indptr == nullptr ||
      p.q_seq_stride < static_cast<int64_t>(p.num_q_heads) * p.head_dim ||
      p.out_seq_stride < static_cast<int64_t>(p.num_q_heads) * p.head_dim ||
      (p.num_work > 0 && (p.work == nullptr || p.partial_out == nullptr ||
                          p.partial_lse == nullptr))) {
    return cudaErrorInvalidValue;
  }
  for (const PagedTierTable* t : {&p.bf16, &p.int2}) {
    if (t->seq_tokens != nullptr &&
        (t->page_indptr == nullptr || t->page_indices == nullptr || t->pool == nullptr ||
         t->page_stride_bytes % 16 != 0 || t->head_stride_bytes % 16 != 0 ||
         t->page_stride_bytes >= (int64_t{1} << 31))) {
      return cudaErrorInvalidValue;
    }
  }
  // One split per sequence: stage 1 writes out itself (every sequence needs its CTA).
  if (p.one_split_per_seq && p.num_work != p.num_seqs) return cudaErrorInvalidValue;
  if (params.head_dim != 64 && params.head_dim != 128) return cudaErrorNotSupported;
  int sms = 0;  // both stages size their grids by it
  OSCARKV_CUDA_RETURN_IF_ERROR(CurrentDeviceSms(&sms));
  // Few sequences (fewer query rows than SMs): both stages may overlap the kernel before them,
  // the merge then also its stage 1. Measured with the previous call's merge as that kernel
  // (H200, same run: D=128 B=1 128k 31.6 -> 30.6 us, 32k 15.9 -> 14.8, S = 320 9.6 -> 8.4);
  // with many sequences the next call's early CTAs competed with this call's tail (B=8 32k
  // 54.6 -> 56.1 us), so they launch the plain way (bench/NOTES.md "v16").
  const bool few_rows = static_cast<int64_t>(params.num_seqs) * params.num_q_heads < sms;
  const bool overlap = params.overlap_prior_kernel && few_rows;
  // The merge inside stage 1 (MergeInStage1IfLast): D = 128, 2 or more but few sequences.
  const bool merge_in_stage1 = params.merge_counters != nullptr && params.head_dim == 128 &&
                               few_rows && params.num_seqs >= 2 && !params.one_split_per_seq;
  if (params.num_work > 0) {
    DecodeAttentionParams p1 = params;
    if (!merge_in_stage1) p1.merge_counters = nullptr;
    OSCARKV_CUDA_RETURN_IF_ERROR(params.head_dim == 128
                                     ? LaunchStage1<128>(p1, cta, sms, overlap, stream)
                                     : LaunchStage1<64>(p1, cta, sms, overlap, stream));
    if (params.one_split_per_seq || merge_in_stage1) return cudaSuccess;  // nothing to merge
  }
  // Groups: about 4 splits per thread (their loads are independent), at most kMergeGroups, and at
  // most max_threads threads. Blocks of 32 channels when one block per head leaves most SMs idle:
  // H200, same run, B=1: D=128 8k 10.45 -> 9.3 us, 128k 31.95 -> 31.8, D=64 128k 13.7 -> 13.15;
  // at B=8 (256 blocks per head already) they cost +0.6 us.
  // With few sequences a block holds at most 128 threads. Overlapped, merge blocks can only start
  // where a stage-1 CTA has left (a trace of D=128 B=1 128k found no merge block beside two
  // stage-1 CTAs, at 8 or 4 warps; 2-warp blocks fit), and an SM holding merge blocks takes the
  // next call's second stage-1 CTA only once they end: 64 CTAs then started after the merge and
  // staged q 2-3 us after the others. 4-warp blocks pack 3 to an SM, so fewer SMs wait (45), and
  // chunks of 16 keep 33 splits to one round trip at 4 groups. H200, same run, 256 -> 128 threads
  // (D=128; D=64 had 128): D=128 B=1 128k 27.22 -> 26.69 us, 32k 13.74 -> 11.87, 8k 9.19 -> 7.86,
  // B=2 64k 28.78 -> 28.42; D=64 128k 11.16 -> 10.96, 32k 8.71 -> 8.29 (bench/NOTES.md "Session
  // 18"). Plain launches take the same blocks, so both give the same bits. What keeps a 4-warp
  // block off is its 40 registers, and that is wanted: at 32 its blocks start beside two stage-1
  // CTAs, no stage-1 CTA starts late, and the calls get slower (every CTA released at once): the
  // merge capped at 32 registers, B=1 128k 26.85 -> 27.96 us; a helper shared by both merges
  // that brought chunk 8 to 32 registers, B=1 8k 7.82 -> 8.07, B=2 64k 28.64 -> 29.35
  // (bench/NOTES.md "Session 19"). Check MergeKernel's registers after any change to it.
  const int z = few_rows ? params.head_dim / 32 : 1;
  const int channels = params.head_dim / z;
  const int max_threads = few_rows ? 128 : 512;
  const int avg_splits = (params.num_work + params.num_seqs - 1) / params.num_seqs;
  int groups = 1;
  while (groups < kMergeGroups && 4 * groups < avg_splits && channels * groups < max_threads) {
    groups *= 2;
  }
  // D = 64 sequences of more splits than these blocks merge in one round (B=1 at long context: 88
  // against 64) take one block of 2 groups per head, one round for up to 96 splits. H200, same
  // run: D=64 B=1 128k 10.96 -> 10.19 us, 32k 8.21 -> 6.94, other shapes +-1%. Such blocks at
  // D = 128 (1 group of 33 splits, 32 blocks, where these take one round) were slower: B=1 128k
  // +2.6%, 32k +14.5% (bench/NOTES.md "Session 19").
  if (few_rows && params.head_dim == kMergeRowDim && avg_splits > 16 * groups &&
      params.num_work <= kMergeRowSplits) {
    return LaunchMergeRows(params, overlap, stream);
  }
  const dim3 merge_grid(params.num_seqs, params.num_q_heads, z);
  const bool wide = avg_splits > 8 * groups;  // chunks of 16 keep more splits to one round
  const int threads = channels * groups;
  const size_t smem = threads * sizeof(float);  // s_acc
  if (overlap) {
    return cuda::LaunchOverlappingPrior(wide ? MergeKernel<true, 16> : MergeKernel<true, 8>,
                                        merge_grid, threads, smem, stream, params);
  }
  (wide ? MergeKernel<false, 16> : MergeKernel<false, 8>)<<<merge_grid, threads, smem, stream>>>(
      params);
  return cudaGetLastError();
}

namespace {

// Splits per tier for one wave of `ctas_per_sm` stage-1 CTAs per SM, and whether the BF16 tier is
// fused into the INT2 splits.
struct WavePlan {
  int splits;
  bool fused;
};

// Few (sequence, KV head) pairs in a wave of 2 BF16-warp CTAs per SM: fuse the BF16 tier into the
// INT2 splits unless the separate plan's INT2 split and BF16 split (256 tokens) read about the
// same bytes. Fused, every CTA streams INT2 and the BF16 warp takes its share alongside; that wins
// when the BF16 split would be the long pole (short contexts) or when 2 of every 33 CTAs would
// spend most of the wave idle (long ones), and loses in between, where the separate splits are
// balanced and the share adds to the fused split. H200, same run (bench/NOTES.md "v15 plan"),
// separate -> fused, with the INT2/BF16 split byte ratio: D=128 B=1 8k 15.2 -> 10.5 us (0.15),
// 32k 16.3 -> 16.5 (0.58), 128k 33.2 -> 32.1..32.5 (2.3), B=2 64k 35.0 -> 31.2 (2.6); D=64 B=1 8k
// 8.0 -> 7.1 (0.16), 32k 10.0 -> 9.8 (0.23), 128k 13.6 -> 14.7 (0.93), B=4 32k 13.7 -> 13.9 (1.0).
bool FuseFewPairs(int int2_splits, int head_dim, int max_int2_tokens, int min_tokens_per_split) {
  const int64_t int2_split_tokens = std::max<int64_t>(
      min_tokens_per_split, (int64_t{max_int2_tokens} + int2_splits - 1) / int2_splits);
  const double ratio =
      static_cast<double>(int2_split_tokens * Int2PageUnitBytes(head_dim)) /
      (static_cast<double>(min_tokens_per_split) * Bf16PageUnitBytes(head_dim));
  return ratio < 0.4 || ratio > 1.6;
}

WavePlan PlanForWave(int head_ctas, int num_sms, int ctas_per_sm, int head_dim,
                     int max_int2_tokens, int min_tokens_per_split) {
  const int splits = std::max(1, num_sms * ctas_per_sm) / head_ctas;
  if (splits >= 16) {
    // Few (sequence, KV head) pairs (batch 1-3 at long context): at most 3 INT2 CTAs per SM even
    // when more fit, because each split costs fixed work (q staging, ring fill, epilogue, and its
    // partial in the merge) that a fourth CTA per SM did not repay (H200, B=1, 4-CTA kernel: D=64
    // 128k 16.8 -> 15.8 us, D=128 32k 24.2 -> 19.6 us; bench/NOTES.md "v12 plan"). Separate BF16
    // splits, 2 per pair, cost <= 1/8 of the INT2 splits. In the plain layout they stay separate
    // (H200, B=1 128k D=128: 41.5 us that way, 43.9 us fused: the CTAs that get a share form a
    // tail); with the BF16 warp, FuseFewPairs decides.
    constexpr int kFewPairsInt2CtasPerSm = 3;
    const int separate = num_sms * std::min(ctas_per_sm, kFewPairsInt2CtasPerSm) / head_ctas - 2;
    if (ctas_per_sm <= 2 &&
        FuseFewPairs(separate, head_dim, max_int2_tokens, min_tokens_per_split)) {
      return {splits, true};
    }
    return {separate, false};
  }
  // Many pairs: the BF16 tier (sink + recent) is shared out among each sequence's INT2 splits
  // (Tier::kInt2WithBf16) instead of 2 BF16 CTAs per pair that wait for slots and delay INT2
  // CTAs. (H200, B=32 8k D=128: 80.5 us fused, 98.6 us with BF16 splits.)
  return {splits, true};
}

}  // namespace

DecodePlanConfig GpuDecodePlanConfig(int num_seqs, int num_kv_heads, int num_q_heads,
                                     int head_dim, int max_int2_tokens, int num_sms,
                                     int ctas_per_sm) {
  constexpr int kMinTokensPerSplit = 256;
  const int group = num_q_heads / std::max(1, num_kv_heads);
  const int head_ctas = std::max(1, num_seqs * num_kv_heads *
                                        ((group + kMaxHeadsPerCta - 1) / kMaxHeadsPerCta));
  auto wave_of = [&](int per_sm) {
    return PlanForWave(head_ctas, num_sms, per_sm, head_dim, max_int2_tokens, kMinTokensPerSplit);
  };
  WavePlan wave;
  if (ctas_per_sm > 0) {
    wave = wave_of(ctas_per_sm);
  } else {
    // A wave of 2 CTAs per SM, which DecodeAttentionCuda runs with the BF16 warp
    // (Stage1Cta::kBf16Warp), when its CTAs fill >= 90% of it; else of 3 per SM (kBf16Warp3 when
    // they fit in one wave). H200, same run, 2 vs 3 plain CTAs per SM: D=128 B=8 32k 57.2 vs 60.8
    // us, B=1 128k 33.2 vs 33.6; D=64 B=1 128k 14.0 vs 14.2; D=64 B=32 8k (192 CTAs: 73% of the
    // 2-per-SM wave) 23.8 vs 20.8 (bench/NOTES.md "v14").
    const WavePlan two = wave_of(2);
    const int64_t ctas = static_cast<int64_t>(head_ctas) * (two.splits + (two.fused ? 0 : 2));
    wave = 10 * ctas >= 9 * 2 * static_cast<int64_t>(num_sms) ? two
                                                               : wave_of(kDecodeStage1CtasPerSm);
  }
  DecodePlanConfig config;
  config.fuse_bf16_into_int2 = wave.fused;
  config.max_splits_per_tier = std::clamp(wave.splits, 1, 512);
  config.min_tokens_per_split = kMinTokensPerSplit;
  return config;
}

}  // namespace oscarkv::kernels

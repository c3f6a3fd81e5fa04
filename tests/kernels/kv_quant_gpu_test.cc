// GPU fused quantizer (KvQuantCuda, DemoteToPagesCuda) against the CPU reference KvQuantRef:
// byte-for-byte equal output buffers (codes, fp16 params, and every byte the reference leaves
// alone still holding the poison written before the run).
// Per-token rows: bf16 and f32 input, with and without a random orthogonal rotation, K (0.96) and
// V (0.92) clip ratios, no clip, k = 1, k past the fast path (sorted lists only),
// head_dim 128 and 64, H = 3 / 4 / 8; value patterns that stress the exact paths (heavy tails,
// ties, zero rows and mostly-zero rows, signed zeros, narrow ranges far from 0, fp16-subnormal
// params, outliers clustered so that the clip threshold's fast path falls back); token counts
// that leave partial pages and units; many units (grid-stride loops, rotated too); unaligned input
// and output strides (scalar loads / stores); demotion into shuffled INT2 pages of the decode pool
// layout. The host part also checks the code-bound constants. KIVI-2 / OScaR grouped kinds and
// token norms into linear segments. Exit 0 = pass, 1 = fail, 77 = no GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/attention/decode_attention.h"
#include "kernels/quant/int2_code_bounds.h"
#include "kernels/quant/kv_quant_cuda.h"
#include "kernels/quant/kv_quant_ref.h"
#include "lib/kvformat/float16.h"
#include "tests/kernels/gpu_test_util.h"

namespace oscarkv {
namespace {

using kernels::KvQuantParams;
using kvformat::SegmentKind;
using testing::ToDevice;
using testing::ToHost;

constexpr uint8_t kPoison = 0xa5;

// Values of the input rows.
enum class Pattern {
  kHeavyTail,    // 0.5 t(3) + 0.1 N(0,1): outliers, so the clip matters
  kTies,         // multiples of 0.25 in [-1, 1]: many equal magnitudes in a row
  kZeroRows,     // by row: all +0; two nonzeros (tau = 0); some zeros; >= 0 with zeros
  kSignedZeros,  // >= 0 rows whose zeros are +0 or -0 at random, and mostly -0 rows
  kNarrow,       // 3 + 0.01 N (bf16) / 1000 + 0.001 N (f32): range far below the minimum
  kTiny,         // 1e-6 t(3): fp16-subnormal scale and min
  kClustered,    // heavy tail plus 11-12 large values, the top 6 on channels that the kernel's
                 // fast path keeps in one list (lane 0's): it runs dry, the sorted path runs
  kColumn,       // heavy tail plus 12 large values on one bf16 column of the kernel (lane 0's
                 // even channels): more than the long lists hold at k = 11..16 (D = 128)
  kHuge,         // by row: magnitudes up to 1e38 (the fp16 scale overflows), around -1e5 (the
                 // fp16 min overflows), heavy tail, about 2^118 (the edge of the FMA-pipe code
                 // compares measured and dropped in bench/NOTES.md "Session 30")
};

struct Case {
  int tokens;
  int heads;
  int d;
  float clip;
  bool bf16;
  bool rotate;
  bool paged;
  uint64_t seed;
  Pattern pattern = Pattern::kHeavyTail;
  SegmentKind kind = SegmentKind::kInt2PerToken;
  bool token_norms = false;
  int input_pad = 0;   // input token stride = heads * d + input_pad elements
  int output_gap = 0;  // linear: output head stride = segment bytes + output_gap
};

const char* PatternName(Pattern p) {
  switch (p) {
    case Pattern::kHeavyTail:
      return "heavy";
    case Pattern::kTies:
      return "ties";
    case Pattern::kZeroRows:
      return "zero-rows";
    case Pattern::kSignedZeros:
      return "signed-zeros";
    case Pattern::kNarrow:
      return "narrow";
    case Pattern::kTiny:
      return "tiny";
    case Pattern::kClustered:
      return "clustered";
    case Pattern::kColumn:
      return "column";
    case Pattern::kHuge:
      return "huge";
  }
  return "?";
}

// Random orthogonal matrix (Gram-Schmidt on Gaussian rows, in double).
std::vector<float> RandomRotation(int d, std::mt19937_64& rng) {
  std::normal_distribution<double> n(0.0, 1.0);
  std::vector<double> m(static_cast<size_t>(d) * d);
  for (double& x : m) x = n(rng);
  for (int i = 0; i < d; ++i) {
    for (int j = 0; j < i; ++j) {
      double dot = 0.0;
      for (int k = 0; k < d; ++k) dot += m[i * d + k] * m[j * d + k];
      for (int k = 0; k < d; ++k) m[i * d + k] -= dot * m[j * d + k];
    }
    double norm = 0.0;
    for (int k = 0; k < d; ++k) norm += m[i * d + k] * m[i * d + k];
    norm = std::sqrt(norm);
    for (int k = 0; k < d; ++k) m[i * d + k] /= norm;
  }
  return std::vector<float>(m.begin(), m.end());
}

// One row of `d` values following `pattern`; `row` picks the variant of the zero patterns.
void FillRow(Pattern pattern, bool bf16, int64_t row, int d, std::mt19937_64& rng, float* x) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::student_t_distribution<float> heavy(3.0f);
  std::uniform_int_distribution<int> pick(0, d - 1);
  switch (pattern) {
    case Pattern::kHeavyTail:
      for (int i = 0; i < d; ++i) x[i] = 0.5f * heavy(rng) + 0.1f * n(rng);
      return;
    case Pattern::kTies: {
      std::uniform_int_distribution<int> level(-4, 4);
      for (int i = 0; i < d; ++i) x[i] = 0.25f * static_cast<float>(level(rng));
      return;
    }
    case Pattern::kZeroRows:
      for (int i = 0; i < d; ++i) x[i] = 0.0f;
      switch (row % 4) {
        case 0:  // all zero
          return;
        case 1:  // two nonzeros: tau = 0 for every clip ratio served
          x[pick(rng)] = 1.5f;
          x[pick(rng)] = -0.75f;
          return;
        case 2:  // a normal row with exact zeros
          for (int i = 0; i < d; ++i) x[i] = (i % 5 == 0) ? 0.0f : n(rng);
          return;
        default:  // >= 0 with zeros: the minimum is a zero
          for (int i = 0; i < d; ++i) x[i] = (i % 7 == 3) ? 0.0f : std::fabs(n(rng));
          return;
      }
    case Pattern::kSignedZeros: {
      std::bernoulli_distribution coin(0.5);
      if (row % 2 == 0) {  // >= 0, zeros of both signs: the first zero decides the sign of min
        for (int i = 0; i < d; ++i) {
          x[i] = (i % 3 == 1) ? (coin(rng) ? -0.0f : 0.0f) : std::fabs(n(rng));
        }
      } else {  // -0 everywhere but a few values: with tau = 0 negatives clip to -0
        for (int i = 0; i < d; ++i) x[i] = -0.0f;
        x[pick(rng)] = -2.0f;
        x[pick(rng)] = 0.5f;
        if (coin(rng)) x[0] = -1.0f;
      }
      return;
    }
    case Pattern::kNarrow:
      for (int i = 0; i < d; ++i) x[i] = bf16 ? 3.0f + 0.01f * n(rng) : 1000.0f + 0.001f * n(rng);
      return;
    case Pattern::kTiny:
      for (int i = 0; i < d; ++i) x[i] = 1e-6f * heavy(rng);
      return;
    case Pattern::kClustered: {
      // Lane 0 of a row holds channels [0, 8) of each quarter (d/4 channels); its bf16 list a
      // is the even channels of those, its float list a the first two quarters' chunks. The
      // last six (and largest) outliers all fall into that list.
      static constexpr int kBf16At128[] = {1, 3, 5, 33, 35, 0, 2, 4, 6, 32, 34};
      static constexpr int kF32At128[] = {64, 66, 96, 98, 100, 0, 1, 2, 3, 4, 5};
      static constexpr int kBf16At64[] = {1, 3, 17, 19, 0, 2, 16, 18, 32, 34, 48, 50};
      static constexpr int kF32At64[] = {32, 34, 48, 50, 0, 1, 2, 3, 16, 17, 18, 19};
      for (int i = 0; i < d; ++i) x[i] = 0.5f * heavy(rng);
      const int* at = d == 128 ? (bf16 ? kBf16At128 : kF32At128) : (bf16 ? kBf16At64 : kF32At64);
      const int n = d == 128 ? 11 : 12;
      for (int i = 0; i < n; ++i) x[at[i]] = (i % 2 == 0 ? 1.0f : -1.0f) * (5.0f + 0.75f * i);
      return;
    }
    case Pattern::kColumn: {
      // Lane 0's even channels of each quarter: 2b for b < 4, plus q d/4. Twelve of its sixteen.
      for (int i = 0; i < d; ++i) x[i] = 0.5f * heavy(rng);
      for (int i = 0; i < 12; ++i) {
        x[(i % 4) * (d / 4) + 2 * (i / 4)] = (i % 2 == 0 ? 1.0f : -1.0f) * (5.0f + 0.75f * i);
      }
      return;
    }
    case Pattern::kHuge:
      for (int i = 0; i < d; ++i) {
        const float t = std::fmin(std::fmax(heavy(rng), -100.0f), 100.0f);
        const float sign = i % 2 != 0 ? 1.0f : -1.0f;
        switch (row % 4) {
          case 0: x[i] = 1e36f * t; break;
          case 1: x[i] = -1e5f + 10.0f * n(rng); break;
          case 2: x[i] = 0.5f * t; break;
          default: x[i] = sign * 0x1.02p118f * (1.0f + 0.01f * std::fabs(n(rng)));
        }
      }
      return;
  }
}

// Compares `got` with `want` byte by byte; prints the first mismatches. Returns the count.
size_t CountMismatches(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                       const char* what) {
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i] && bad++ < 6) {
      std::printf("  %s byte %zu: got 0x%02x want 0x%02x\n", what, i, got[i], want[i]);
    }
  }
  return bad;
}

bool RunCase(const Case& c) {
  std::mt19937_64 rng(c.seed);
  const int64_t row_elems = static_cast<int64_t>(c.heads) * c.d;
  const int64_t stride = row_elems + c.input_pad;
  const size_t elems = static_cast<size_t>(c.tokens) * stride;
  // Padding holds NaN: a kernel reading it would put NaN into a row.
  std::vector<float> xf(elems, std::numeric_limits<float>::quiet_NaN());
  for (int t = 0; t < c.tokens; ++t) {
    for (int h = 0; h < c.heads; ++h) {
      FillRow(c.pattern, c.bf16, static_cast<int64_t>(t) * c.heads + h, c.d, rng,
              xf.data() + t * stride + static_cast<int64_t>(h) * c.d);
    }
  }
  std::vector<uint16_t> xb(elems);
  for (size_t i = 0; i < elems; ++i) {
    xb[i] = kvformat::FloatToBf16Bits(xf[i]);
    if (c.bf16) xf[i] = kvformat::Bf16BitsToFloat(xb[i]);
  }
  const std::vector<float> rot = RandomRotation(c.d, rng);
  const int64_t seg = static_cast<int64_t>(kvformat::SegmentBytes(c.kind, c.tokens, c.d));
  const int64_t out_stride = seg + c.output_gap;

  KvQuantParams hp;
  if (c.bf16)
    hp.input_bf16 = xb.data();
  else
    hp.input_f32 = xf.data();
  hp.input_token_stride = c.input_pad == 0 ? 0 : stride;
  hp.rotation = c.rotate ? rot.data() : nullptr;
  hp.tokens = c.tokens;
  hp.heads = c.heads;
  hp.head_dim = c.d;
  hp.kind = c.kind;
  hp.clip_ratio = c.clip;
  hp.output_head_stride = c.output_gap == 0 ? 0 : out_stride;
  std::vector<uint8_t> ref(static_cast<size_t>(out_stride) * c.heads, kPoison);
  hp.output = ref.data();
  std::vector<float> ref_norms(c.token_norms ? c.tokens : 0);
  if (c.token_norms) hp.token_norms_out = ref_norms.data();
  if (kernels::KvQuantRef(hp) != kernels::KvQuantStatus::kOk) {
    std::printf("reference failed\n");
    return false;
  }

  KvQuantParams dp = hp;
  uint16_t* d_xb = ToDevice(xb);
  float* d_xf = ToDevice(xf);
  float* d_rot = ToDevice(rot);
  dp.input_bf16 = c.bf16 ? d_xb : nullptr;
  dp.input_f32 = c.bf16 ? nullptr : d_xf;
  dp.rotation = c.rotate ? d_rot : nullptr;
  size_t mismatches = 0;
  if (!c.paged) {
    uint8_t* d_out = ToDevice(ref);
    GPU_CHECK(cudaMemset(d_out, kPoison, ref.size()));
    dp.output = d_out;
    float* d_norms = nullptr;
    if (c.token_norms) {
      d_norms = ToDevice(ref_norms);
      GPU_CHECK(cudaMemset(d_norms, 0xff, ref_norms.size() * sizeof(float)));  // NaN poison
      dp.token_norms_out = d_norms;
    }
    GPU_CHECK(kernels::KvQuantCuda(dp, nullptr));
    GPU_CHECK(cudaDeviceSynchronize());
    mismatches += CountMismatches(ToHost(d_out, ref.size()), ref, "segment");
    GPU_CHECK(cudaFree(d_out));
    if (c.token_norms) {
      const std::vector<float> norms = ToHost(d_norms, ref_norms.size());
      for (size_t i = 0; i < norms.size(); ++i) {
        if (std::memcmp(&norms[i], &ref_norms[i], sizeof(float)) != 0 && mismatches++ < 12) {
          std::printf("  norm %zu: got %.9g want %.9g\n", i, norms[i], ref_norms[i]);
        }
      }
      GPU_CHECK(cudaFree(d_norms));
    }
  } else {
    // Token t of head h lands in row t % 8 of unit (ids[t / 8], h); everything else keeps the
    // poison, including the unused rows of a partial last page and pages not in `ids`.
    const int pages = (c.tokens + kernels::kPageTokens - 1) / kernels::kPageTokens;
    const int64_t unit = kernels::Int2PageUnitBytes(c.d);
    const int64_t offset = kernels::Int2PageVCodesOffset(c.d);  // as if V
    std::vector<int32_t> ids(pages + 5);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    ids.resize(pages);
    std::vector<uint8_t> want(static_cast<size_t>(pages + 5) * c.heads * unit, kPoison);
    const int m = c.d / 4;
    for (int h = 0; h < c.heads; ++h) {
      const uint8_t* rs = ref.data() + h * out_stride;
      for (int t = 0; t < c.tokens; ++t) {
        uint8_t* u = want.data() + (static_cast<int64_t>(ids[t / 8]) * c.heads + h) * unit + offset;
        std::memcpy(u + (t % 8) * m, rs + static_cast<int64_t>(t) * m, m);
        std::memcpy(u + 8 * m + (t % 8) * 4, rs + static_cast<int64_t>(c.tokens) * m + 4 * t, 4);
      }
    }
    uint8_t* d_pool = ToDevice(want);
    GPU_CHECK(cudaMemset(d_pool, kPoison, want.size()));
    int32_t* d_ids = ToDevice(ids);
    kernels::DemotePagesTarget tgt;
    tgt.pool = d_pool;
    tgt.page_ids = d_ids;
    tgt.page_stride_bytes = c.heads * unit;
    tgt.head_stride_bytes = unit;
    tgt.segment_offset_bytes = offset;
    GPU_CHECK(kernels::DemoteToPagesCuda(dp, tgt, nullptr));
    GPU_CHECK(cudaDeviceSynchronize());
    mismatches += CountMismatches(ToHost(d_pool, want.size()), want, "pool");
    GPU_CHECK(cudaFree(d_pool));
    GPU_CHECK(cudaFree(d_ids));
  }
  GPU_CHECK(cudaFree(d_xb));
  GPU_CHECK(cudaFree(d_xf));
  GPU_CHECK(cudaFree(d_rot));
  const bool ok = mismatches == 0;
  std::printf(
      "[kv_quant T=%d H=%d D=%d clip=%.3f %s rot=%d paged=%d kind=%d norms=%d %s pad=%d "
      "gap=%d] %s mismatched bytes %zu\n",
      c.tokens, c.heads, c.d, c.clip, c.bf16 ? "bf16" : "f32", c.rotate, c.paged,
      static_cast<int>(c.kind), c.token_norms, PatternName(c.pattern), c.input_pad, c.output_gap,
      ok ? "PASS" : "FAIL", mismatches);
  return ok;
}

// The constants of int2_code_bounds.h: q = RoundHalfUpBits(j) is the smallest float with
// fl(q + 0.5f) >= j.
bool CodeBoundConstantsHold() {
  bool ok = true;
  for (int j = 1; j <= 3; ++j) {
    const float q = kvformat::BitsFloat(kernels::int2_bounds::RoundHalfUpBits(j));
    const float below = kernels::int2_bounds::NextDown(q);
    volatile float up = q + 0.5f;
    volatile float down = below + 0.5f;
    if (!(up >= static_cast<float>(j)) || !(down < static_cast<float>(j))) ok = false;
  }
  std::printf("[code bound constants] %s\n", ok ? "PASS" : "FAIL");
  return ok;
}

// The kernels' float shortcut to the code bounds (CodeStepMin, FastCodeLowerBound) against the
// double derivation (CodeLowerBound): the step bound for every positive finite fp16 scale, and the
// verified fast bound, where it answers, for a grid of fp16 (scale, min) pairs. Host only.
bool FastCodeBoundsHold() {
  namespace b = kernels::int2_bounds;
  size_t bad = 0, tried = 0, answered = 0;
  for (uint32_t hs = 1; hs < 0x7c00u; ++hs) {
    const float s = kvformat::HalfBitsToFloat(static_cast<uint16_t>(hs));
    for (int j = 1; j <= 3; ++j) {
      const b::RoundsUpTo q = b::RoundsUpToFloat(kvformat::BitsFloat(b::RoundHalfUpBits(j)));
      const float want = b::CeilToFloat(b::MulRn(b::ToDouble(s), q.at), q.inclusive);
      if (kvformat::FloatBits(b::CodeStepMin(j, s)) != kvformat::FloatBits(want)) ++bad;
    }
  }
  const size_t step_bad = bad;
  for (uint32_t hs = 1; hs < 0x7c00u; hs += 61) {
    const float s = kvformat::HalfBitsToFloat(static_cast<uint16_t>(hs));
    for (uint32_t hm = 0; hm < 0x10000u; hm += 7) {
      const float m = kvformat::HalfBitsToFloat(static_cast<uint16_t>(hm));
      for (int j = 1; j <= 3; ++j) {
        ++tried;
        float y;
        if (!b::FastCodeLowerBound(b::CodeStepMin(j, s), m, &y)) continue;
        ++answered;
        const float want = b::CodeLowerBound(j, s, m);
        if (kvformat::FloatBits(y) != kvformat::FloatBits(want) && !(y == 0.0f && want == 0.0f)) {
          ++bad;
        }
      }
    }
  }
  std::printf("[fast code bounds] step mismatches %zu, fast mismatches %zu, answered %zu of %zu %s\n",
              step_bad, bad - step_bad, answered, tried, bad == 0 ? "PASS" : "FAIL");
  return bad == 0;
}

}  // namespace
}  // namespace oscarkv

int main() {
  if (!oscarkv::testing::HaveGpu()) {
    std::printf("no GPU: skipped\n");
    return 77;
  }
  using oscarkv::Case;
  using oscarkv::Pattern;
  using oscarkv::kvformat::SegmentKind;
  constexpr auto kPer = SegmentKind::kInt2PerToken;
  constexpr auto kChan = SegmentKind::kInt2ChannelGroup;
  constexpr auto kTok = SegmentKind::kInt2TokenGroup;
  const Case cases[] = {
      // {tokens, heads, d, clip, bf16, rotate, paged, seed, pattern, kind, norms, pad, gap}
      // Per token, linear segments.
      {256, 8, 128, 0.96f, true, true, false, 1},
      {256, 8, 128, 0.92f, true, true, false, 2},
      {100, 3, 64, 0.96f, true, true, false, 3},
      {64, 3, 64, 1.0f, false, true, false, 4},
      {50, 4, 128, 0.92f, false, false, false, 5},
      {45, 3, 64, 0.92f, false, false, false, 16, Pattern::kHeavyTail, kPer, false, 2, 2},
      {37, 8, 128, 0.96f, true, false, false, 17, Pattern::kHeavyTail, kPer, false, 4, 6},
      // The served ratios' builds with 16-byte aligned rows and segments (held offsets, a row
      // pointer): linear segments, where a unit's rows start 8 group rows into its head's
      // segment (36 bytes a token: a multiple of 4 tokens keeps the next head's segment
      // aligned); several units per warp and a partial last one, then a padded stride and head
      // gap that keep the alignment.
      {6340, 8, 128, 0.96f, true, false, false, 65},
      {6340, 8, 128, 0.92f, true, false, false, 66},
      {780, 8, 128, 0.96f, true, false, false, 67, Pattern::kHeavyTail, kPer, false, 8, 16},
      // Head counts that share no factor with a block's 8 units: the grid is cut to a multiple
      // of them (every lane keeps its head along the walk), with several units per warp.
      {6343, 5, 128, 0.96f, true, false, true, 68},
      {9004, 3, 128, 0.92f, true, false, false, 69},
      {7001, 7, 64, 0.96f, true, false, true, 70},
      // Demotion into pages: the served shapes, bf16 without rotation (the model's call), K and V
      // ratios, many units, partial last pages.
      {64, 8, 128, 0.96f, true, true, true, 6},
      {48, 3, 64, 0.92f, true, true, true, 7},
      {4096, 8, 128, 0.96f, true, false, true, 18},
      {4096, 8, 128, 0.92f, true, false, true, 19},
      {20000, 3, 64, 0.96f, true, false, true, 20},
      {20000, 3, 64, 0.92f, true, false, true, 21},
      // Warps that take three units or more (on the H200: 3 blocks of 8 warps on each of 132
      // SMs) and then a partial last one: its missing rows keep an earlier unit's words in the
      // lane's buffer, which must not reach a stored row.
      {6343, 8, 128, 0.92f, true, false, true, 63},
      {33797, 3, 64, 0.96f, true, false, true, 64},
      {61, 8, 128, 0.92f, true, false, true, 22},
      {45, 3, 64, 0.96f, true, false, true, 23},
      {13, 8, 128, 0.96f, false, true, true, 24},
      {512, 8, 128, 1.0f, true, false, true, 25},
      {512, 3, 64, 1.0f, true, false, true, 26},
      // k = 1, k = 16 (sorted lists only: D = 128 at 0.875), k = 8 (D = 64), large k.
      {256, 8, 128, 0.995f, true, false, true, 27},
      {512, 8, 128, 0.875f, true, false, true, 28},
      {512, 3, 64, 0.875f, true, false, true, 29},
      {256, 8, 128, 0.5f, true, false, true, 30},
      {256, 3, 64, 0.6f, false, false, true, 31},
      {128, 8, 128, 0.875f, false, true, true, 32},
      // Value patterns, bf16 and f32, both ratios and no clip.
      {256, 8, 128, 0.96f, true, false, true, 33, Pattern::kTies},
      {256, 3, 64, 0.92f, true, false, true, 34, Pattern::kTies},
      {256, 8, 128, 0.92f, false, false, true, 35, Pattern::kTies},
      {256, 3, 64, 0.96f, false, false, false, 36, Pattern::kTies},
      {256, 8, 128, 0.96f, true, false, true, 80, Pattern::kHuge},
      {256, 8, 128, 0.92f, true, false, true, 81, Pattern::kHuge},
      {256, 8, 128, 1.0f, true, false, true, 82, Pattern::kHuge},
      {256, 8, 128, 0.96f, true, false, true, 37, Pattern::kZeroRows},
      {256, 3, 64, 0.92f, true, false, true, 38, Pattern::kZeroRows},
      {256, 8, 128, 1.0f, false, false, true, 39, Pattern::kZeroRows},
      {256, 8, 128, 0.92f, true, false, true, 40, Pattern::kSignedZeros},
      {256, 3, 64, 0.96f, false, false, true, 41, Pattern::kSignedZeros},
      {256, 8, 128, 1.0f, true, false, false, 42, Pattern::kSignedZeros},
      {256, 8, 128, 0.96f, true, false, true, 43, Pattern::kNarrow},
      {256, 3, 64, 0.92f, false, false, true, 44, Pattern::kNarrow},
      {256, 8, 128, 0.92f, true, false, true, 45, Pattern::kTiny},
      {256, 3, 64, 1.0f, false, false, true, 46, Pattern::kTiny},
      {256, 8, 128, 0.96f, true, false, true, 49, Pattern::kClustered},
      {256, 8, 128, 0.92f, true, false, true, 50, Pattern::kClustered},
      {256, 3, 64, 0.92f, true, false, true, 51, Pattern::kClustered},
      {256, 8, 128, 0.92f, false, false, true, 52, Pattern::kClustered},
      {256, 3, 64, 0.92f, false, false, false, 53, Pattern::kClustered},
      {256, 8, 128, 0.96f, false, false, false, 54, Pattern::kClustered},
      {256, 3, 64, 0.875f, true, false, true, 55, Pattern::kClustered},
      {256, 3, 64, 0.875f, false, false, true, 56, Pattern::kClustered},
      {256, 8, 128, 0.96f, true, false, true, 59, Pattern::kColumn},
      {256, 8, 128, 0.92f, true, false, true, 60, Pattern::kColumn},
      {256, 8, 128, 0.875f, true, false, true, 61, Pattern::kColumn},
      {256, 3, 64, 0.8f, true, false, true, 62, Pattern::kColumn},
      {4096, 8, 128, 0.96f, true, true, true, 57},
      {20000, 3, 64, 0.92f, true, true, true, 58},
      {96, 8, 128, 0.92f, true, true, true, 47, Pattern::kTies},
      {96, 3, 64, 0.96f, false, true, true, 48, Pattern::kZeroRows},
      // KIVI-2 (M7): K channel groups, V token groups, no rotation or clip; OScaR (M8): rotated,
      // clipped, K divided by the token norms over all heads.
      {256, 8, 128, 1.0f, true, false, false, 8, Pattern::kHeavyTail, kChan},
      {96, 3, 64, 1.0f, true, false, false, 9, Pattern::kHeavyTail, kChan},
      {100, 8, 128, 1.0f, true, false, false, 10, Pattern::kHeavyTail, kTok},
      {45, 3, 64, 1.0f, false, false, false, 11, Pattern::kHeavyTail, kTok},
      {256, 8, 128, 0.96f, true, true, false, 12, Pattern::kHeavyTail, kChan, true},
      {64, 3, 64, 0.96f, true, true, false, 13, Pattern::kHeavyTail, kChan, true},
      {256, 8, 128, 0.92f, true, true, false, 14, Pattern::kHeavyTail, kTok},
      {70, 3, 64, 0.92f, false, true, false, 15, Pattern::kHeavyTail, kPer, true},
  };
  bool ok = oscarkv::CodeBoundConstantsHold();
  ok = oscarkv::FastCodeBoundsHold() && ok;
  for (const Case& c : cases) ok = oscarkv::RunCase(c) && ok;
  std::printf("%s\n", ok ? "ALL PASS" : "SOME FAILED");
  return ok ? 0 : 1;
}

// CPU reference of paged decode attention (decode_attention.h), also the production CPU path.
// Float arithmetic in SIMD lanes, written as the GPU kernel is: a tier-agnostic split loop
// parameterised by a row loader (STYLE habit 6), each split on one thread (several splits may
// run on several threads), then an exact log-sum-exp merge on the caller's thread.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/attention/decode_attention.h"
#include "lib/kvformat/float16.h"

namespace oscarkv::kernels {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int RoundUpToPage(int tokens) {
  return (tokens + kPageTokens - 1) / kPageTokens * kPageTokens;
}

// Lane-parallel arithmetic in GCC/Clang vector extensions, kLanes floats wide (one AVX2
// register, two SSE2 ones): the loops over head_dim (a multiple of 32, validated) run in SIMD
// without letting the compiler reassociate float sums. A dot product keeps kLanes partial sums
// and adds them pairwise at the end. Floats are multiplied and added, never fused (ISO C++ mode
// keeps -ffp-contract=off), so every instruction set the stage is built for (RunSplit below)
// gives the same bits.
constexpr int kLanes = 8;
// 32-byte vectors are passed in memory by the SSE2 build's ABI; the helpers below are always
// inlined, so no call passes them and GCC's note about that ABI does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

using FloatLanes = float __attribute__((vector_size(kLanes * sizeof(float))));
using U32Lanes = uint32_t __attribute__((vector_size(kLanes * sizeof(uint32_t))));
using U16Lanes = uint16_t __attribute__((vector_size(kLanes * sizeof(uint16_t))));
using I32Lanes = int32_t __attribute__((vector_size(kLanes * sizeof(int32_t))));
using ByteLanes = uint8_t __attribute__((vector_size(kLanes)));

// The helpers below are inlined into each instruction set's build of RunSplit.
#define OSCARKV_LANES_INLINE inline __attribute__((always_inline))

template <typename V>
OSCARKV_LANES_INLINE V Load(const void* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}
template <typename V>
OSCARKV_LANES_INLINE void Store(void* p, const V& v) {
  std::memcpy(p, &v, sizeof(V));
}

static_assert(kLanes == kPageTokens, "a page's scores are one vector");

// Lane r of the result: the sum of the lanes of v[r], added pairwise ((0+1)+(2+3))+((4+5)+(6+7))
// by a transpose-and-add over the eight vectors.
OSCARKV_LANES_INLINE FloatLanes SumEach(const FloatLanes (&v)[kLanes]) {
  auto pairs = [](FloatLanes a, FloatLanes b) {  // a0+a1, b0+b1, a2+a3, b2+b3, ...
    return __builtin_shufflevector(a, b, 0, 8, 2, 10, 4, 12, 6, 14) +
           __builtin_shufflevector(a, b, 1, 9, 3, 11, 5, 13, 7, 15);
  };
  auto quads = [](FloatLanes a, FloatLanes b) {  // a, b as pairs -> sums of four lanes
    return __builtin_shufflevector(a, b, 0, 1, 8, 9, 4, 5, 12, 13) +
           __builtin_shufflevector(a, b, 2, 3, 10, 11, 6, 7, 14, 15);
  };
  const FloatLanes low = quads(pairs(v[0], v[1]), pairs(v[2], v[3]));
  const FloatLanes high = quads(pairs(v[4], v[5]), pairs(v[6], v[7]));
  return __builtin_shufflevector(low, high, 0, 1, 2, 3, 8, 9, 10, 11) +
         __builtin_shufflevector(low, high, 4, 5, 6, 7, 12, 13, 14, 15);
}

// The dot products of q[D] with the kPageTokens rows of k[rows][D], one per lane.
OSCARKV_LANES_INLINE FloatLanes PageScores(const float* q, const float* k, int d) {
  FloatLanes part[kPageTokens] = {};
  for (int c = 0; c < d; c += kLanes) {
    const FloatLanes qc = Load<FloatLanes>(q + c);
#pragma GCC unroll 8  // keeps part[] in registers
    for (int r = 0; r < kPageTokens; ++r) {
      part[r] += qc * Load<FloatLanes>(k + static_cast<int64_t>(r) * d + c);
    }
  }
  return SumEach(part);
}

// acc[D] = acc * rescale + sum over rows r < n of weight[r] * v[r][D], rows in order.
OSCARKV_LANES_INLINE void RescaleAndAccumulate(float* acc, float rescale, const float* v,
                                               const float* weight, int n, int d) {
  if (n == kPageTokens) {  // a whole page: the weights stay in registers across the columns
    FloatLanes w[kPageTokens];
    for (int r = 0; r < kPageTokens; ++r) w[r] = FloatLanes{} + weight[r];
    for (int c = 0; c < d; c += kLanes) {
      FloatLanes a = Load<FloatLanes>(acc + c) * rescale;
#pragma GCC unroll 8
      for (int r = 0; r < kPageTokens; ++r) {
        a += Load<FloatLanes>(v + static_cast<int64_t>(r) * d + c) * w[r];
      }
      Store(acc + c, a);
    }
    return;
  }
  for (int c = 0; c < d; c += kLanes) {
    FloatLanes a = Load<FloatLanes>(acc + c) * rescale;
    for (int r = 0; r < n; ++r) {
      a += Load<FloatLanes>(v + static_cast<int64_t>(r) * d + c) * weight[r];
    }
    Store(acc + c, a);
  }
}

// Loads rows [row_begin, row_end) of one page unit into float K and V buffers [rows][D].
struct Bf16RowLoader {
  int head_dim;
  OSCARKV_LANES_INLINE void operator()(const uint8_t* unit, int row_begin, int row_end, float* k,
                                       float* v) const {
    const int64_t begin = static_cast<int64_t>(row_begin) * head_dim;
    const int64_t n = static_cast<int64_t>(row_end - row_begin) * head_dim;
    Widen(unit + Bf16PageKOffset(head_dim) + begin * 2, n, k);
    Widen(unit + Bf16PageVOffset(head_dim) + begin * 2, n, v);
  }
  // bf16 is the top half of a float.
  OSCARKV_LANES_INLINE static void Widen(const uint8_t* bf16, int64_t n, float* out) {
    for (int64_t c = 0; c < n; c += kLanes) {
      const U32Lanes bits = __builtin_convertvector(Load<U16Lanes>(bf16 + c * 2), U32Lanes) << 16;
      Store(out + c, bits);
    }
  }
};

// Dequantises one packed per-token row (quartered split: byte j holds columns j, j + D/4,
// j + D/2 and j + 3D/4 in its bit pairs, lowest first) into out[D].
OSCARKV_LANES_INLINE void DequantInt2Row(const uint8_t* codes, kvformat::Int2Params params,
                                         int head_dim, float* out) {
  const float scale = kvformat::HalfBitsToFloat(params.scale_fp16);
  const float mn = kvformat::HalfBitsToFloat(params.min_fp16);
  const int m = head_dim / 4;
  for (int j = 0; j < m; j += kLanes) {  // m = D / 4, a multiple of 8
    // Widened to 32 bits first: bytes have no shifts or float conversions of their own.
    const I32Lanes b = __builtin_convertvector(Load<ByteLanes>(codes + j), I32Lanes);
    for (int quarter = 0; quarter < 4; ++quarter) {
      const I32Lanes code = (b >> (2 * quarter)) & 3;
      Store(out + j + quarter * m, __builtin_convertvector(code, FloatLanes) * scale + mn);
    }
  }
}

struct Int2RowLoader {
  int head_dim;
  OSCARKV_LANES_INLINE void operator()(const uint8_t* unit, int row_begin, int row_end, float* k,
                                       float* v) const {
    const int row_bytes = head_dim / 4;
    const uint8_t* k_codes = unit + Int2PageKCodesOffset(head_dim);
    const uint8_t* v_codes = unit + Int2PageVCodesOffset(head_dim);
    kvformat::Int2Params k_params[kPageTokens];
    kvformat::Int2Params v_params[kPageTokens];
    std::memcpy(k_params, unit + Int2PageKParamsOffset(head_dim), sizeof(k_params));
    std::memcpy(v_params, unit + Int2PageVParamsOffset(head_dim), sizeof(v_params));
    for (int r = row_begin; r < row_end; ++r) {
      float* kr = k + static_cast<int64_t>(r - row_begin) * head_dim;
      float* vr = v + static_cast<int64_t>(r - row_begin) * head_dim;
      DequantInt2Row(k_codes + r * row_bytes, k_params[r], head_dim, kr);
      DequantInt2Row(v_codes + r * row_bytes, v_params[r], head_dim, vr);
    }
  }
};

// Online-softmax state of one query head inside a split.
struct RowState {
  float m;
  float l;
};

// Attends the query heads of one KV head over tokens [begin, end) of one tier of sequence `seq`,
// continuing the online-softmax states st[g] and accumulators acc[g][D].
template <typename Loader>
OSCARKV_LANES_INLINE void AttendRange(const DecodeAttentionParams& p, const PagedTierTable& table,
                                      int seq, int kvh, int begin, int end, const Loader& load,
                                      std::vector<float>& acc, std::vector<RowState>& st) {
  // An empty range touches no table: a cache without a BF16 tier (M1/M2) leaves it unset.
  if (begin >= end) return;
  const int d = p.head_dim;
  const int g = p.num_q_heads / p.num_kv_heads;
  const int32_t* pages = table.page_indices + table.page_indptr[seq];
  // Rows of one page, D <= 256 (validated). Rows past a partial page's are scored too and then
  // dropped: zeroed here so that they are never uninitialised.
  alignas(64) float k[kPageTokens * 256];
  alignas(64) float v[kPageTokens * 256];
  std::fill_n(k, kPageTokens * d, 0.0f);
  const float* q0 = p.q + seq * p.q_seq_stride + static_cast<int64_t>(kvh) * g * d;
  for (int t = begin; t < end;) {
    const int page = pages[t / kPageTokens];
    const int row_begin = t % kPageTokens;
    const int row_end = std::min(kPageTokens, row_begin + (end - t));
    const uint8_t* unit = table.pool + page * table.page_stride_bytes +
                          static_cast<int64_t>(kvh) * table.head_stride_bytes;
    load(unit, row_begin, row_end, k, v);
    const int n = row_end - row_begin;
    for (int hh = 0; hh < g; ++hh) {
      const float* q = q0 + static_cast<int64_t>(hh) * d;
      float s[kPageTokens];
      Store(s, PageScores(q, k, d) * p.sm_scale);
      float m_new = st[hh].m;
      for (int r = 0; r < n; ++r) m_new = std::max(m_new, s[r]);
      const float rescale = std::exp(st[hh].m - m_new);  // exp(-inf) = 0 on the first page
      float l = st[hh].l * rescale;
      for (int r = 0; r < n; ++r) {
        s[r] = std::exp(s[r] - m_new);
        l += s[r];
      }
      RescaleAndAccumulate(acc.data() + static_cast<int64_t>(hh) * d, rescale, v, s, n, d);
      st[hh] = {m_new, l};
    }
    t += n;
  }
}

// Stage 1 for one work item: all KV heads, all query heads of each group. Built for AVX2 too
// where the compiler can (its byte-to-float conversions and 8-wide lanes are native there),
// picked at load time.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx2", "default")))
#endif
void RunSplit(const DecodeAttentionParams& p, const DecodeWorkItem& w, int work_index) {
  const int d = p.head_dim;
  const int g = p.num_q_heads / p.num_kv_heads;
  const Bf16RowLoader bf16_loader{d};
  const Int2RowLoader int2_loader{d};
  const bool bf16 = w.tier == static_cast<int32_t>(Tier::kBf16);
  // The BF16 share of a fused INT2 item.
  int fb = 0, fe = 0;
  if (w.tier == static_cast<int32_t>(Tier::kInt2WithBf16)) {
    const int k = work_index - p.seq_work_indptr[w.seq];
    const int n = p.seq_work_indptr[w.seq + 1] - p.seq_work_indptr[w.seq];
    FusedBf16Range(k, n, p.bf16.seq_tokens == nullptr ? 0 : p.bf16.seq_tokens[w.seq], &fb, &fe);
  }
  std::vector<float> acc(static_cast<size_t>(g) * d);
  std::vector<RowState> st(g);
  for (int kvh = 0; kvh < p.num_kv_heads; ++kvh) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (auto& x : st) x = {kNegInf, 0.0f};
    if (bf16) {
      AttendRange(p, p.bf16, w.seq, kvh, w.token_begin, w.token_end, bf16_loader, acc, st);
    } else {
      AttendRange(p, p.bf16, w.seq, kvh, fb, fe, bf16_loader, acc, st);
      AttendRange(p, p.int2, w.seq, kvh, w.token_begin, w.token_end, int2_loader, acc, st);
    }
    for (int hh = 0; hh < g; ++hh) {
      const int qh = kvh * g + hh;
      float* o = p.partial_out + (static_cast<int64_t>(work_index) * p.num_q_heads + qh) * d;
      float& lse = p.partial_lse[static_cast<int64_t>(work_index) * p.num_q_heads + qh];
      const float* a = acc.data() + static_cast<int64_t>(hh) * d;
      if (st[hh].l > 0.0f) {
        const float inv = 1.0f / st[hh].l;
        for (int c = 0; c < d; ++c) o[c] = a[c] * inv;
        lse = st[hh].m + std::log(st[hh].l);
      } else {
        for (int c = 0; c < d; ++c) o[c] = 0.0f;
        lse = kNegInf;
      }
    }
  }
}

const char* ValidateTable(const PagedTierTable& t, const DecodeAttentionParams& p,
                          int64_t unit_bytes) {
  if (t.seq_tokens == nullptr) return nullptr;
  if (t.page_indptr == nullptr || t.page_indices == nullptr || t.pool == nullptr) {
    return "tier table: seq_tokens set but page_indptr, page_indices or pool is null";
  }
  if (t.head_stride_bytes < unit_bytes ||
      t.page_stride_bytes < t.head_stride_bytes * p.num_kv_heads) {
    return "tier table: strides smaller than the page unit";
  }
  if (t.head_stride_bytes % 16 != 0 || t.page_stride_bytes % 16 != 0) {
    return "tier table: strides must be multiples of 16 bytes";
  }
  for (int b = 0; b < p.num_seqs; ++b) {
    const int64_t pages = t.page_indptr[b + 1] - t.page_indptr[b];
    if (t.seq_tokens[b] < 0 || pages < 0 || pages * kPageTokens < t.seq_tokens[b]) {
      return "tier table: a sequence has fewer pages than its tokens need";
    }
  }
  return nullptr;
}

}  // namespace

DecodePlan PlanDecodeAttention(const DecodePlanConfig& config, int num_seqs,
                               const int32_t* bf16_tokens, const int32_t* int2_tokens) {
  DecodePlan plan;
  plan.num_seqs = num_seqs;
  plan.seq_work_indptr.reserve(num_seqs + 1);
  plan.seq_work_indptr.push_back(0);
  const int min_chunk = RoundUpToPage(std::max(1, config.min_tokens_per_split));
  const int max_splits = std::max(1, config.max_splits_per_tier);
  for (int b = 0; b < num_seqs; ++b) {
    const bool fused = config.fuse_bf16_into_int2 && int2_tokens != nullptr && int2_tokens[b] > 0 &&
                       bf16_tokens != nullptr && bf16_tokens[b] > 0;
    for (int tier = 0; tier < 2; ++tier) {
      const int32_t* tokens = tier == 0 ? bf16_tokens : int2_tokens;
      const int n = tokens == nullptr ? 0 : tokens[b];
      if (n <= 0 || (fused && tier == 0)) continue;
      const int32_t tier_tag =
          fused ? static_cast<int32_t>(Tier::kInt2WithBf16) : static_cast<int32_t>(tier);
      int chunk;
      if (config.fixed_tokens_per_split > 0) {
        chunk = RoundUpToPage(config.fixed_tokens_per_split);
      } else {
        chunk = std::max(min_chunk, RoundUpToPage((n + max_splits - 1) / max_splits));
      }
      for (int begin = 0; begin < n; begin += chunk) {
        plan.work.push_back({b, tier_tag, begin, std::min(n, begin + chunk)});
      }
    }
    plan.seq_work_indptr.push_back(static_cast<int32_t>(plan.work.size()));
  }
  return plan;
}

const char* ValidateDecodeAttentionParams(const DecodeAttentionParams& p) {
  if (p.num_seqs < 0) return "num_seqs < 0";
  if (p.num_seqs == 0) return nullptr;
  if (p.num_kv_heads <= 0 || p.num_q_heads <= 0 || p.num_q_heads % p.num_kv_heads != 0) {
    return "num_q_heads must be a positive multiple of num_kv_heads";
  }
  if (p.head_dim <= 0 || p.head_dim % 32 != 0 || p.head_dim > 256) {
    return "head_dim must be a multiple of 32 in [32, 256]";
  }
  if (!(p.sm_scale > 0.0f)) return "sm_scale must be > 0 (normally 1/sqrt(head_dim))";
  if (p.q == nullptr || p.out == nullptr) return "q and out must be set";
  if (p.q_seq_stride < static_cast<int64_t>(p.num_q_heads) * p.head_dim ||
      p.out_seq_stride < static_cast<int64_t>(p.num_q_heads) * p.head_dim) {
    return "q_seq_stride and out_seq_stride must be >= Hq * D";
  }
  if (p.seq_work_indptr == nullptr) return "seq_work_indptr must be set";
  if (p.num_work > 0 && (p.work == nullptr || p.partial_out == nullptr ||
                         p.partial_lse == nullptr)) {
    return "work, partial_out and partial_lse must be set when num_work > 0";
  }
  if (p.seq_work_indptr[0] != 0 || p.seq_work_indptr[p.num_seqs] != p.num_work) {
    return "seq_work_indptr must run from 0 to num_work";
  }
  if (const char* e = ValidateTable(p.bf16, p, Bf16PageUnitBytes(p.head_dim))) return e;
  if (const char* e = ValidateTable(p.int2, p, Int2PageUnitBytes(p.head_dim))) return e;
  for (int b = 0; b < p.num_seqs; ++b) {
    if (p.seq_work_indptr[b + 1] < p.seq_work_indptr[b]) return "seq_work_indptr not monotone";
    if (p.one_split_per_seq && p.seq_work_indptr[b + 1] - p.seq_work_indptr[b] != 1) {
      return "one_split_per_seq needs exactly one work item per sequence";
    }
    for (int i = p.seq_work_indptr[b]; i < p.seq_work_indptr[b + 1]; ++i) {
      const DecodeWorkItem& w = p.work[i];
      const PagedTierTable& t = w.tier == static_cast<int32_t>(Tier::kBf16) ? p.bf16 : p.int2;
      if (w.seq != b || w.tier < 0 || w.tier > 2) return "work item: wrong seq or tier";
      const bool fused = w.tier == static_cast<int32_t>(Tier::kInt2WithBf16);
      if (fused != (p.work[p.seq_work_indptr[b]].tier == static_cast<int32_t>(Tier::kInt2WithBf16))) {
        return "work item: a sequence mixes kInt2WithBf16 items with other tiers";
      }
      const int n = t.seq_tokens == nullptr ? 0 : t.seq_tokens[b];
      if (w.token_begin < 0 || w.token_begin % kPageTokens != 0 || w.token_end > n ||
          w.token_begin > w.token_end) {
        return "work item: token range outside its tier";
      }
    }
  }
  return nullptr;
}

void MergeDecodePartialsRef(const DecodeAttentionParams& p) {
  const int d = p.head_dim;
  for (int b = 0; b < p.num_seqs; ++b) {
    const int w0 = p.seq_work_indptr[b];
    const int w1 = p.seq_work_indptr[b + 1];
    for (int h = 0; h < p.num_q_heads; ++h) {
      float* o = p.out + b * p.out_seq_stride + static_cast<int64_t>(h) * d;
      float lse_max = kNegInf;
      for (int i = w0; i < w1; ++i) {
        lse_max = std::max(lse_max, p.partial_lse[static_cast<int64_t>(i) * p.num_q_heads + h]);
      }
      for (int c = 0; c < d; ++c) o[c] = 0.0f;
      if (lse_max == kNegInf) {
        if (p.out_lse != nullptr) p.out_lse[static_cast<int64_t>(b) * p.num_q_heads + h] = kNegInf;
        continue;
      }
      float weight_sum = 0.0f;
      for (int i = w0; i < w1; ++i) {
        const float lse = p.partial_lse[static_cast<int64_t>(i) * p.num_q_heads + h];
        if (lse == kNegInf) continue;
        const float wgt = std::exp(lse - lse_max);
        weight_sum += wgt;
        const float* po = p.partial_out + (static_cast<int64_t>(i) * p.num_q_heads + h) * d;
        for (int c = 0; c < d; ++c) o[c] += wgt * po[c];
      }
      const float inv = 1.0f / weight_sum;
      for (int c = 0; c < d; ++c) o[c] *= inv;
      if (p.out_lse != nullptr) {
        p.out_lse[static_cast<int64_t>(b) * p.num_q_heads + h] = lse_max + std::log(weight_sum);
      }
    }
  }
}

const char* DecodeAttentionRef(const DecodeAttentionParams& p) {
  return DecodeAttentionRef(p, [](const auto& f) { f(0, 1); });
}

const char* DecodeAttentionRef(const DecodeAttentionParams& p, const RunOnThreads& run) {
  if (const char* e = ValidateDecodeAttentionParams(p)) return e;
  if (p.num_work > 1) {
    run([&p](int worker, int workers) {
      for (int i = worker; i < p.num_work; i += workers) RunSplit(p, p.work[i], i);
    });
  } else if (p.num_work == 1) {
    RunSplit(p, p.work[0], 0);
  }
  MergeDecodePartialsRef(p);
  return nullptr;
}

void AttendFloatRows(const float* q, int num_heads, int head_dim, const float* k, const float* v,
                     int64_t kv_row_stride, const float* score_scale, int num_tokens,
                     float sm_scale, AttentionState* states) {
  std::vector<float> s(num_tokens);
  for (int h = 0; h < num_heads; ++h) {
    AttentionState& st = states[h];
    st.acc.assign(head_dim, 0.0f);
    st.m = kNegInf;
    st.l = 0.0f;
    const float* qh = q + static_cast<int64_t>(h) * head_dim;
    for (int j = 0; j < num_tokens; ++j) {
      const float* kj = k + j * kv_row_stride;
      float dot = 0.0f;
      for (int c = 0; c < head_dim; ++c) dot += qh[c] * kj[c];
      s[j] = dot * sm_scale * (score_scale != nullptr ? score_scale[j] : 1.0f);
      st.m = std::max(st.m, s[j]);
    }
    if (num_tokens == 0) continue;
    for (int j = 0; j < num_tokens; ++j) {
      const float pj = std::exp(s[j] - st.m);
      st.l += pj;
      const float* vj = v + j * kv_row_stride;
      for (int c = 0; c < head_dim; ++c) st.acc[c] += pj * vj[c];
    }
  }
}

void MergeAttentionState(AttentionState& state, const AttentionState& other) {
  if (other.l == 0.0f) return;
  if (state.l == 0.0f) {
    state = other;
    return;
  }
  const float m = std::max(state.m, other.m);
  const float a = std::exp(state.m - m);
  const float b = std::exp(other.m - m);
  for (size_t c = 0; c < state.acc.size(); ++c) state.acc[c] = state.acc[c] * a + other.acc[c] * b;
  state.l = state.l * a + other.l * b;
  state.m = m;
}

void FinalizeAttentionState(const AttentionState& state, int head_dim, float* out) {
  const size_t d = static_cast<size_t>(head_dim);
  if (state.l == 0.0f || state.acc.size() != d) {
    for (size_t c = 0; c < d; ++c) out[c] = 0.0f;
    return;
  }
  const float inv = 1.0f / state.l;
  for (size_t c = 0; c < d; ++c) out[c] = state.acc[c] * inv;
}

}  // namespace oscarkv::kernels

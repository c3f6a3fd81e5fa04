// Tests of the CPU reference of paged decode attention against float64 softmax over the
// concatenated (dequantised) cache.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/attention/decode_attention.h"
#include "lib/kvformat/float16.h"
#include "lib/kvformat/int2_block.h"

namespace oscarkv::kernels {
namespace {

using kvformat::Int2Params;

// One sequence's cache content: BF16 rows and INT2 rows per KV head, as float64 values the
// reference uses, plus the raw encodings the pool is built from.
struct SeqCache {
  int bf16_tokens = 0;
  int int2_tokens = 0;
  // [Hkv][tokens][D] bf16 bits
  std::vector<uint16_t> bf16_k, bf16_v;
  // [Hkv][tokens][D/4] codes and [Hkv][tokens] params
  std::vector<uint8_t> int2_k_codes, int2_v_codes;
  std::vector<Int2Params> int2_k_params, int2_v_params;
};

struct Shape {
  int hkv;
  int group;  // Hq / Hkv
  int d;
  int hq() const { return hkv * group; }
};

Int2Params RandomParams(std::mt19937& rng) {
  std::uniform_real_distribution<float> scale(0.05f, 0.6f);
  std::uniform_real_distribution<float> mn(-1.2f, -0.1f);
  return {kvformat::FloatToHalfBits(scale(rng)), kvformat::FloatToHalfBits(mn(rng))};
}

SeqCache RandomSeq(const Shape& s, int bf16_tokens, int int2_tokens, std::mt19937& rng) {
  SeqCache c;
  c.bf16_tokens = bf16_tokens;
  c.int2_tokens = int2_tokens;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  c.bf16_k.resize(static_cast<size_t>(s.hkv) * bf16_tokens * s.d);
  c.bf16_v.resize(c.bf16_k.size());
  for (auto& x : c.bf16_k) x = kvformat::FloatToBf16Bits(normal(rng));
  for (auto& x : c.bf16_v) x = kvformat::FloatToBf16Bits(normal(rng));
  c.int2_k_codes.resize(static_cast<size_t>(s.hkv) * int2_tokens * (s.d / 4));
  c.int2_v_codes.resize(c.int2_k_codes.size());
  for (auto& x : c.int2_k_codes) x = static_cast<uint8_t>(byte(rng));
  for (auto& x : c.int2_v_codes) x = static_cast<uint8_t>(byte(rng));
  c.int2_k_params.resize(static_cast<size_t>(s.hkv) * int2_tokens);
  c.int2_v_params.resize(c.int2_k_params.size());
  for (auto& x : c.int2_k_params) x = RandomParams(rng);
  for (auto& x : c.int2_v_params) x = RandomParams(rng);
  return c;
}

// Dequantised value of channel `ch` of a packed row, by the layout contract (independent of the
// implementation: channel ch lives in byte ch % (D/4), quarter ch / (D/4)).
double Int2Value(const uint8_t* row, Int2Params p, int d, int ch) {
  const int m = d / 4;
  const int code = (row[ch % m] >> (2 * (ch / m))) & 3;
  return code * static_cast<double>(kvformat::HalfBitsToFloat(p.scale_fp16)) +
         static_cast<double>(kvformat::HalfBitsToFloat(p.min_fp16));
}

// Float64 rows [tokens][D] of one KV head: BF16 rows then INT2 rows (order is irrelevant).
void RowsF64(const Shape& s, const SeqCache& c, int h, std::vector<double>& k,
             std::vector<double>& v) {
  const int n = c.bf16_tokens + c.int2_tokens;
  k.assign(static_cast<size_t>(n) * s.d, 0.0);
  v.assign(k.size(), 0.0);
  for (int t = 0; t < c.bf16_tokens; ++t) {
    for (int ch = 0; ch < s.d; ++ch) {
      const size_t src = (static_cast<size_t>(h) * c.bf16_tokens + t) * s.d + ch;
      k[static_cast<size_t>(t) * s.d + ch] = kvformat::Bf16BitsToFloat(c.bf16_k[src]);
      v[static_cast<size_t>(t) * s.d + ch] = kvformat::Bf16BitsToFloat(c.bf16_v[src]);
    }
  }
  for (int t = 0; t < c.int2_tokens; ++t) {
    const size_t r = static_cast<size_t>(h) * c.int2_tokens + t;
    for (int ch = 0; ch < s.d; ++ch) {
      const size_t dst = static_cast<size_t>(c.bf16_tokens + t) * s.d + ch;
      k[dst] = Int2Value(&c.int2_k_codes[r * (s.d / 4)], c.int2_k_params[r], s.d, ch);
      v[dst] = Int2Value(&c.int2_v_codes[r * (s.d / 4)], c.int2_v_params[r], s.d, ch);
    }
  }
}

// softmax(q K^T / sqrt(D)) V in float64 for every query head; [Hq][D]. Zero if no tokens.
std::vector<double> ReferenceF64(const Shape& s, const SeqCache& c, const float* q) {
  std::vector<double> out(static_cast<size_t>(s.hq()) * s.d, 0.0);
  const int n = c.bf16_tokens + c.int2_tokens;
  if (n == 0) return out;
  std::vector<double> k, v;
  for (int h = 0; h < s.hkv; ++h) {
    RowsF64(s, c, h, k, v);
    for (int qq = 0; qq < s.group; ++qq) {
      const int qh = h * s.group + qq;
      std::vector<double> sc(n);
      double mx = -std::numeric_limits<double>::infinity();
      for (int t = 0; t < n; ++t) {
        double dot = 0;
        for (int ch = 0; ch < s.d; ++ch) dot += q[qh * s.d + ch] * k[static_cast<size_t>(t) * s.d + ch];
        sc[t] = dot / std::sqrt(static_cast<double>(s.d));
        mx = std::max(mx, sc[t]);
      }
      double sum = 0;
      for (int t = 0; t < n; ++t) sum += std::exp(sc[t] - mx);
      for (int t = 0; t < n; ++t) {
        const double w = std::exp(sc[t] - mx) / sum;
        for (int ch = 0; ch < s.d; ++ch) out[qh * s.d + ch] += w * v[static_cast<size_t>(t) * s.d + ch];
      }
    }
  }
  return out;
}

// A paged pool holding a batch, pages shuffled (physical order != logical order).
struct Pool {
  std::vector<uint8_t> bf16_pool, int2_pool;
  std::vector<int32_t> bf16_indptr{0}, bf16_indices, bf16_tokens;
  std::vector<int32_t> int2_indptr{0}, int2_indices, int2_tokens;
  int64_t bf16_page_stride = 0, int2_page_stride = 0;
};

Pool BuildPool(const Shape& s, const std::vector<SeqCache>& seqs, bool shuffle, std::mt19937& rng) {
  Pool p;
  const int64_t bu = Bf16PageUnitBytes(s.d), iu = Int2PageUnitBytes(s.d);
  p.bf16_page_stride = bu * s.hkv;
  p.int2_page_stride = iu * s.hkv;
  int bf16_pages = 0, int2_pages = 0;
  for (const auto& c : seqs) {
    bf16_pages += (c.bf16_tokens + kPageTokens - 1) / kPageTokens;
    int2_pages += (c.int2_tokens + kPageTokens - 1) / kPageTokens;
  }
  // One spare page each so that id 0 is never trivially right.
  std::vector<int32_t> bf16_ids(bf16_pages + 1), int2_ids(int2_pages + 1);
  std::iota(bf16_ids.begin(), bf16_ids.end(), 0);
  std::iota(int2_ids.begin(), int2_ids.end(), 0);
  if (shuffle) {
    std::shuffle(bf16_ids.begin(), bf16_ids.end(), rng);
    std::shuffle(int2_ids.begin(), int2_ids.end(), rng);
  }
  // Fill with garbage so unread rows of partial pages would show up if read.
  p.bf16_pool.assign(static_cast<size_t>(p.bf16_page_stride) * bf16_ids.size(), 0x7f);
  p.int2_pool.assign(static_cast<size_t>(p.int2_page_stride) * int2_ids.size(), 0xff);
  int next_bf16 = 0, next_int2 = 0;
  for (const auto& c : seqs) {
    p.bf16_tokens.push_back(c.bf16_tokens);
    p.int2_tokens.push_back(c.int2_tokens);
    for (int t0 = 0; t0 < c.bf16_tokens; t0 += kPageTokens) {
      const int page = bf16_ids[next_bf16++];
      p.bf16_indices.push_back(page);
      for (int h = 0; h < s.hkv; ++h) {
        uint8_t* unit = p.bf16_pool.data() + page * p.bf16_page_stride + h * bu;
        for (int r = 0; r < kPageTokens && t0 + r < c.bf16_tokens; ++r) {
          const size_t src = (static_cast<size_t>(h) * c.bf16_tokens + t0 + r) * s.d;
          std::memcpy(unit + Bf16PageKOffset(s.d) + r * s.d * 2, &c.bf16_k[src], s.d * 2);
          std::memcpy(unit + Bf16PageVOffset(s.d) + r * s.d * 2, &c.bf16_v[src], s.d * 2);
        }
      }
    }
    p.bf16_indptr.push_back(static_cast<int32_t>(p.bf16_indices.size()));
    for (int t0 = 0; t0 < c.int2_tokens; t0 += kPageTokens) {
      const int page = int2_ids[next_int2++];
      p.int2_indices.push_back(page);
      for (int h = 0; h < s.hkv; ++h) {
        uint8_t* unit = p.int2_pool.data() + page * p.int2_page_stride + h * iu;
        for (int r = 0; r < kPageTokens && t0 + r < c.int2_tokens; ++r) {
          const size_t row = static_cast<size_t>(h) * c.int2_tokens + t0 + r;
          std::memcpy(unit + Int2PageKCodesOffset(s.d) + r * (s.d / 4),
                      &c.int2_k_codes[row * (s.d / 4)], s.d / 4);
          std::memcpy(unit + Int2PageVCodesOffset(s.d) + r * (s.d / 4),
                      &c.int2_v_codes[row * (s.d / 4)], s.d / 4);
          std::memcpy(unit + Int2PageKParamsOffset(s.d) + r * 4, &c.int2_k_params[row], 4);
          std::memcpy(unit + Int2PageVParamsOffset(s.d) + r * 4, &c.int2_v_params[row], 4);
        }
      }
    }
    p.int2_indptr.push_back(static_cast<int32_t>(p.int2_indices.size()));
  }
  return p;
}

struct RunResult {
  std::vector<float> out;
  std::vector<float> lse;
  int num_work = 0;
  const char* error = nullptr;  // DecodeAttentionRef's
};

// one_split_per_seq: the params claim one work item per sequence; the run is expected to succeed
// when the plan has that shape.
// `run`: the threads stage 1 is shared out on (unset: DecodeAttentionRef's one).
RunResult RunDecode(const Shape& s, const Pool& pool, const std::vector<float>& q, int num_seqs,
                    const DecodePlanConfig& cfg, bool use_int2 = true,
                    bool one_split_per_seq = false, const RunOnThreads& run = nullptr) {
  DecodePlan plan = PlanDecodeAttention(cfg, num_seqs, pool.bf16_tokens.data(),
                                        use_int2 ? pool.int2_tokens.data() : nullptr);
  std::vector<float> partial_out(plan.PartialOutFloats(s.hq(), s.d));
  std::vector<float> partial_lse(plan.PartialLseFloats(s.hq()));
  RunResult r;
  r.out.assign(static_cast<size_t>(num_seqs) * s.hq() * s.d, -1.0f);
  r.lse.assign(static_cast<size_t>(num_seqs) * s.hq(), 0.0f);
  r.num_work = plan.num_work();
  DecodeAttentionParams p;
  p.num_seqs = num_seqs;
  p.num_q_heads = s.hq();
  p.num_kv_heads = s.hkv;
  p.head_dim = s.d;
  p.sm_scale = 1.0f / std::sqrt(static_cast<float>(s.d));
  p.q = q.data();
  p.q_seq_stride = static_cast<int64_t>(s.hq()) * s.d;
  p.bf16 = {pool.bf16_indptr.data(), pool.bf16_indices.data(), pool.bf16_tokens.data(),
            pool.bf16_pool.data(), pool.bf16_page_stride, Bf16PageUnitBytes(s.d)};
  if (use_int2) {
    p.int2 = {pool.int2_indptr.data(), pool.int2_indices.data(), pool.int2_tokens.data(),
              pool.int2_pool.data(), pool.int2_page_stride, Int2PageUnitBytes(s.d)};
  }
  p.work = plan.work.data();
  p.seq_work_indptr = plan.seq_work_indptr.data();
  p.num_work = plan.num_work();
  p.partial_out = partial_out.data();
  p.partial_lse = partial_lse.data();
  p.out = r.out.data();
  p.out_seq_stride = static_cast<int64_t>(s.hq()) * s.d;
  p.out_lse = r.lse.data();
  p.one_split_per_seq = one_split_per_seq;
  r.error = run ? DecodeAttentionRef(p, run) : DecodeAttentionRef(p);
  if (!one_split_per_seq || plan.OneSplitPerSequence()) {
    EXPECT_EQ(r.error, nullptr) << r.error;
  }
  return r;
}

std::vector<float> RandomQuery(const Shape& s, int num_seqs, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(num_seqs) * s.hq() * s.d);
  for (auto& x : q) x = normal(rng);
  return q;
}

// max |a - b| / max |b| over one sequence's output.
double RelErr(const float* a, const std::vector<double>& b) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    err = std::max(err, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return scale == 0 ? err : err / scale;
}

class DecodeAttentionRefTest : public ::testing::TestWithParam<int> {};

TEST_P(DecodeAttentionRefTest, LseMergeOfBf16AndInt2EqualsSoftmaxOverConcatenation) {
  const Shape s{2, 3, GetParam()};
  std::mt19937 rng(1234 + s.d);
  std::vector<SeqCache> seqs{RandomSeq(s, 64 + 260, 403, rng)};
  const Pool pool = BuildPool(s, seqs, /*shuffle=*/true, rng);
  const std::vector<float> q = RandomQuery(s, 1, rng);
  const RunResult r = RunDecode(s, pool, q, 1, DecodePlanConfig{});
  EXPECT_GT(r.num_work, 2);
  EXPECT_LE(RelErr(r.out.data(), ReferenceF64(s, seqs[0], q.data())), 1e-5);
}

TEST_P(DecodeAttentionRefTest, SplitCountsDoNotChangeTheResult) {
  const Shape s{2, 2, GetParam()};
  std::mt19937 rng(77 + s.d);
  std::vector<SeqCache> seqs{RandomSeq(s, 321, 517, rng)};
  const Pool pool = BuildPool(s, seqs, true, rng);
  const std::vector<float> q = RandomQuery(s, 1, rng);
  const std::vector<double> ref = ReferenceF64(s, seqs[0], q.data());
  const RunResult one = RunDecode(s, pool, q, 1, {1, 8, 1 << 20});
  EXPECT_EQ(one.num_work, 2);  // one split per tier
  int last_work = one.num_work;
  for (int fixed : {256, 64, 24, 8}) {
    DecodePlanConfig cfg;
    cfg.fixed_tokens_per_split = fixed;
    const RunResult r = RunDecode(s, pool, q, 1, cfg);
    EXPECT_GT(r.num_work, last_work);
    last_work = r.num_work;
    EXPECT_LE(RelErr(r.out.data(), ref), 1e-5) << fixed;
    for (size_t i = 0; i < r.out.size(); ++i) {
      ASSERT_NEAR(r.out[i], one.out[i], 1e-5) << fixed << " " << i;
    }
    for (size_t i = 0; i < r.lse.size(); ++i) ASSERT_NEAR(r.lse[i], one.lse[i], 1e-4);
  }
  EXPECT_EQ(last_work, (321 + 7) / 8 + (517 + 7) / 8);
}

// Stage 1 shared out over threads (as serving does over its CPU pool) gives the one-thread
// result bit for bit, for a batch of sequences with many splits each.
TEST_P(DecodeAttentionRefTest, SplitsOnSeveralThreadsGiveTheSameBits) {
  const Shape s{2, 3, GetParam()};
  std::mt19937 rng(99 + s.d);
  std::vector<SeqCache> seqs{RandomSeq(s, 64 + 200, 1000, rng), RandomSeq(s, 37, 0, rng),
                             RandomSeq(s, 64 + 256, 77, rng)};
  const Pool pool = BuildPool(s, seqs, true, rng);
  const std::vector<float> q = RandomQuery(s, 3, rng);
  DecodePlanConfig cfg;
  cfg.fixed_tokens_per_split = 64;
  const RunResult one = RunDecode(s, pool, q, 3, cfg);
  for (int threads : {2, 3, 5}) {
    int ran = 0;
    const RunOnThreads run = [&](const std::function<void(int, int)>& f) {
      std::vector<std::thread> pool_threads;
      for (int w = 1; w < threads; ++w) pool_threads.emplace_back(f, w, threads);
      f(0, threads);
      for (auto& t : pool_threads) t.join();
      ++ran;
    };
    const RunResult r = RunDecode(s, pool, q, 3, cfg, true, false, run);
    EXPECT_EQ(ran, 1);
    ASSERT_GT(r.num_work, threads);
    EXPECT_EQ(0, std::memcmp(r.out.data(), one.out.data(), r.out.size() * sizeof(float)))
        << threads << " threads";
    EXPECT_EQ(0, std::memcmp(r.lse.data(), one.lse.data(), r.lse.size() * sizeof(float)))
        << threads << " threads";
  }
}

TEST_P(DecodeAttentionRefTest, PagedEqualsContiguousFloatPath) {
  const Shape s{2, 2, GetParam()};
  std::mt19937 rng(5);
  std::vector<SeqCache> seqs{RandomSeq(s, 100, 200, rng)};
  const std::vector<float> q = RandomQuery(s, 1, rng);
  const RunResult in_order = RunDecode(s, BuildPool(s, seqs, false, rng), q, 1, {});
  const RunResult shuffled = RunDecode(s, BuildPool(s, seqs, true, rng), q, 1, {});
  for (size_t i = 0; i < in_order.out.size(); ++i) ASSERT_EQ(in_order.out[i], shuffled.out[i]);
  // Contiguous float path: dequantise all rows, attend, merge two segment states.
  std::vector<double> k64, v64;
  for (int h = 0; h < s.hkv; ++h) {
    RowsF64(s, seqs[0], h, k64, v64);
    std::vector<float> k(k64.begin(), k64.end()), v(v64.begin(), v64.end());
    std::vector<AttentionState> a(s.group), b(s.group);
    const float* qh = q.data() + h * s.group * s.d;
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
    AttendFloatRows(qh, s.group, s.d, k.data(), v.data(), s.d, nullptr, 100, scale, a.data());
    AttendFloatRows(qh, s.group, s.d, k.data() + 100 * s.d, v.data() + 100 * s.d, s.d, nullptr,
                    200, scale, b.data());
    for (int g = 0; g < s.group; ++g) {
      MergeAttentionState(a[g], b[g]);
      std::vector<float> o(s.d);
      FinalizeAttentionState(a[g], s.d, o.data());
      for (int c = 0; c < s.d; ++c) {
        ASSERT_NEAR(o[c], in_order.out[(h * s.group + g) * s.d + c], 1e-5);
      }
    }
  }
}

TEST_P(DecodeAttentionRefTest, GqaQueryHeadReadsKvHeadHOverG) {
  const Shape s{3, 4, GetParam()};
  std::mt19937 rng(9);
  SeqCache c = RandomSeq(s, 40, 24, rng);
  // V of KV head h is the constant h + 1 everywhere (BF16 rows exactly; INT2 via min = h + 1,
  // scale = 0 codes irrelevant), so every query head's output is (its KV head) + 1.
  for (int h = 0; h < s.hkv; ++h) {
    for (int t = 0; t < c.bf16_tokens; ++t) {
      for (int ch = 0; ch < s.d; ++ch) {
        c.bf16_v[(static_cast<size_t>(h) * c.bf16_tokens + t) * s.d + ch] =
            kvformat::FloatToBf16Bits(static_cast<float>(h + 1));
      }
    }
    for (int t = 0; t < c.int2_tokens; ++t) {
      c.int2_v_params[h * c.int2_tokens + t] = {kvformat::FloatToHalfBits(0.0f),
                                                kvformat::FloatToHalfBits(h + 1.0f)};
    }
  }
  std::vector<SeqCache> seqs{c};
  const std::vector<float> q = RandomQuery(s, 1, rng);
  const RunResult r = RunDecode(s, BuildPool(s, seqs, true, rng), q, 1, {});
  for (int qh = 0; qh < s.hq(); ++qh) {
    for (int ch = 0; ch < s.d; ++ch) {
      ASSERT_NEAR(r.out[qh * s.d + ch], qh / s.group + 1.0f, 1e-5) << qh;
    }
  }
  EXPECT_LE(RelErr(r.out.data(), ReferenceF64(s, c, q.data())), 1e-5);
}

TEST_P(DecodeAttentionRefTest, BatchOfSequencesWithDifferentLengths) {
  const Shape s{2, 3, GetParam()};
  std::mt19937 rng(2024);
  const std::vector<std::pair<int, int>> lengths{
      {0, 0}, {5, 0}, {0, 13}, {64 + 256, 8}, {64 + 263, 640}, {1, 1}, {71, 9}};
  std::vector<SeqCache> seqs;
  for (auto [b, i] : lengths) seqs.push_back(RandomSeq(s, b, i, rng));
  const int n = static_cast<int>(seqs.size());
  const std::vector<float> q = RandomQuery(s, n, rng);
  const Pool pool = BuildPool(s, seqs, true, rng);
  for (const DecodePlanConfig& cfg : {DecodePlanConfig{}, DecodePlanConfig{2, 8, 0}}) {
    const RunResult r = RunDecode(s, pool, q, n, cfg);
    for (int b = 0; b < n; ++b) {
      const size_t off = static_cast<size_t>(b) * s.hq() * s.d;
      EXPECT_LE(RelErr(r.out.data() + off, ReferenceF64(s, seqs[b], q.data() + off)), 1e-5)
          << "seq " << b;
    }
    // Empty sequence: zero output, lse -inf.
    for (int i = 0; i < s.hq() * s.d; ++i) ASSERT_EQ(r.out[i], 0.0f);
    EXPECT_EQ(r.lse[0], -std::numeric_limits<float>::infinity());
  }
}

TEST_P(DecodeAttentionRefTest, Bf16OnlyVariantIgnoresInt2Tier) {
  const Shape s{1, 2, GetParam()};
  std::mt19937 rng(31);
  std::vector<SeqCache> seqs{RandomSeq(s, 300, 120, rng)};
  const std::vector<float> q = RandomQuery(s, 1, rng);
  const RunResult r = RunDecode(s, BuildPool(s, seqs, true, rng), q, 1, {}, /*use_int2=*/false);
  SeqCache bf16_only = seqs[0];
  bf16_only.int2_tokens = 0;
  EXPECT_LE(RelErr(r.out.data(), ReferenceF64(s, bf16_only, q.data())), 1e-5);
}

TEST_P(DecodeAttentionRefTest, OutputLseIsLogSumExpOfScores) {
  const Shape s{1, 1, GetParam()};
  std::mt19937 rng(8);
  std::vector<SeqCache> seqs{RandomSeq(s, 17, 33, rng)};
  const std::vector<float> q = RandomQuery(s, 1, rng);
  const RunResult r = RunDecode(s, BuildPool(s, seqs, true, rng), q, 1, {1, 8, 8});
  std::vector<double> k, v;
  RowsF64(s, seqs[0], 0, k, v);
  double sum = 0;
  for (int t = 0; t < 50; ++t) {
    double dot = 0;
    for (int c = 0; c < s.d; ++c) dot += q[c] * k[t * s.d + c];
    sum += std::exp(dot / std::sqrt(static_cast<double>(s.d)));
  }
  EXPECT_NEAR(r.lse[0], std::log(sum), 1e-5 * std::max(1.0, std::abs(std::log(sum))));
}

INSTANTIATE_TEST_SUITE_P(HeadDims, DecodeAttentionRefTest, ::testing::Values(32, 64, 96, 128, 256));

TEST(DecodePlan, SplitsCoverEachTierExactlyOnPageBoundaries) {
  const std::vector<int32_t> bf16{0, 7, 320, 1000, 64};
  const std::vector<int32_t> int2{0, 0, 5000, 8, 123};
  DecodePlanConfig cfg;  // max 8 splits, min 64 tokens
  const DecodePlan plan = PlanDecodeAttention(cfg, 5, bf16.data(), int2.data());
  ASSERT_EQ(plan.seq_work_indptr.size(), 6u);
  EXPECT_EQ(plan.seq_work_indptr[1], 0);  // empty sequence: no work
  for (int b = 0; b < 5; ++b) {
    int covered[2] = {0, 0};
    int splits[2] = {0, 0};
    for (int i = plan.seq_work_indptr[b]; i < plan.seq_work_indptr[b + 1]; ++i) {
      const DecodeWorkItem& w = plan.work[i];
      EXPECT_EQ(w.seq, b);
      EXPECT_EQ(w.token_begin % kPageTokens, 0);
      EXPECT_EQ(w.token_begin, covered[w.tier]);  // contiguous, in order
      EXPECT_GT(w.token_end, w.token_begin);
      covered[w.tier] = w.token_end;
      ++splits[w.tier];
    }
    EXPECT_EQ(covered[0], bf16[b]);
    EXPECT_EQ(covered[1], int2[b]);
    EXPECT_LE(splits[0], 8);
    EXPECT_LE(splits[1], 8);
  }
  EXPECT_EQ(plan.PartialOutFloats(6, 128), plan.num_work() * 6 * 128);
}

TEST(DecodeAttentionParams, ValidationRejectsBadShapes) {
  DecodeAttentionParams p;
  p.num_seqs = 1;
  p.num_q_heads = 5;
  p.num_kv_heads = 2;
  p.head_dim = 64;
  EXPECT_NE(ValidateDecodeAttentionParams(p), nullptr);
  p.num_q_heads = 4;
  p.head_dim = 48;
  EXPECT_NE(ValidateDecodeAttentionParams(p), nullptr);
  p.head_dim = 64;
  EXPECT_NE(ValidateDecodeAttentionParams(p), nullptr);  // null q/out
  EXPECT_NE(DecodeAttentionRef(p), nullptr);
}

TEST(DecodePlan, OneSplitPerSequenceOnlyWhenEverySequenceHasOne) {
  const std::vector<int32_t> bf16{60, 64}, int2{0, 8};  // <= 64 tokens: one split per tier
  DecodePlanConfig cfg;
  cfg.fuse_bf16_into_int2 = true;  // the second sequence: one fused split
  EXPECT_TRUE(PlanDecodeAttention(cfg, 2, bf16.data(), int2.data()).OneSplitPerSequence());
  const std::vector<int32_t> empty{0, 64};  // a sequence without work
  EXPECT_FALSE(PlanDecodeAttention(cfg, 2, empty.data(), int2.data()).OneSplitPerSequence());
  cfg.fuse_bf16_into_int2 = false;  // the second sequence: a BF16 and an INT2 split
  EXPECT_FALSE(PlanDecodeAttention(cfg, 2, bf16.data(), int2.data()).OneSplitPerSequence());
}

TEST(DecodeAttentionParams, OneSplitPerSequenceIsCheckedAndChangesNothing) {
  const Shape s{2, 2, 64};
  std::mt19937 rng(77);
  // Two sequences of <= 64 tokens per tier: one split each once the tiers are fused, two for
  // the second sequence when they are not.
  std::vector<SeqCache> seqs{RandomSeq(s, 60, 0, rng), RandomSeq(s, 64, 8, rng)};
  const Pool pool = BuildPool(s, seqs, /*shuffle=*/true, rng);
  const std::vector<float> q = RandomQuery(s, 2, rng);
  DecodePlanConfig fused;
  fused.fuse_bf16_into_int2 = true;
  const RunResult plain = RunDecode(s, pool, q, 2, fused);
  const RunResult claimed = RunDecode(s, pool, q, 2, fused, true, /*one_split_per_seq=*/true);
  ASSERT_EQ(claimed.error, nullptr);
  EXPECT_EQ(claimed.out, plain.out);
  EXPECT_EQ(claimed.lse, plain.lse);
  // Separate tiers: the claim is false and the run is refused.
  const RunResult refused = RunDecode(s, pool, q, 2, DecodePlanConfig{}, true, true);
  EXPECT_EQ(refused.num_work, 3);
  EXPECT_NE(refused.error, nullptr);
}

}  // namespace
}  // namespace oscarkv::kernels

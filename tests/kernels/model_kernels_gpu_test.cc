// GPU kernels of the transformer forward (kernels/model/model_kernels_cuda.h) against their CPU
// references (model_kernels_ref.h) on fresh random inputs with fixed seeds: every CUDA entry, both
// the vectorised and the scalar (odd size / misaligned) paths where an entry has two, outputs
// poisoned with NaN before each run, every CUDA call checked. Budgets are named below.
// Exit 0 = pass, 1 = fail, 77 = no GPU. --small: smaller shapes (for compute-sanitizer).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/decode_attention.h"
#include "kernels/model/model_kernels_cuda.h"
#include "kernels/model/model_kernels_ref.h"
#include "lib/kvformat/float16.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/slow_writer.h"

namespace oscarkv {
namespace {

using namespace kernels;  // NOLINT: test of this namespace's entries
using testing::RelErr;
using testing::ToDevice;
using testing::ToHost;

// Error budgets. Embedding, f32->bf16, argmax and the page copies are exact. RMSNorm, SiLU-mul and
// the Q/K/V post-processing follow the reference operation for operation; they may differ only by
// summation order and CUDA's double libm (a few double ulps), which can move a bf16 rounding tie by
// one ulp: bf16 outputs allow 1 ulp on at most kMaxBf16TieFraction of the elements, f32 outputs a
// relative error of kMaxQkvPostRelErr. Prefill attention rounds q and P to bf16 for its MMAs.
constexpr int kMaxBf16Ulps = 1;
constexpr double kMaxBf16TieFraction = 1e-3;
constexpr double kMaxQkvPostRelErr = 1e-6;
constexpr double kMaxPrefillAttentionRelErr = 1e-2;

int g_failures = 0;

void Report(bool ok, const std::string& name, const std::string& detail) {
  std::printf("%s %s %s\n", ok ? "PASS" : "FAIL", name.c_str(), detail.c_str());
  if (!ok) ++g_failures;
}

std::vector<float> Normal(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

template <typename T>
T* DeviceAlloc(size_t n) {
  T* d = nullptr;
  GPU_CHECK(cudaMalloc(&d, n * sizeof(T) + 64));
  GPU_CHECK(cudaMemset(d, 0xff, n * sizeof(T) + 64));  // NaN for f32 and bf16
  return d;
}

// Distance in bf16 ulps (same-sign values; different signs count as far apart unless both zero).
int Bf16Ulps(uint16_t a, uint16_t b) {
  if (a == b) return 0;
  if ((a & 0x7fff) == 0 && (b & 0x7fff) == 0) return 0;
  if ((a >> 15) != (b >> 15)) return 1 << 16;
  return std::abs(static_cast<int>(a & 0x7fff) - static_cast<int>(b & 0x7fff));
}

void CheckBf16(const std::string& name, const std::vector<uint16_t>& got,
               const std::vector<uint16_t>& ref) {
  int worst = 0;
  size_t ties = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const bool nan = (got[i] & 0x7fff) > 0x7f80;
    const int u = nan ? (1 << 16) : Bf16Ulps(got[i], ref[i]);
    worst = std::max(worst, u);
    ties += u != 0;
  }
  const double frac = ref.empty() ? 0.0 : static_cast<double>(ties) / ref.size();
  char buf[128];
  std::snprintf(buf, sizeof(buf), "max_ulps=%d differing=%zu/%zu", worst, ties, ref.size());
  Report(worst <= kMaxBf16Ulps && frac <= kMaxBf16TieFraction, name, buf);
}

template <typename T>
void CheckExact(const std::string& name, const std::vector<T>& got, const std::vector<T>& ref) {
  size_t bad = 0, first = ref.size();
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::memcmp(&got[i], &ref[i], sizeof(T)) != 0) {
      if (bad == 0) first = i;
      ++bad;
    }
  }
  char buf[128];
  std::snprintf(buf, sizeof(buf), "mismatches=%zu/%zu first=%zu", bad, ref.size(), first);
  Report(bad == 0, name, buf);
}

void TestEmbed(bool small) {
  for (const int d : {small ? 256 : 4096, 100}) {  // vectorised, scalar (d % 8 != 0)
    const int vocab = 1000, rows = small ? 5 : 37;
    std::vector<uint16_t> table(static_cast<size_t>(vocab) * d);
    const auto vals = Normal(table.size(), 1);
    for (size_t i = 0; i < table.size(); ++i) table[i] = kvformat::FloatToBf16Bits(vals[i]);
    std::vector<int32_t> tokens(rows);
    std::mt19937 rng(2);
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % vocab);
    tokens[0] = vocab - 1;
    std::vector<float> ref(static_cast<size_t>(rows) * d);
    EmbedRowsRef(table.data(), tokens.data(), rows, d, ref.data());
    uint16_t* d_table = ToDevice(table);
    int32_t* d_tokens = ToDevice(tokens);
    float* d_x = DeviceAlloc<float>(ref.size());
    GPU_CHECK(EmbedRowsCuda(d_table, d_tokens, rows, d, d_x, nullptr));
    GPU_CHECK(cudaDeviceSynchronize());
    CheckExact("EmbedRows d=" + std::to_string(d), ToHost(d_x, ref.size()), ref);
    GPU_CHECK(cudaFree(d_table));
    GPU_CHECK(cudaFree(d_tokens));
    GPU_CHECK(cudaFree(d_x));
  }
}

void TestRmsNorm(bool small) {
  for (const int n : {small ? 512 : 4096, 1001}) {
    const int rows = small ? 4 : 33;
    const auto x = Normal(static_cast<size_t>(rows) * n, 3, 3.0f);
    const auto w = Normal(n, 4);
    std::vector<uint16_t> ref(x.size());
    RmsNormToBf16Ref(x.data(), w.data(), rows, n, 1e-6f, ref.data());
    float* d_x = ToDevice(x);
    float* d_w = ToDevice(w);
    uint16_t* d_out = DeviceAlloc<uint16_t>(ref.size());
    GPU_CHECK(RmsNormToBf16Cuda(d_x, d_w, rows, n, 1e-6f, d_out, nullptr));
    GPU_CHECK(cudaDeviceSynchronize());
    CheckBf16("RmsNormToBf16 n=" + std::to_string(n), ToHost(d_out, ref.size()), ref);
    GPU_CHECK(cudaFree(d_x));
    GPU_CHECK(cudaFree(d_w));
    GPU_CHECK(cudaFree(d_out));
  }
}

struct QkvCase {
  int hq, hkv, d, rope_dim;
  bool bias, qk_norm, freq_div;
  RopePairing pairing;
};

void TestQkvPost(bool small) {
  const QkvCase cases[] = {
      {8, 2, 128, 128, false, false, false, RopePairing::kAdjacentPairs},
      {8, 2, 128, 128, true, false, false, RopePairing::kNeox},
      {6, 2, 128, 128, false, true, true, RopePairing::kNeox},
      {9, 3, 64, 32, true, true, true, RopePairing::kAdjacentPairs},
  };
  for (const QkvCase& c : cases) {
    const int rows = small ? 3 : 40;
    const int qn = c.hq * c.d, kn = c.hkv * c.d;
    const int64_t stride = qn + 2 * kn;  // fused QKV GEMM rows
    auto qkv = Normal(static_cast<size_t>(rows) * stride, 5, 2.0f);
    const auto bq = Normal(qn, 6, 0.3f), bk = Normal(kn, 7, 0.3f), bv = Normal(kn, 8, 0.3f);
    const auto qnw = Normal(c.d, 9), knw = Normal(c.d, 10);
    std::vector<float> fdiv(c.rope_dim / 2);
    for (size_t i = 0; i < fdiv.size(); ++i) fdiv[i] = 1.0f + 0.25f * i;
    std::vector<int32_t> pos(rows);
    std::mt19937 rng(11);
    for (auto& p : pos) p = static_cast<int32_t>(rng() % 40000);
    pos[0] = 0;

    QkvPostParams p;
    p.q_row_stride = p.k_row_stride = p.v_row_stride = stride;
    p.rows = rows;
    p.num_q_heads = c.hq;
    p.num_kv_heads = c.hkv;
    p.head_dim = c.d;
    p.rope_dim = c.rope_dim;
    p.eps = 1e-6f;
    p.rope_theta = 1000000.0;
    p.rope_scale = 1.0;
    p.pairing = c.pairing;
    // Host reference.
    std::vector<float> ref = qkv;
    QkvPostParams hp = p;
    hp.q = ref.data();
    hp.k = ref.data() + qn;
    hp.v = ref.data() + qn + kn;
    hp.positions = pos.data();
    if (c.bias) {
      hp.bq = bq.data();
      hp.bk = bk.data();
      hp.bv = bv.data();
    }
    if (c.qk_norm) {
      hp.q_norm = qnw.data();
      hp.k_norm = knw.data();
    }
    if (c.freq_div) hp.freq_div = fdiv.data();
    QkvPostRef(hp);
    // Device.
    float* d_qkv = ToDevice(qkv);
    int32_t* d_pos = ToDevice(pos);
    float *d_bq = ToDevice(bq), *d_bk = ToDevice(bk), *d_bv = ToDevice(bv);
    float *d_qnw = ToDevice(qnw), *d_knw = ToDevice(knw), *d_fdiv = ToDevice(fdiv);
    QkvPostParams dp = p;
    dp.q = d_qkv;
    dp.k = d_qkv + qn;
    dp.v = d_qkv + qn + kn;
    dp.positions = d_pos;
    if (c.bias) {
      dp.bq = d_bq;
      dp.bk = d_bk;
      dp.bv = d_bv;
    }
    if (c.qk_norm) {
      dp.q_norm = d_qnw;
      dp.k_norm = d_knw;
    }
    if (c.freq_div) dp.freq_div = d_fdiv;
    GPU_CHECK(QkvPostCuda(dp, nullptr));
    GPU_CHECK(cudaDeviceSynchronize());
    const auto got = ToHost(d_qkv, qkv.size());
    std::vector<double> ref64(ref.begin(), ref.end());
    const double err = RelErr(got.data(), ref64.data(), ref.size());
    size_t exact = 0;
    for (size_t i = 0; i < ref.size(); ++i) exact += got[i] == ref[i];
    char buf[160];
    std::snprintf(buf, sizeof(buf), "rel_err=%.3g bit_exact=%zu/%zu", err, exact, ref.size());
    Report(err <= kMaxQkvPostRelErr,
           "QkvPost hq=" + std::to_string(c.hq) + " d=" + std::to_string(c.d) +
               " rope=" + std::to_string(c.rope_dim) + (c.bias ? " bias" : "") +
               (c.qk_norm ? " qknorm" : "") +
               (c.pairing == RopePairing::kNeox ? " neox" : " adjacent"),
           buf);
    // The form with rotated copies (a decode step), at batch 1 and at `rows`, with and without q,
    // and with the BF16 page write: in place it must equal the launch above bit for bit, each
    // copy RotateRowsRef of that, and the pages WriteBf16PageRowsRef of the k and v copies.
    const auto r_qk = Normal(static_cast<size_t>(c.d) * c.d, 12, 0.1f);
    const auto r_v = Normal(static_cast<size_t>(c.d) * c.d, 13, 0.1f);
    float *d_rqk = ToDevice(r_qk), *d_rv = ToDevice(r_v);
    // A pool of poisoned pages with gaps between them; row t goes to a shuffled page, at a row
    // of it that varies with t.
    const int64_t unit = Bf16PageUnitBytes(c.d), page_stride = c.hkv * unit + 64;
    const int num_pages = rows + 3;
    std::vector<uint8_t> pool(static_cast<size_t>(num_pages) * page_stride);
    for (auto& b : pool) b = static_cast<uint8_t>(rng());
    std::vector<int32_t> page_ids(num_pages), rows_in_page(rows);
    std::iota(page_ids.begin(), page_ids.end(), 0);
    std::shuffle(page_ids.begin(), page_ids.end(), rng);
    for (int t = 0; t < rows; ++t) rows_in_page[t] = (t * 3 + 5) % kPageTokens;
    int32_t* d_page_ids = ToDevice(page_ids);
    int32_t* d_rows_in_page = ToDevice(rows_in_page);
    const auto page_write = [&](uint8_t* d_pool) {
      return QkvPageWrite{.pool = d_pool, .page_ids = d_page_ids, .rows_in_page = d_rows_in_page,
                          .page_stride_bytes = page_stride, .head_stride_bytes = unit,
                          .k_segment_offset_bytes = Bf16PageKOffset(c.d),
                          .v_segment_offset_bytes = Bf16PageVOffset(c.d)};
    };
    // Host pages: WriteBf16PageRowsRef of `tokens` rows of k (kv 0) or v taken from `rows`.
    const auto ref_page_write = [&](const float* rows, int64_t row_stride, int64_t tokens, int kv,
                                    std::vector<uint8_t>* pool_out) {
      WriteBf16PageRowsRef({.rows = rows, .row_stride = row_stride, .tokens = tokens,
                            .heads = c.hkv, .head_dim = c.d, .page_ids = page_ids.data(),
                            .rows_in_page = rows_in_page.data(), .pool = pool_out->data(),
                            .page_stride_bytes = page_stride, .head_stride_bytes = unit,
                            .segment_offset_bytes =
                                kv == 0 ? Bf16PageKOffset(c.d) : Bf16PageVOffset(c.d)});
    };
    // The unrotated form with the page write (the bf16 codec's decode step): in place it must
    // equal the first launch bit for bit, and the pages WriteBf16PageRowsRef of its k and v rows.
    for (const int fused_rows : {1, rows}) {
      const std::string name = "QkvPost + page write hq=" + std::to_string(c.hq) +
                               " d=" + std::to_string(c.d) + " rows=" + std::to_string(fused_rows);
      float* d_qkv2 = ToDevice(qkv);
      uint8_t* d_pool = ToDevice(pool);
      QkvPostParams fp = dp;
      fp.q = d_qkv2;
      fp.k = d_qkv2 + qn;
      fp.v = d_qkv2 + qn + kn;
      fp.rows = fused_rows;
      GPU_CHECK(QkvPostCuda(fp, page_write(d_pool), nullptr));
      GPU_CHECK(cudaDeviceSynchronize());
      const size_t n_in = static_cast<size_t>(fused_rows) * stride;
      std::vector<float> want_in_place = qkv;  // rows past fused_rows untouched
      std::copy(got.begin(), got.begin() + n_in, want_in_place.begin());
      CheckExact(name + ": in place", ToHost(d_qkv2, qkv.size()), want_in_place);
      std::vector<uint8_t> want_pool = pool;
      ref_page_write(got.data() + qn, stride, fused_rows, 0, &want_pool);
      ref_page_write(got.data() + qn + kn, stride, fused_rows, 1, &want_pool);
      CheckExact(name + ": pages", ToHost(d_pool, pool.size()), want_pool);
      GPU_CHECK(cudaFree(d_pool));
      GPU_CHECK(cudaFree(d_qkv2));
    }
    const struct {
      bool with_q, with_pages;
    } forms[] = {{true, false}, {false, false}, {true, true}};
    for (const int fused_rows : {1, rows}) {
      for (const auto [with_q, with_pages] : forms) {
        const std::string name = "QkvPost + rotations hq=" + std::to_string(c.hq) +
                                 " d=" + std::to_string(c.d) +
                                 " rows=" + std::to_string(fused_rows) + (with_q ? "" : " no q") +
                                 (with_pages ? " + page write" : "");
        float* d_qkv2 = ToDevice(qkv);
        float* d_rot_q = DeviceAlloc<float>(static_cast<size_t>(fused_rows) * qn);
        float* d_rot_k = DeviceAlloc<float>(static_cast<size_t>(fused_rows) * kn);
        float* d_rot_v = DeviceAlloc<float>(static_cast<size_t>(fused_rows) * kn);
        GPU_CHECK(cudaMemset(d_rot_q, 0xff, static_cast<size_t>(fused_rows) * qn * 4));
        GPU_CHECK(cudaMemset(d_rot_k, 0xff, static_cast<size_t>(fused_rows) * kn * 4));
        GPU_CHECK(cudaMemset(d_rot_v, 0xff, static_cast<size_t>(fused_rows) * kn * 4));
        QkvPostParams fp = dp;
        fp.q = d_qkv2;
        fp.k = d_qkv2 + qn;
        fp.v = d_qkv2 + qn + kn;
        fp.rows = fused_rows;
        QkvRotatedOut ro{.qk_rotation = d_rqk, .v_rotation = d_rv,
                         .q = with_q ? d_rot_q : nullptr, .k = d_rot_k, .v = d_rot_v};
        uint8_t* d_pool = ToDevice(pool);
        if (with_pages) ro.pages = page_write(d_pool);
        GPU_CHECK(QkvPostCuda(fp, ro, nullptr));
        GPU_CHECK(cudaDeviceSynchronize());
        std::vector<uint8_t> want_pool = pool;
        const size_t n_in = static_cast<size_t>(fused_rows) * stride;
        const std::vector<float> got_rows(got.begin(), got.begin() + n_in);
        std::vector<float> want_in_place = qkv;  // rows past fused_rows untouched
        std::copy(got_rows.begin(), got_rows.end(), want_in_place.begin());
        CheckExact(name + ": in place", ToHost(d_qkv2, qkv.size()), want_in_place);
        const struct {
          const char* part;
          float* dev;
          int64_t offset;
          int heads;
          const std::vector<float>* rot;
        } parts[] = {{"q", d_rot_q, 0, c.hq, &r_qk},
                     {"k", d_rot_k, qn, c.hkv, &r_qk},
                     {"v", d_rot_v, qn + kn, c.hkv, &r_v}};
        for (const auto& part : parts) {
          const size_t n = static_cast<size_t>(fused_rows) * part.heads * c.d;
          if (!with_q && part.dev == d_rot_q) {  // not wanted: left as poisoned
            const auto untouched = ToHost(d_rot_q, n);
            bool all_nan = true;
            for (float x : untouched) all_nan &= std::isnan(x);
            Report(all_nan, name + ": q copy not written", "");
            continue;
          }
          std::vector<float> want(n);
          RotateRowsParams rp;
          rp.in = got_rows.data() + part.offset;
          rp.in_token_stride = stride;
          rp.tokens = fused_rows;
          rp.heads = part.heads;
          rp.head_dim = c.d;
          rp.rotation = part.rot->data();
          rp.out = want.data();
          RotateRowsRef(rp);
          CheckExact(name + ": rotated " + part.part, ToHost(part.dev, n), want);
          if (part.dev != d_rot_q && with_pages) {
            ref_page_write(want.data(), int64_t{c.hkv} * c.d, fused_rows,
                           part.dev == d_rot_k ? 0 : 1, &want_pool);
          }
        }
        // Without the page write the pool stays as it was.
        CheckExact(name + ": pages", ToHost(d_pool, pool.size()), want_pool);
        GPU_CHECK(cudaFree(d_pool));
        for (float* ptr : {d_qkv2, d_rot_q, d_rot_k, d_rot_v}) GPU_CHECK(cudaFree(ptr));
      }
    }
    GPU_CHECK(cudaFree(d_rqk));
    GPU_CHECK(cudaFree(d_rv));
    GPU_CHECK(cudaFree(d_page_ids));
    GPU_CHECK(cudaFree(d_rows_in_page));
    for (void* ptr : {static_cast<void*>(d_qkv), static_cast<void*>(d_pos),
                      static_cast<void*>(d_bq), static_cast<void*>(d_bk), static_cast<void*>(d_bv),
                      static_cast<void*>(d_qnw), static_cast<void*>(d_knw),
                      static_cast<void*>(d_fdiv)}) {
      GPU_CHECK(cudaFree(ptr));
    }
  }
}

void TestSiluMul(bool small) {
  for (const int dff : {small ? 256 : 11008, 999}) {
    const int rows = small ? 3 : 17;
    const auto gu = Normal(static_cast<size_t>(rows) * 2 * dff, 12, 4.0f);
    std::vector<uint16_t> ref(static_cast<size_t>(rows) * dff);
    SiluMulToBf16Ref(gu.data(), rows, dff, ref.data());
    float* d_gu = ToDevice(gu);
    uint16_t* d_out = DeviceAlloc<uint16_t>(ref.size());
    GPU_CHECK(SiluMulToBf16Cuda(d_gu, rows, dff, d_out, nullptr));
    GPU_CHECK(cudaDeviceSynchronize());
    CheckBf16("SiluMulToBf16 d_ff=" + std::to_string(dff), ToHost(d_out, ref.size()), ref);
    GPU_CHECK(cudaFree(d_gu));
    GPU_CHECK(cudaFree(d_out));
  }
}

void TestF32ToBf16(bool small) {
  const int64_t n = small ? 1003 : 100003;
  auto in = Normal(n + 1, 13, 100.0f);
  in[5] = kvformat::BitsFloat(0x3f808000u);  // ties
  in[6] = kvformat::BitsFloat(0x3f818000u);
  in[7] = INFINITY;
  in[8] = -0.0f;
  float* d_in = ToDevice(in);
  for (const int offset : {0, 1}) {  // aligned (vectorised) and misaligned (scalar)
    std::vector<uint16_t> ref(n);
    F32ToBf16Ref(in.data() + offset, n, ref.data());
    uint16_t* d_out = DeviceAlloc<uint16_t>(n);
    GPU_CHECK(F32ToBf16Cuda(d_in + offset, n, d_out, nullptr));
    GPU_CHECK(cudaDeviceSynchronize());
    CheckExact("F32ToBf16 offset=" + std::to_string(offset), ToHost(d_out, n), ref);
    GPU_CHECK(cudaFree(d_out));
  }
  GPU_CHECK(cudaFree(d_in));
}

void TestArgmax(bool small) {
  for (const int vocab : {small ? 4096 : 151936, 1001}) {
    const int rows = 6;
    auto logits = Normal(static_cast<size_t>(rows) * vocab, 14);
    auto at = [&](int r, int i) -> float& { return logits[static_cast<size_t>(r) * vocab + i]; };
    // Row 0: a tie between a late and an early index; row 1: ties across threads and warps;
    // row 2: all equal; row 3: NaNs and -inf around a max at the end; row 4: max at 0.
    at(0, vocab - 3) = 50.0f;
    at(0, 777) = 50.0f;
    for (int i = 0; i < vocab; i += 257) at(1, i) = 9.0f;
    for (int i = 0; i < vocab; ++i) at(2, i) = 1.5f;
    for (int i = 0; i < vocab; i += 3) at(3, i) = NAN;
    at(3, 1) = -INFINITY;
    at(3, vocab - 1) = 60.0f;
    at(4, 0) = 70.0f;
    std::vector<int32_t> ref(rows);
    ArgmaxRowsRef(logits.data(), rows, vocab, ref.data());
    float* d_logits = ToDevice(logits);
    int32_t* d_out = DeviceAlloc<int32_t>(rows);
    GPU_CHECK(ArgmaxRowsCuda(d_logits, rows, vocab, d_out, nullptr));
    GPU_CHECK(cudaDeviceSynchronize());
    const auto got = ToHost(d_out, rows);
    CheckExact("ArgmaxRows vocab=" + std::to_string(vocab), got, ref);
    Report(ref[0] == 777 && ref[1] == 0 && ref[2] == 0 && ref[3] == vocab - 1 && ref[4] == 0,
           "ArgmaxRowsRef expectations", "");
    GPU_CHECK(cudaFree(d_logits));
    GPU_CHECK(cudaFree(d_out));
  }
}

void TestPages(bool small) {
  for (const int d : {128, 64}) {
    const int heads = 3, tokens = small ? 19 : 61;
    const int num_used = (tokens + kPageTokens - 1) / kPageTokens, num_pages = num_used + 4;
    const int64_t unit = Bf16PageUnitBytes(d), head_stride = unit, page_stride = heads * unit + 64;
    std::vector<uint8_t> pool(static_cast<size_t>(num_pages) * page_stride);
    std::mt19937 rng(15);
    for (auto& b : pool) b = static_cast<uint8_t>(rng());
    std::vector<int32_t> order(num_pages);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    order.resize(num_used);
    const int64_t row_stride = heads * d + 12;
    const auto rows = Normal(static_cast<size_t>(tokens) * row_stride, 16);
    std::vector<int32_t> page_ids(tokens), rows_in_page(tokens);
    for (int t = 0; t < tokens; ++t) {
      page_ids[t] = order[t / kPageTokens];
      rows_in_page[t] = t % kPageTokens;
    }
    uint8_t* d_pool = ToDevice(pool);
    float* d_rows = ToDevice(rows);
    int32_t* d_ids = ToDevice(page_ids);
    int32_t* d_rip = ToDevice(rows_in_page);
    int32_t* d_order = ToDevice(order);
    std::vector<uint8_t> ref_pool = pool;
    // The write of segment seg (0: K, 1: V), without its rows and page tables.
    auto segment_write = [&](int seg) {
      PageRowsParams w;
      w.row_stride = row_stride;
      w.tokens = tokens;
      w.heads = heads;
      w.head_dim = d;
      w.page_stride_bytes = page_stride;
      w.head_stride_bytes = head_stride;
      w.segment_offset_bytes = seg == 0 ? Bf16PageKOffset(d) : Bf16PageVOffset(d);
      return w;
    };
    for (int seg = 0; seg < 2; ++seg) {
      PageRowsParams w = segment_write(seg);
      // K from the aligned rows (vectorised path), V from rows shifted by one float (scalar path).
      PageRowsParams hw = w;
      hw.rows = rows.data() + seg;
      hw.page_ids = page_ids.data();
      hw.rows_in_page = rows_in_page.data();
      hw.pool = ref_pool.data();
      WriteBf16PageRowsRef(hw);
      w.rows = d_rows + seg;
      w.page_ids = d_ids;
      w.rows_in_page = d_rip;
      w.pool = d_pool;
      GPU_CHECK(WriteBf16PageRowsCuda(w, nullptr));
    }
    GPU_CHECK(cudaDeviceSynchronize());
    CheckExact("WriteBf16PageRows d=" + std::to_string(d), ToHost(d_pool, pool.size()), ref_pool);
    // The same K and V writes as one launch (the decode step's form), into a fresh copy of the
    // pool: both rows aligned (vectorised), then V shifted by one float (both take the scalar
    // path); then V again beside an empty job, which is left out of the launch.
    for (const int v_shift : {0, 1}) {
      std::vector<uint8_t> ref_two = pool;
      uint8_t* d_two = ToDevice(pool);
      PageRowsParams jobs[2];
      for (int seg = 0; seg < 2; ++seg) {
        PageRowsParams& w = jobs[seg];
        w = segment_write(seg);
        PageRowsParams hw = w;
        hw.rows = rows.data() + (seg == 1 ? v_shift : 0);
        hw.page_ids = page_ids.data();
        hw.rows_in_page = rows_in_page.data();
        hw.pool = ref_two.data();
        WriteBf16PageRowsRef(hw);
        w.rows = d_rows + (seg == 1 ? v_shift : 0);
        w.page_ids = d_ids;
        w.rows_in_page = d_rip;
        w.pool = d_two;
      }
      GPU_CHECK(WriteBf16PageRowsCuda(jobs, 2, nullptr));
      PageRowsParams empty_and_v[2] = {PageRowsParams{}, jobs[1]};  // tokens 0: skipped
      GPU_CHECK(WriteBf16PageRowsCuda(empty_and_v, 2, nullptr));
      GPU_CHECK(cudaDeviceSynchronize());
      CheckExact("WriteBf16PageRows K+V one launch d=" + std::to_string(d) +
                     (v_shift ? " scalar" : " vectorised"),
                 ToHost(d_two, pool.size()), ref_two);
      GPU_CHECK(cudaFree(d_two));
    }
    for (int seg = 0; seg < 2; ++seg) {
      PageGatherParams gp;
      gp.num_pages = num_used;
      gp.heads = heads;
      gp.head_dim = d;
      gp.page_stride_bytes = page_stride;
      gp.head_stride_bytes = head_stride;
      gp.segment_offset_bytes = seg == 0 ? Bf16PageKOffset(d) : Bf16PageVOffset(d);
      const size_t n = static_cast<size_t>(num_used) * kPageTokens * heads * d;
      std::vector<uint16_t> ref(n);
      PageGatherParams hg = gp;
      hg.pool = ref_pool.data();
      hg.page_ids = order.data();
      hg.out_bf16 = ref.data();
      GatherBf16PageRowsRef(hg);
      uint16_t* d_out = DeviceAlloc<uint16_t>(n + 8);
      gp.pool = d_pool;
      gp.page_ids = d_order;
      gp.out_bf16 = d_out + (seg == 1 ? 1 : 0);  // V: misaligned output (scalar path)
      GPU_CHECK(GatherBf16PageRowsCuda(gp, nullptr));
      GPU_CHECK(cudaDeviceSynchronize());
      const auto all = ToHost(d_out, n + 1);
      std::vector<uint16_t> got(all.begin() + (seg == 1 ? 1 : 0), all.begin() + (seg == 1 ? 1 : 0) + n);
      CheckExact("GatherBf16PageRows d=" + std::to_string(d) + (seg == 0 ? " K" : " V"), got, ref);
      GPU_CHECK(cudaFree(d_out));
    }
    for (void* ptr : {static_cast<void*>(d_pool), static_cast<void*>(d_rows),
                      static_cast<void*>(d_ids), static_cast<void*>(d_rip),
                      static_cast<void*>(d_order)}) {
      GPU_CHECK(cudaFree(ptr));
    }
  }
}

void TestRotateRows(bool small) {
  for (int d : {64, 128}) {
    // Row counts that give each rows-per-block choice (1, 2, 4, 8), alone and three per launch.
    const int64_t many = small ? 40 : 1500;
    for (int64_t tokens : {int64_t{1}, int64_t{3}, int64_t{60}, many}) {
      const int heads = d == 64 ? 3 : 8;
      const int64_t stride = int64_t{heads} * d + 2 * d;  // strided like the fused QKV buffer
      const std::vector<float> in = Normal(static_cast<size_t>(tokens * stride), 77 + d);
      const std::vector<float> rot = Normal(static_cast<size_t>(d) * d, 78 + d, 0.1f);
      std::vector<float> ref(static_cast<size_t>(tokens * heads * d));
      RotateRowsParams p;
      p.in_token_stride = stride;
      p.tokens = tokens;
      p.heads = heads;
      p.head_dim = d;
      RotateRowsParams hp = p;
      hp.in = in.data();
      hp.rotation = rot.data();
      hp.out = ref.data();
      RotateRowsRef(hp);
      float* d_in = ToDevice(in);
      float* d_rot = ToDevice(rot);
      float* d_out = DeviceAlloc<float>(ref.size());
      GPU_CHECK(cudaMemset(d_out, 0xff, ref.size() * sizeof(float)));  // NaN poison
      p.in = d_in;
      p.rotation = d_rot;
      p.out = d_out;
      GPU_CHECK(RotateRowsCuda(p, nullptr));
      GPU_CHECK(cudaDeviceSynchronize());
      CheckExact("RotateRows d=" + std::to_string(d) + " tokens=" + std::to_string(tokens),
                 ToHost(d_out, ref.size()), ref);
      // Three rotations in one launch (K by R_K, V by R_V, and the first job again rounded to
      // bf16), each as alone, plus an empty job that is left out.
      const std::vector<float> rot2 = Normal(static_cast<size_t>(d) * d, 79 + d, 0.1f);
      std::vector<float> ref2(ref.size());
      std::vector<uint16_t> ref16(ref.size());
      RotateRowsParams hp2 = hp;
      hp2.in = in.data() + d;  // the next head's rows: another input
      hp2.rotation = rot2.data();
      hp2.out = ref2.data();
      RotateRowsRef(hp2);
      RotateRowsParams hp16 = hp;
      hp16.out = nullptr;
      hp16.out_bf16 = ref16.data();
      RotateRowsRef(hp16);
      float* d_rot2 = ToDevice(rot2);
      float* d_out2 = DeviceAlloc<float>(ref.size() + 4);
      uint16_t* d_out16 = DeviceAlloc<uint16_t>(ref.size());
      GPU_CHECK(cudaMemset(d_out, 0xff, ref.size() * sizeof(float)));
      GPU_CHECK(cudaMemset(d_out2, 0xff, (ref.size() + 4) * sizeof(float)));
      GPU_CHECK(cudaMemset(d_out16, 0xff, ref.size() * sizeof(uint16_t)));
      RotateRowsParams jobs[3] = {p, p, p};
      jobs[1].in = d_in + d;
      jobs[1].rotation = d_rot2;
      jobs[1].out = d_out2;
      jobs[2].out = nullptr;
      jobs[2].out_bf16 = d_out16;
      RotateRowsParams empty = p;
      empty.tokens = 0;
      GPU_CHECK(RotateRowsCuda(jobs, 3, nullptr));
      GPU_CHECK(RotateRowsCuda(&empty, 1, nullptr));
      GPU_CHECK(cudaDeviceSynchronize());
      const std::string name = " d=" + std::to_string(d) + " tokens=" + std::to_string(tokens);
      CheckExact("RotateRows 3 jobs, first" + name, ToHost(d_out, ref.size()), ref);
      CheckExact("RotateRows 3 jobs, second" + name, ToHost(d_out2, ref.size()), ref2);
      CheckExact("RotateRows 3 jobs, bf16" + name, ToHost(d_out16, ref.size()), ref16);
      std::vector<uint16_t> rounded(ref.size());
      F32ToBf16Ref(ref.data(), static_cast<int64_t>(ref.size()), rounded.data());
      CheckExact("RotateRowsRef bf16 = F32ToBf16Ref of f32" + name, ref16, rounded);
      GPU_CHECK(cudaFree(d_out16));
      for (float* ptr : {d_in, d_rot, d_out, d_rot2, d_out2}) GPU_CHECK(cudaFree(ptr));
    }
  }
}

struct AttnCase {
  int t, hq, hkv, d;
};

// The kernels PrefillAttentionCuda can take: mma.sync (no workspace) and, at head_dim 64 and
// 128, the Hopper one (a workspace of PrefillAttentionWorkspaceBytes, poisoned with NaN bf16 so
// that keys the staging fails to write or zero-pad would show). Returns the name for the report;
// `owned` gets the allocation.
std::string SelectPrefillKernel(bool hopper, PrefillAttentionParams& p, std::vector<void*>& owned) {
  p.workspace = nullptr;
  p.workspace_bytes = 0;
  if (!hopper) return " kernel=mma";
  p.workspace_bytes = PrefillAttentionWorkspaceBytes(p);
  GPU_CHECK(cudaMalloc(&p.workspace, static_cast<size_t>(p.workspace_bytes)));
  GPU_CHECK(cudaMemset(p.workspace, 0xff, static_cast<size_t>(p.workspace_bytes)));
  owned.push_back(p.workspace);
  return " kernel=sm90";
}
std::vector<bool> PrefillKernelsFor(int head_dim) {
  return head_dim == 64 || head_dim == 128 ? std::vector<bool>{false, true}
                                           : std::vector<bool>{false};
}

void TestPrefillAttention(bool small) {
  std::vector<AttnCase> cases;
  if (small) {
    cases = {{150, 4, 2, 128}, {70, 3, 3, 64}, {1, 2, 1, 64}};
  } else {
    cases = {{1000, 9, 3, 64}, {777, 32, 8, 128}, {128, 8, 2, 128}, {257, 4, 4, 64},
             {1, 2, 1, 128},   {65, 2, 1, 64},    {300, 6, 1, 128}};
  }
  for (const AttnCase& c : cases) {
    for (const bool hopper : PrefillKernelsFor(c.d)) {
      // Rows of a fused QKV GEMM output: [q | k | v] per token.
      const int qn = c.hq * c.d, kn = c.hkv * c.d;
      const int64_t stride = qn + 2 * kn;
      const auto qkv = Normal(static_cast<size_t>(c.t) * stride, 17 + c.t, 1.5f);
      PrefillAttentionParams p;
      p.q_row_stride = p.k_row_stride = p.v_row_stride = stride;
      p.num_tokens = c.t;
      p.num_q_heads = c.hq;
      p.num_kv_heads = c.hkv;
      p.head_dim = c.d;
      p.sm_scale = 1.0f / std::sqrt(static_cast<float>(c.d));
      const size_t out_n = static_cast<size_t>(c.t) * qn;
      std::vector<uint16_t> ref(out_n);
      PrefillAttentionParams hp = p;
      hp.q = qkv.data();
      hp.k = qkv.data() + qn;
      hp.v = qkv.data() + qn + kn;
      hp.out_bf16 = ref.data();
      PrefillAttentionRef(hp);
      float* d_qkv = ToDevice(qkv);
      uint16_t* d_out = DeviceAlloc<uint16_t>(out_n);
      PrefillAttentionParams dp = p;
      dp.q = d_qkv;
      dp.k = d_qkv + qn;
      dp.v = d_qkv + qn + kn;
      dp.out_bf16 = d_out;
      std::vector<void*> workspaces;
      const std::string kernel = SelectPrefillKernel(hopper, dp, workspaces);
      GPU_CHECK(PrefillAttentionCuda(dp, nullptr));
      GPU_CHECK(cudaDeviceSynchronize());
      const auto got16 = ToHost(d_out, out_n + 32);  // + guard (must stay 0xffff)
      std::vector<float> got(out_n);
      std::vector<double> ref64(out_n);
      for (size_t i = 0; i < out_n; ++i) {
        got[i] = kvformat::Bf16BitsToFloat(got16[i]);
        ref64[i] = kvformat::Bf16BitsToFloat(ref[i]);
      }
      bool guard_ok = true;
      for (size_t i = out_n; i < out_n + 32; ++i) guard_ok &= got16[i] == 0xffff;
      const double err = RelErr(got.data(), ref64.data(), out_n);
      char buf[160];
      std::snprintf(buf, sizeof(buf), "rel_err=%.3g guard=%s", err,
                    guard_ok ? "ok" : "OVERWRITTEN");
      Report(err <= kMaxPrefillAttentionRelErr && guard_ok,
             "PrefillAttention T=" + std::to_string(c.t) + " hq=" + std::to_string(c.hq) +
                 " hkv=" + std::to_string(c.hkv) + " d=" + std::to_string(c.d) + kernel,
             buf);
      GPU_CHECK(cudaFree(d_qkv));
      GPU_CHECK(cudaFree(d_out));
      for (void* ptr : workspaces) GPU_CHECK(cudaFree(ptr));
    }
  }
}

// Float64 causal attention of T query rows at positions q_offset.. over bf16-rounded k/v (the
// definition of PrefillAttentionParams). Returns [T][Hq][D].
std::vector<double> PrefillAttentionF64(const PrefillAttentionParams& p) {
  const int d = p.head_dim, group = p.num_q_heads / p.num_kv_heads;
  const int64_t kv_len = p.q_offset + p.num_tokens;
  std::vector<double> out(static_cast<size_t>(p.num_tokens) * p.num_q_heads * d);
  std::vector<double> s(kv_len), kb(static_cast<size_t>(kv_len) * d), vb(kb.size());
  for (int qh = 0; qh < p.num_q_heads; ++qh) {
    const int kvh = qh / group;
    if (qh % group == 0) {
      for (int64_t j = 0; j < kv_len; ++j) {
        for (int i = 0; i < d; ++i) {
          kb[j * d + i] = kvformat::RoundToBf16(p.k[j * p.k_row_stride + kvh * d + i]);
          vb[j * d + i] = kvformat::RoundToBf16(p.v[j * p.v_row_stride + kvh * d + i]);
        }
      }
    }
    for (int64_t t = 0; t < p.num_tokens; ++t) {
      const float* q = p.q + t * p.q_row_stride + qh * d;
      const int64_t last = p.q_offset + t;
      double mx = -INFINITY;
      for (int64_t j = 0; j <= last; ++j) {
        double dot = 0.0;
        for (int i = 0; i < d; ++i) dot += static_cast<double>(q[i]) * kb[j * d + i];
        s[j] = dot * p.sm_scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0.0;
      for (int64_t j = 0; j <= last; ++j) sum += (s[j] = std::exp(s[j] - mx));
      double* o = out.data() + (t * p.num_q_heads + qh) * d;
      for (int i = 0; i < d; ++i) o[i] = 0.0;
      for (int64_t j = 0; j <= last; ++j) {
        for (int i = 0; i < d; ++i) o[i] += s[j] * vb[j * d + i];
      }
      for (int i = 0; i < d; ++i) o[i] /= sum;
    }
  }
  return out;
}

// Chunked prefill: T query rows at q_offset over q_offset + T keys. The GPU result is checked
// against PrefillAttentionRef and the float64 definition (kMaxPrefillAttentionRelErr each), and
// must equal bit for bit the last T rows of the GPU's whole-prompt run over all q_offset + T rows
// (a row sees the same key tiles in the same order either way, and a tile with no key visible to
// a row is an exact no-op for it). q/k/v come from one fused [q | k | v] buffer as GpuModel passes
// them, or from three buffers with different padded strides; outputs are poisoned, with a guard.
void TestPrefillAttentionOffset(bool small) {
  const std::vector<int> offsets =
      small ? std::vector<int>{0, 63, 200} : std::vector<int>{0, 1, 63, 64, 200, 256, 1000};
  const std::vector<int> lengths =
      small ? std::vector<int>{1, 17, 130} : std::vector<int>{1, 17, 64, 128, 256, 300};
  struct Heads {
    int hq, hkv;
  };
  const std::vector<Heads> heads =
      small ? std::vector<Heads>{{3, 1}} : std::vector<Heads>{{3, 1}, {8, 2}};  // GQA 3 and 4
  for (size_t io = 0; io < offsets.size(); ++io) {
    for (size_t it = 0; it < lengths.size(); ++it) {
      for (const int d : {64, 128}) {
        for (const bool hopper : PrefillKernelsFor(d)) {
          for (const Heads& hh : heads) {
            const int q_offset = offsets[io], t = lengths[it];
            const bool fused = (io + it) % 2 == 0;
            const int64_t n = q_offset + t;
            const int qn = hh.hq * d, kn = hh.hkv * d;
            const uint64_t seed = 7000 + 31 * q_offset + t + d + hh.hq;
            // Host inputs: all n rows of q, k and v (q rows before q_offset feed the whole run).
            std::vector<float> qkv, q_sep, k_sep, v_sep;
            int64_t qs, ks, vs;
            if (fused) {
              qs = ks = vs = qn + 2 * kn;
              qkv = Normal(static_cast<size_t>(n) * qs, seed, 1.5f);
            } else {
              qs = qn + 4;
              ks = kn + 8;
              vs = kn + 12;
              q_sep = Normal(static_cast<size_t>(n) * qs, seed, 1.5f);
              k_sep = Normal(static_cast<size_t>(n) * ks, seed + 1, 1.5f);
              v_sep = Normal(static_cast<size_t>(n) * vs, seed + 2);
            }
            const float* hq_ptr = fused ? qkv.data() : q_sep.data();
            const float* hk_ptr = fused ? qkv.data() + qn : k_sep.data();
            const float* hv_ptr = fused ? qkv.data() + qn + kn : v_sep.data();

            PrefillAttentionParams p;
            p.q_row_stride = qs;
            p.k_row_stride = ks;
            p.v_row_stride = vs;
            p.num_tokens = t;
            p.q_offset = q_offset;
            p.num_q_heads = hh.hq;
            p.num_kv_heads = hh.hkv;
            p.head_dim = d;
            p.sm_scale = 1.0f / std::sqrt(static_cast<float>(d));
            const size_t out_n = static_cast<size_t>(t) * qn;
            std::vector<uint16_t> ref(out_n);
            PrefillAttentionParams hp = p;
            hp.q = hq_ptr + static_cast<int64_t>(q_offset) * qs;
            hp.k = hk_ptr;
            hp.v = hv_ptr;
            hp.out_bf16 = ref.data();
            PrefillAttentionRef(hp);
            const std::vector<double> ref64 = PrefillAttentionF64(hp);

            float *d_q, *d_k, *d_v;
            std::vector<float*> owned;
            if (fused) {
              float* d_qkv = ToDevice(qkv);
              owned = {d_qkv};
              d_q = d_qkv;
              d_k = d_qkv + qn;
              d_v = d_qkv + qn + kn;
            } else {
              d_q = ToDevice(q_sep);
              d_k = ToDevice(k_sep);
              d_v = ToDevice(v_sep);
              owned = {d_q, d_k, d_v};
            }
            uint16_t* d_out = DeviceAlloc<uint16_t>(out_n);
            uint16_t* d_whole = DeviceAlloc<uint16_t>(static_cast<size_t>(n) * qn);
            PrefillAttentionParams dp = p;
            dp.q = d_q + static_cast<int64_t>(q_offset) * qs;
            dp.k = d_k;
            dp.v = d_v;
            dp.out_bf16 = d_out;
            std::vector<void*> workspaces;
            // Sized for the whole run's keys, which are the chunk's keys too.
            const std::string kernel = SelectPrefillKernel(hopper, dp, workspaces);
            GPU_CHECK(PrefillAttentionCuda(dp, nullptr));
            PrefillAttentionParams whole = dp;
            whole.q = d_q;
            whole.num_tokens = n;
            whole.q_offset = 0;
            whole.out_bf16 = d_whole;
            GPU_CHECK(PrefillAttentionCuda(whole, nullptr));
            GPU_CHECK(cudaDeviceSynchronize());

            const auto got16 = ToHost(d_out, out_n + 32);  // + guard (must stay 0xffff)
            const auto whole16 = ToHost(d_whole, static_cast<size_t>(n) * qn);
            std::vector<float> got(out_n);
            std::vector<double> ref_d(out_n);
            size_t tail_mismatches = 0;
            for (size_t i = 0; i < out_n; ++i) {
              got[i] = kvformat::Bf16BitsToFloat(got16[i]);
              ref_d[i] = kvformat::Bf16BitsToFloat(ref[i]);
              tail_mismatches += got16[i] != whole16[static_cast<size_t>(q_offset) * qn + i];
            }
            bool guard_ok = true;
            for (size_t i = out_n; i < out_n + 32; ++i) guard_ok &= got16[i] == 0xffff;
            const double err_ref = RelErr(got.data(), ref_d.data(), out_n);
            const double err_f64 = RelErr(got.data(), ref64.data(), out_n);
            char buf[200];
            std::snprintf(buf, sizeof(buf),
                          "rel_err(ref)=%.3g rel_err(f64)=%.3g tail_mismatches=%zu guard=%s",
                          err_ref, err_f64, tail_mismatches, guard_ok ? "ok" : "OVERWRITTEN");
            Report(err_ref <= kMaxPrefillAttentionRelErr && err_f64 <= kMaxPrefillAttentionRelErr &&
                       tail_mismatches == 0 && guard_ok,
                   "PrefillAttentionOffset q_offset=" + std::to_string(q_offset) +
                       " T=" + std::to_string(t) + " hq=" + std::to_string(hh.hq) +
                       " hkv=" + std::to_string(hh.hkv) + " d=" + std::to_string(d) +
                       (fused ? " fused" : " separate") + kernel,
                   buf);
            for (float* ptr : owned) GPU_CHECK(cudaFree(ptr));
            for (void* ptr : workspaces) GPU_CHECK(cudaFree(ptr));
            GPU_CHECK(cudaFree(d_out));
            GPU_CHECK(cudaFree(d_whole));
          }
        }
      }
    }
  }
}

// Pack then unpack into a second, poisoned pool: packed bytes equal the reference's, and every
// listed page comes back bit-exact (unlisted pages keep the poison).
void TestPagePacking(bool small) {
  for (int64_t chunk : {int64_t{3 * 320}, int64_t{8 * 576}}) {  // INT2 chunks, D=64 / D=128
    const int layers = small ? 2 : 30;
    const int64_t pool_pages = small ? 16 : 600;
    const size_t pool_bytes = static_cast<size_t>(layers * pool_pages * chunk);
    std::vector<uint8_t> pool(pool_bytes);
    std::mt19937 rng(static_cast<uint32_t>(chunk));
    for (uint8_t& b : pool) b = static_cast<uint8_t>(rng());
    std::vector<int32_t> pages(static_cast<size_t>(pool_pages));
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    pages.resize(pages.size() * 2 / 3);  // a sequence owns a scattered subset
    PagePackParams p;
    p.pool_pages = pool_pages;
    p.chunk_bytes = chunk;
    p.layers = layers;
    p.num_pages = static_cast<int64_t>(pages.size());
    std::vector<uint8_t> ref(static_cast<size_t>(layers * p.num_pages * chunk));
    PagePackParams hp = p;
    hp.pool = pool.data();
    hp.pages = pages.data();
    hp.packed = ref.data();
    PackPagesRef(hp);
    uint8_t* d_pool = ToDevice(pool);
    int32_t* d_pages = ToDevice(pages);
    uint8_t* d_packed = DeviceAlloc<uint8_t>(ref.size());
    uint8_t* d_pool2 = DeviceAlloc<uint8_t>(pool_bytes);
    GPU_CHECK(cudaMemset(d_packed, 0xff, ref.size()));
    GPU_CHECK(cudaMemset(d_pool2, 0xff, pool_bytes));
    p.pool = d_pool;
    p.pages = d_pages;
    p.packed = d_packed;
    GPU_CHECK(PackPagesCuda(p, nullptr));
    p.pool = d_pool2;
    GPU_CHECK(UnpackPagesCuda(p, nullptr));
    GPU_CHECK(cudaDeviceSynchronize());
    CheckExact("PackPages chunk=" + std::to_string(chunk), ToHost(d_packed, ref.size()), ref);
    std::vector<uint8_t> want(pool_bytes, 0xff);
    hp.pool = want.data();
    UnpackPagesRef(hp);
    CheckExact("UnpackPages chunk=" + std::to_string(chunk), ToHost(d_pool2, pool_bytes), want);
    for (void* ptr : {static_cast<void*>(d_pool), static_cast<void*>(d_pages),
                      static_cast<void*>(d_packed), static_cast<void*>(d_pool2)}) {
      GPU_CHECK(cudaFree(ptr));
    }
  }
}

void TestInvalidArguments() {
  PrefillAttentionParams p;
  p.num_tokens = 4;
  p.num_q_heads = 2;
  p.num_kv_heads = 1;
  p.head_dim = 96;
  p.sm_scale = 0.1f;
  float dummy_f[4];
  uint16_t dummy_b[4];
  p.q = p.k = p.v = dummy_f;  // never dereferenced: rejected before launch
  p.out_bf16 = dummy_b;
  bool ok = PrefillAttentionCuda(p, nullptr) == cudaErrorInvalidValue;
  p.head_dim = 64;
  p.num_q_heads = 3;
  p.num_kv_heads = 2;
  ok &= PrefillAttentionCuda(p, nullptr) == cudaErrorInvalidValue;
  p.num_kv_heads = 1;
  p.q_offset = -1;
  ok &= PrefillAttentionCuda(p, nullptr) == cudaErrorInvalidValue;
  p.q_offset = INT32_MAX - 64;  // key rows would overflow the kernel's int positions
  ok &= PrefillAttentionCuda(p, nullptr) == cudaErrorInvalidValue;
  ok &= ArgmaxRowsCuda(nullptr, 1, 0, nullptr, nullptr) == cudaErrorInvalidValue;
  ok &= F32ToBf16Cuda(nullptr, 0, nullptr, nullptr) == cudaSuccess;  // empty: no launch
  PagePackParams pp;
  pp.num_pages = 1;
  pp.layers = 1;
  pp.pool_pages = 1;
  pp.chunk_bytes = 24;  // not a multiple of 16
  pp.pool = pp.packed = reinterpret_cast<uint8_t*>(dummy_b);
  pp.pages = reinterpret_cast<const int32_t*>(dummy_f);
  ok &= PackPagesCuda(pp, nullptr) == cudaErrorInvalidValue;
  alignas(16) float dummy_r[4];
  RotateRowsParams rp;
  rp.in = dummy_f;
  rp.in_token_stride = 64;
  rp.tokens = 1;
  rp.heads = 1;
  rp.head_dim = 64;
  rp.rotation = dummy_r;
  rp.out = dummy_f;
  rp.out_bf16 = dummy_b;  // both outputs set
  ok &= RotateRowsCuda(rp, nullptr) == cudaErrorInvalidValue;
  rp.out_bf16 = nullptr;
  RotateRowsParams mixed[2] = {rp, rp};
  mixed[1].head_dim = 128;
  mixed[1].in_token_stride = 128;
  ok &= RotateRowsCuda(mixed, 2, nullptr) == cudaErrorInvalidValue;  // two head dims
  ok &= RotateRowsCuda(mixed, 0, nullptr) == cudaErrorInvalidValue;
  ok &= RotateRowsCuda(mixed, kMaxRotateJobs + 1, nullptr) == cudaErrorInvalidValue;
  QkvPostParams qp;
  qp.q = qp.k = qp.v = dummy_f;
  qp.q_row_stride = qp.k_row_stride = qp.v_row_stride = 64;
  qp.rows = 1;
  qp.num_q_heads = qp.num_kv_heads = 1;
  qp.head_dim = 64;
  qp.rope_dim = 64;
  qp.positions = reinterpret_cast<const int32_t*>(dummy_f);
  QkvRotatedOut ro{.qk_rotation = nullptr, .v_rotation = dummy_r, .q = dummy_f};
  ok &= QkvPostCuda(qp, ro, nullptr) == cudaErrorInvalidValue;  // q copy without R_K
  ro = {.qk_rotation = dummy_r + 1, .k = dummy_f};
  ok &= QkvPostCuda(qp, ro, nullptr) == cudaErrorInvalidValue;  // R not 16-byte aligned
  ro = {.qk_rotation = dummy_r, .k = dummy_f};
  qp.head_dim = qp.rope_dim = 96;
  ok &= QkvPostCuda(qp, ro, nullptr) == cudaErrorInvalidValue;  // no rotation at D = 96
  qp.head_dim = qp.rope_dim = 64;
  const QkvPageWrite pw{.pool = reinterpret_cast<uint8_t*>(dummy_b),
                        .page_ids = reinterpret_cast<const int32_t*>(dummy_f),
                        .rows_in_page = reinterpret_cast<const int32_t*>(dummy_f)};
  ro = {.qk_rotation = dummy_r, .k = dummy_f, .pages = pw};
  ok &= QkvPostCuda(qp, ro, nullptr) == cudaErrorInvalidValue;  // page write without the v copy
  ro.v_rotation = dummy_r;
  ro.v = dummy_f;
  ro.pages.page_ids = nullptr;
  ok &= QkvPostCuda(qp, ro, nullptr) == cudaErrorInvalidValue;  // page write without page ids
  QkvPageWrite bad = pw;
  bad.rows_in_page = nullptr;
  ok &= QkvPostCuda(qp, bad, nullptr) == cudaErrorInvalidValue;  // no row-in-page indices
  bad = pw;
  bad.pool += 1;
  ok &= QkvPostCuda(qp, bad, nullptr) == cudaErrorInvalidValue;  // bf16 rows not 2-byte aligned
  bad = pw;
  bad.v_segment_offset_bytes = 3;
  ok &= QkvPostCuda(qp, bad, nullptr) == cudaErrorInvalidValue;  // odd segment offset
  PageRowsParams wp[kMaxPageRowsJobs + 1];
  ok &= WriteBf16PageRowsCuda(wp, kMaxPageRowsJobs + 1, nullptr) == cudaErrorInvalidValue;
  ok &= WriteBf16PageRowsCuda(wp, 2, nullptr) == cudaSuccess;  // both empty: no launch
  GPU_CHECK(cudaGetLastError());
  Report(ok, "InvalidArguments", "");
}

// ---- Chained launches (programmatic dependent launch) ----
// Runs `launch` on a fresh stream right after a kernel that lets it start at once and only then
// writes its input (tests/kernels/slow_writer.h): `bytes` of `d_in` are first overwritten with
// `stale`, and the slow writer restores `real`. An entry that read its input before waiting for
// the kernel before it would compute from the stale bytes.
void AfterSlowWriter(void* d_in, const void* real, const void* stale, size_t bytes,
                     const std::function<cudaError_t(cudaStream_t)>& launch) {
  cudaStream_t stream;
  GPU_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  void* d_real = nullptr;
  GPU_CHECK(cudaMalloc(&d_real, bytes));
  GPU_CHECK(cudaMemcpy(d_real, real, bytes, cudaMemcpyHostToDevice));
  GPU_CHECK(cudaMemcpy(d_in, stale, bytes, cudaMemcpyHostToDevice));
  GPU_CHECK(cudaDeviceSynchronize());
  const testing::SlowCopy copy{d_real, d_in, static_cast<int64_t>(bytes)};
  GPU_CHECK(testing::LaunchSlowWriter(&copy, 1, 50, stream));
  GPU_CHECK(launch(stream));
  GPU_CHECK(cudaStreamSynchronize(stream));
  GPU_CHECK(cudaFree(d_real));
  GPU_CHECK(cudaStreamDestroy(stream));
}

// Each chained entry of a decode step after a late writer of its input: the result must be the
// reference's for the written input (the same budgets as the tests above).
void TestChainedAfterSlowWriter() {
  const std::string tag = " after a slow writer of its input";
  {  // embedding: the tokens come late
    const int vocab = 1000, d = 256, rows = 7;
    std::vector<uint16_t> table(static_cast<size_t>(vocab) * d);
    const auto vals = Normal(table.size(), 101);
    for (size_t i = 0; i < table.size(); ++i) table[i] = kvformat::FloatToBf16Bits(vals[i]);
    std::vector<int32_t> tokens(rows), stale(rows);
    for (int r = 0; r < rows; ++r) tokens[r] = 17 * r + 3, stale[r] = 900 - r;
    std::vector<float> ref(static_cast<size_t>(rows) * d);
    EmbedRowsRef(table.data(), tokens.data(), rows, d, ref.data());
    uint16_t* d_table = ToDevice(table);
    int32_t* d_tokens = ToDevice(stale);
    float* d_x = DeviceAlloc<float>(ref.size());
    AfterSlowWriter(d_tokens, tokens.data(), stale.data(), rows * 4, [&](cudaStream_t st) {
      return EmbedRowsCuda(d_table, d_tokens, rows, d, d_x, st);
    });
    CheckExact("EmbedRows" + tag, ToHost(d_x, ref.size()), ref);
    for (void* ptr : {static_cast<void*>(d_table), static_cast<void*>(d_tokens),
                      static_cast<void*>(d_x)}) {
      GPU_CHECK(cudaFree(ptr));
    }
  }
  {  // RMSNorm, SiLU-mul, f32 -> bf16 and argmax: their f32 input comes late
    const int rows = 4, n = 1024;
    const auto x = Normal(static_cast<size_t>(rows) * 2 * n, 102, 3.0f);
    const auto stale = Normal(x.size(), 103, 3.0f);
    const auto w = Normal(n, 104);
    float* d_in = ToDevice(stale);
    float* d_w = ToDevice(w);
    uint16_t* d_out = DeviceAlloc<uint16_t>(x.size());
    int32_t* d_idx = DeviceAlloc<int32_t>(rows);
    std::vector<uint16_t> ref(static_cast<size_t>(rows) * n);
    RmsNormToBf16Ref(x.data(), w.data(), rows, n, 1e-6f, ref.data());
    AfterSlowWriter(d_in, x.data(), stale.data(), x.size() * 4, [&](cudaStream_t st) {
      return RmsNormToBf16Cuda(d_in, d_w, rows, n, 1e-6f, d_out, st);
    });
    CheckBf16("RmsNormToBf16" + tag, ToHost(d_out, ref.size()), ref);
    SiluMulToBf16Ref(x.data(), rows, n, ref.data());
    AfterSlowWriter(d_in, x.data(), stale.data(), x.size() * 4, [&](cudaStream_t st) {
      return SiluMulToBf16Cuda(d_in, rows, n, d_out, st);
    });
    CheckBf16("SiluMulToBf16" + tag, ToHost(d_out, ref.size()), ref);
    std::vector<uint16_t> ref16(x.size());
    F32ToBf16Ref(x.data(), static_cast<int64_t>(x.size()), ref16.data());
    AfterSlowWriter(d_in, x.data(), stale.data(), x.size() * 4, [&](cudaStream_t st) {
      return F32ToBf16Cuda(d_in, static_cast<int64_t>(x.size()), d_out, st);
    });
    CheckExact("F32ToBf16" + tag, ToHost(d_out, ref16.size()), ref16);
    std::vector<int32_t> ref_idx(rows);
    ArgmaxRowsRef(x.data(), rows, 2 * n, ref_idx.data());
    AfterSlowWriter(d_in, x.data(), stale.data(), x.size() * 4, [&](cudaStream_t st) {
      return ArgmaxRowsCuda(d_in, rows, 2 * n, d_idx, st);
    });
    CheckExact("ArgmaxRows" + tag, ToHost(d_idx, rows), ref_idx);
    for (void* ptr : {static_cast<void*>(d_in), static_cast<void*>(d_w),
                      static_cast<void*>(d_out), static_cast<void*>(d_idx)}) {
      GPU_CHECK(cudaFree(ptr));
    }
  }
  for (const int d : {64, 128}) {  // RotateRows (R staged before its wait): the rows come late
    const int tokens = 3, heads = 4;
    const auto in = Normal(static_cast<size_t>(tokens) * heads * d, 105 + d);
    const auto stale = Normal(in.size(), 106 + d);
    const auto rot = Normal(static_cast<size_t>(d) * d, 107 + d, 0.1f);
    std::vector<float> ref(in.size());
    RotateRowsRef({.in = in.data(), .in_token_stride = int64_t{heads} * d, .tokens = tokens,
                   .heads = heads, .head_dim = d, .rotation = rot.data(), .out = ref.data()});
    float* d_in = ToDevice(stale);
    float* d_rot = ToDevice(rot);
    float* d_out = DeviceAlloc<float>(ref.size());
    const RotateRowsParams p{.in = d_in, .in_token_stride = int64_t{heads} * d, .tokens = tokens,
                             .heads = heads, .head_dim = d, .rotation = d_rot, .out = d_out};
    AfterSlowWriter(d_in, in.data(), stale.data(), in.size() * 4,
                    [&](cudaStream_t st) { return RotateRowsCuda(p, st); });
    CheckExact("RotateRows d=" + std::to_string(d) + tag, ToHost(d_out, ref.size()), ref);
    for (float* ptr : {d_in, d_rot, d_out}) GPU_CHECK(cudaFree(ptr));
  }
  {  // QKV post-processing with rotated copies (R staged before its wait): the rows come late
    const int hq = 8, hkv = 2, d = 128, rows = 1;
    const int qn = hq * d, kn = hkv * d;
    const int64_t stride = qn + 2 * kn;
    const auto qkv = Normal(static_cast<size_t>(rows) * stride, 108, 2.0f);
    const auto stale = Normal(qkv.size(), 109, 2.0f);
    const auto r_qk = Normal(static_cast<size_t>(d) * d, 110, 0.1f);
    const auto r_v = Normal(static_cast<size_t>(d) * d, 111, 0.1f);
    const std::vector<int32_t> pos = {4321};
    QkvPostParams p;
    p.q_row_stride = p.k_row_stride = p.v_row_stride = stride;
    p.rows = rows;
    p.num_q_heads = hq;
    p.num_kv_heads = hkv;
    p.head_dim = d;
    p.rope_dim = d;
    p.eps = 1e-6f;
    p.rope_theta = 1000000.0;
    p.rope_scale = 1.0;
    p.pairing = RopePairing::kNeox;
    std::vector<float> ref = qkv;
    QkvPostParams hp = p;
    hp.q = ref.data();
    hp.k = ref.data() + qn;
    hp.v = ref.data() + qn + kn;
    hp.positions = pos.data();
    QkvPostRef(hp);
    std::vector<float> ref_v(static_cast<size_t>(rows) * kn);
    float* d_qkv = ToDevice(stale);
    int32_t* d_pos = ToDevice(pos);
    float *d_rqk = ToDevice(r_qk), *d_rv = ToDevice(r_v);
    float* d_rot_v = DeviceAlloc<float>(ref_v.size());
    QkvPostParams dp = p;
    dp.q = d_qkv;
    dp.k = d_qkv + qn;
    dp.v = d_qkv + qn + kn;
    dp.positions = d_pos;
    const QkvRotatedOut ro{.qk_rotation = d_rqk, .v_rotation = d_rv, .v = d_rot_v};
    AfterSlowWriter(d_qkv, qkv.data(), stale.data(), qkv.size() * 4,
                    [&](cudaStream_t st) { return QkvPostCuda(dp, ro, st); });
    const auto got = ToHost(d_qkv, qkv.size());
    std::vector<double> ref64(ref.begin(), ref.end());
    const double err = RelErr(got.data(), ref64.data(), ref.size());
    Report(err <= kMaxQkvPostRelErr, "QkvPost + rotations" + tag + ": in place",
           "rel_err=" + std::to_string(err));
    // The rotated V against RotateRowsRef of the GPU's own in-place V (as TestQkvPost does).
    RotateRowsRef({.in = got.data() + qn + kn, .in_token_stride = stride, .tokens = rows,
                   .heads = hkv, .head_dim = d, .rotation = r_v.data(), .out = ref_v.data()});
    CheckExact("QkvPost + rotations" + tag + ": rotated v", ToHost(d_rot_v, ref_v.size()), ref_v);
    for (void* ptr : {static_cast<void*>(d_qkv), static_cast<void*>(d_pos),
                      static_cast<void*>(d_rqk), static_cast<void*>(d_rv),
                      static_cast<void*>(d_rot_v)}) {
      GPU_CHECK(cudaFree(ptr));
    }
  }
  {  // BF16 page write (the rows come late), then the gather of those pages (the pool comes late)
    const int d = 128, heads = 2, tokens = 16;
    const int64_t unit = Bf16PageUnitBytes(d), page_stride = heads * unit;
    const int num_pages = tokens / kPageTokens;
    const auto rows = Normal(static_cast<size_t>(tokens) * heads * d, 112);
    const auto stale = Normal(rows.size(), 113);
    std::vector<int32_t> page_ids(tokens), rows_in_page(tokens), order(num_pages);
    for (int t = 0; t < tokens; ++t) {
      page_ids[t] = num_pages - 1 - t / kPageTokens;
      rows_in_page[t] = t % kPageTokens;
    }
    for (int i = 0; i < num_pages; ++i) order[i] = num_pages - 1 - i;
    std::vector<uint8_t> pool(static_cast<size_t>(num_pages) * page_stride, 0x5a);
    // The K segment of every page, on the host (reference) and on the device.
    auto write = [&](const float* r, const int32_t* ids, const int32_t* rip, uint8_t* pl) {
      return PageRowsParams{.rows = r, .row_stride = int64_t{heads} * d, .tokens = tokens,
                            .heads = heads, .head_dim = d, .page_ids = ids,
                            .rows_in_page = rip, .pool = pl, .page_stride_bytes = page_stride,
                            .head_stride_bytes = unit,
                            .segment_offset_bytes = Bf16PageKOffset(d)};
    };
    auto gather = [&](const uint8_t* pl, const int32_t* ids, uint16_t* out) {
      return PageGatherParams{.pool = pl, .page_ids = ids, .num_pages = num_pages,
                              .heads = heads, .head_dim = d, .page_stride_bytes = page_stride,
                              .head_stride_bytes = unit,
                              .segment_offset_bytes = Bf16PageKOffset(d), .out_bf16 = out};
    };
    std::vector<uint8_t> ref_pool = pool;
    WriteBf16PageRowsRef(write(rows.data(), page_ids.data(), rows_in_page.data(),
                               ref_pool.data()));
    float* d_rows = ToDevice(stale);
    int32_t* d_ids = ToDevice(page_ids);
    int32_t* d_rip = ToDevice(rows_in_page);
    int32_t* d_order = ToDevice(order);
    uint8_t* d_pool = ToDevice(pool);
    const PageRowsParams w = write(d_rows, d_ids, d_rip, d_pool);
    AfterSlowWriter(d_rows, rows.data(), stale.data(), rows.size() * 4,
                    [&](cudaStream_t st) { return WriteBf16PageRowsCuda(w, st); });
    CheckExact("WriteBf16PageRows" + tag, ToHost(d_pool, pool.size()), ref_pool);
    std::vector<uint16_t> ref_rows(static_cast<size_t>(tokens) * heads * d);
    GatherBf16PageRowsRef(gather(ref_pool.data(), order.data(), ref_rows.data()));
    uint16_t* d_gathered = DeviceAlloc<uint16_t>(ref_rows.size());
    const PageGatherParams g = gather(d_pool, d_order, d_gathered);
    AfterSlowWriter(d_pool, ref_pool.data(), pool.data(), pool.size(),
                    [&](cudaStream_t st) { return GatherBf16PageRowsCuda(g, st); });
    CheckExact("GatherBf16PageRows" + tag, ToHost(d_gathered, ref_rows.size()), ref_rows);
    for (void* ptr : {static_cast<void*>(d_rows), static_cast<void*>(d_ids),
                      static_cast<void*>(d_rip), static_cast<void*>(d_order),
                      static_cast<void*>(d_pool), static_cast<void*>(d_gathered)}) {
      GPU_CHECK(cudaFree(ptr));
    }
  }
}

}  // namespace
}  // namespace oscarkv

int main(int argc, char** argv) {
  bool small = false;
  for (int i = 1; i < argc; ++i) small |= std::string(argv[i]) == "--small";
  if (!oscarkv::testing::HaveGpu()) {
    std::printf("no GPU: skipped\n");
    return 77;
  }
  using namespace oscarkv;  // NOLINT
  TestEmbed(small);
  TestRmsNorm(small);
  TestQkvPost(small);
  TestSiluMul(small);
  TestF32ToBf16(small);
  TestArgmax(small);
  TestPages(small);
  TestPrefillAttention(small);
  TestPrefillAttentionOffset(small);
  TestRotateRows(small);
  TestPagePacking(small);
  TestChainedAfterSlowWriter();
  TestInvalidArguments();
  std::printf("%s: %d failure(s)\n", g_failures == 0 ? "PASSED" : "FAILED", g_failures);
  return g_failures == 0 ? 0 : 1;
}

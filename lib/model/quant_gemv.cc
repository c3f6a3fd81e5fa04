#include "lib/model/quant_gemv.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "lib/base/log.h"
#include "lib/kvformat/float16.h"
#include "lib/model/gguf_file.h"
#include "lib/model/thread_pool.h"

// GCC 12 reports its own intrinsics (_mm512_undefined_*: `__m512i __Y = __Y;`) as maybe
// uninitialized when they are inlined into target-attributed functions: a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace oscarkv::model {
namespace {

constexpr int64_t kQ4_1Bytes = 20;  // {fp16 d, fp16 m, u8 qs[16]}: low nibbles 0-15, high 16-31
constexpr int64_t kQ8_0Bytes = 34;  // {fp16 d, i8 qs[32]}
// x is rounded to int16 codes in [-kActivationMax, kActivationMax] per block.
constexpr float kActivationMax = 32767.0f;

bool IsQ4_1(const QuantMatrix& m) { return m.type == static_cast<uint32_t>(GgmlType::kQ4_1); }

// The portable fp16 conversion for the scalar kernel (it must run on any x86-64).
inline float HalfPortable(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return kvformat::HalfBitsToFloat(h);
}

using DotFn = float (*)(const uint8_t*, const int16_t*, const float*, const float*, int64_t);

// ---- scalar kernels: the fallback, and the reference the SIMD ones are tested against -------
// Integer block sums fit int32: |c| * |q| * 32 <= 128 * 32767 * 32 < 2^31.

float DotQ4_1Scalar(const uint8_t* row, const int16_t* xq, const float* xd, const float* xs,
                    int64_t blocks) {
  float acc = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = row + b * kQ4_1Bytes;
    const int16_t* q = xq + b * 32;
    int32_t isum = 0;
    for (int j = 0; j < 16; ++j) {
      isum += (blk[4 + j] & 0xF) * q[j] + (blk[4 + j] >> 4) * q[j + 16];
    }
    acc += HalfPortable(blk) * xd[b] * static_cast<float>(isum) + HalfPortable(blk + 2) * xs[b];
  }
  return acc;
}

float DotQ8_0Scalar(const uint8_t* row, const int16_t* xq, const float* xd, const float* /*xs*/,
                    int64_t blocks) {
  float acc = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = row + b * kQ8_0Bytes;
    const int16_t* q = xq + b * 32;
    int32_t isum = 0;
    for (int j = 0; j < 32; ++j) isum += static_cast<int8_t>(blk[2 + j]) * q[j];
    acc += HalfPortable(blk) * xd[b] * static_cast<float>(isum);
  }
  return acc;
}

// ---- AVX-VNNI (256-bit) kernels: one block per step, vpdpwssd on 16-bit pairs ----------------

#define OSCARKV_AVXVNNI __attribute__((target("avx2,fma,f16c,avxvnni")))

OSCARKV_AVXVNNI inline float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

OSCARKV_AVXVNNI inline float HorizontalSum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

OSCARKV_AVXVNNI float DotQ4_1AvxVnni(const uint8_t* row, const int16_t* xq, const float* xd,
                                     const float* xs, int64_t blocks) {
  const __m128i low4 = _mm_set1_epi8(0x0F);
  __m256 acc = _mm256_setzero_ps();
  float acc_m = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = row + b * kQ4_1Bytes;
    const __m128i nib = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4));
    // The low nibbles are elements 0-15, the high ones 16-31.
    const __m256i lo = _mm256_cvtepu8_epi16(_mm_and_si128(nib, low4));
    const __m256i hi = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(nib, 4), low4));
    const __m256i* x = reinterpret_cast<const __m256i*>(xq + b * 32);
    __m256i dot = _mm256_dpwssd_avx_epi32(_mm256_setzero_si256(), lo, _mm256_loadu_si256(x));
    dot = _mm256_dpwssd_avx_epi32(dot, hi, _mm256_loadu_si256(x + 1));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(Half(blk) * xd[b]), acc);
    acc_m += Half(blk + 2) * xs[b];
  }
  return HorizontalSum256(acc) + acc_m;
}

OSCARKV_AVXVNNI float DotQ8_0AvxVnni(const uint8_t* row, const int16_t* xq, const float* xd,
                                     const float* /*xs*/, int64_t blocks) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = row + b * kQ8_0Bytes;
    const __m128i* w = reinterpret_cast<const __m128i*>(blk + 2);
    const __m256i* x = reinterpret_cast<const __m256i*>(xq + b * 32);
    __m256i dot = _mm256_dpwssd_avx_epi32(_mm256_setzero_si256(),
                                          _mm256_cvtepi8_epi16(_mm_loadu_si128(w)),
                                          _mm256_loadu_si256(x));
    dot = _mm256_dpwssd_avx_epi32(dot, _mm256_cvtepi8_epi16(_mm_loadu_si128(w + 1)),
                                  _mm256_loadu_si256(x + 1));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(Half(blk) * xd[b]), acc);
  }
  return HorizontalSum256(acc);
}

// ---- AVX-512 VNNI kernels: a block (32 weights as 16-bit) per vpdpwssd, two accumulators -----

// Decode streams ~100 MB of weights per token, more than this VM's share of L3, so the loops
// are DRAM-bound; prefetching this far ahead in the (contiguous) rows keeps more lines in flight
// than the hardware prefetcher does on its own.
#ifndef OSCARKV_QUANT_GEMV_PREFETCH
#define OSCARKV_QUANT_GEMV_PREFETCH 2048
#endif
constexpr int64_t kPrefetchBytes = OSCARKV_QUANT_GEMV_PREFETCH;

#define OSCARKV_AVX512VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")))

OSCARKV_AVX512VNNI inline float Half512(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// The 32 codes of Q4_1 block `blk` widened to int16, in element order.
OSCARKV_AVX512VNNI inline __m512i Q4_1Codes(const uint8_t* blk) {
  const __m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4)));
  const __m256i lo = _mm256_and_si256(v, _mm256_set1_epi16(0x0F));
  const __m256i hi = _mm256_srli_epi16(v, 4);
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

OSCARKV_AVX512VNNI float DotQ4_1Avx512Vnni(const uint8_t* row, const int16_t* xq,
                                           const float* xd, const float* xs, int64_t blocks) {
  // Two accumulators: the fmadd latency (4 cycles) would otherwise bound the loop.
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  float acc_m = 0;
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    const uint8_t* b0 = row + b * kQ4_1Bytes;
    const uint8_t* b1 = b0 + kQ4_1Bytes;
    if (kPrefetchBytes > 0) _mm_prefetch(reinterpret_cast<const char*>(b0) + kPrefetchBytes, _MM_HINT_T0);
    const __m512i d0 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), Q4_1Codes(b0),
                                           _mm512_loadu_si512(xq + b * 32));
    const __m512i d1 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), Q4_1Codes(b1),
                                           _mm512_loadu_si512(xq + b * 32 + 32));
    acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_set1_ps(Half512(b0) * xd[b]), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), _mm512_set1_ps(Half512(b1) * xd[b + 1]), acc1);
    acc_m += Half512(b0 + 2) * xs[b] + Half512(b1 + 2) * xs[b + 1];
  }
  float tail = 0;
  if (b < blocks) tail = DotQ4_1Scalar(row + b * kQ4_1Bytes, xq + b * 32, xd + b, xs + b, 1);
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + acc_m + tail;
}

OSCARKV_AVX512VNNI float DotQ8_0Avx512Vnni(const uint8_t* row, const int16_t* xq,
                                           const float* xd, const float* xs, int64_t blocks) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    const uint8_t* b0 = row + b * kQ8_0Bytes;
    const uint8_t* b1 = b0 + kQ8_0Bytes;
    if (kPrefetchBytes > 0) _mm_prefetch(reinterpret_cast<const char*>(b0) + kPrefetchBytes, _MM_HINT_T0);
    const __m512i w0 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2)));
    const __m512i w1 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + 2)));
    const __m512i d0 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), w0, _mm512_loadu_si512(xq + b * 32));
    const __m512i d1 =
        _mm512_dpwssd_epi32(_mm512_setzero_si512(), w1, _mm512_loadu_si512(xq + b * 32 + 32));
    acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_set1_ps(Half512(b0) * xd[b]), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), _mm512_set1_ps(Half512(b1) * xd[b + 1]), acc1);
  }
  float tail = 0;
  if (b < blocks) tail = DotQ8_0Scalar(row + b * kQ8_0Bytes, xq + b * 32, xd + b, xs + b, 1);
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + tail;
}

// The same products for up to kMaxInputs activation vectors at once (a decode batch): each
// weight block is loaded and widened once and multiplied into every input. Per input the
// arithmetic is the single-input kernel's, in its order (two accumulators taking alternate
// blocks, the min term summed in pairs, the same reduction), so each result is bit-identical to
// it: a sequence decodes the same whatever its batch.
constexpr int kMaxInputs = 8;

// The 32 codes of Q8_0 block `blk` widened to int16, in element order.
OSCARKV_AVX512VNNI inline __m512i Q8_0Codes(const uint8_t* blk) {
  return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)));
}

template <int N, bool kQ4_1>
OSCARKV_AVX512VNNI void DotAvx512VnniN(const uint8_t* row, const QuantizedActivations* xs,
                                       int64_t blocks, float* out, int64_t out_stride) {
  constexpr int64_t kBlockBytes = kQ4_1 ? kQ4_1Bytes : kQ8_0Bytes;
  __m512 acc0[N], acc1[N];
  float acc_m[N];  // Q4_1's min term
  for (int t = 0; t < N; ++t) {
    acc0[t] = _mm512_setzero_ps();
    acc1[t] = _mm512_setzero_ps();
    acc_m[t] = 0;
  }
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    const uint8_t* b0 = row + b * kBlockBytes;
    const uint8_t* b1 = b0 + kBlockBytes;
    if (kPrefetchBytes > 0) {
      _mm_prefetch(reinterpret_cast<const char*>(b0) + kPrefetchBytes, _MM_HINT_T0);
    }
    const __m512i c0 = kQ4_1 ? Q4_1Codes(b0) : Q8_0Codes(b0);
    const __m512i c1 = kQ4_1 ? Q4_1Codes(b1) : Q8_0Codes(b1);
    const float h0 = Half512(b0), h1 = Half512(b1);
    const float m0 = kQ4_1 ? Half512(b0 + 2) : 0.0f, m1 = kQ4_1 ? Half512(b1 + 2) : 0.0f;
    for (int t = 0; t < N; ++t) {
      const QuantizedActivations& x = xs[t];
      const __m512i d0 =
          _mm512_dpwssd_epi32(_mm512_setzero_si512(), c0, _mm512_loadu_si512(x.q.data() + b * 32));
      const __m512i d1 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), c1,
                                             _mm512_loadu_si512(x.q.data() + b * 32 + 32));
      acc0[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_set1_ps(h0 * x.d[b]), acc0[t]);
      acc1[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), _mm512_set1_ps(h1 * x.d[b + 1]), acc1[t]);
      if constexpr (kQ4_1) acc_m[t] += m0 * x.sum[b] + m1 * x.sum[b + 1];
    }
  }
  const DotFn tail_dot = kQ4_1 ? DotQ4_1Scalar : DotQ8_0Scalar;
  for (int t = 0; t < N; ++t) {
    const QuantizedActivations& x = xs[t];
    float tail = 0;
    if (b < blocks) {
      tail = tail_dot(row + b * kBlockBytes, x.q.data() + b * 32, x.d.data() + b,
                      x.sum.data() + b, 1);
    }
    // The same sums as the single-input kernels (Q8_0 has no min term).
    const float dots = _mm512_reduce_add_ps(_mm512_add_ps(acc0[t], acc1[t]));
    out[t * out_stride] = kQ4_1 ? dots + acc_m[t] + tail : dots + tail;
  }
}

using DotNFn = void (*)(const uint8_t*, const QuantizedActivations*, int64_t, float*, int64_t);

template <int... N>
constexpr std::array<DotNFn, sizeof...(N)> DotNTable(bool q4_1, std::integer_sequence<int, N...>) {
  return q4_1 ? std::array<DotNFn, sizeof...(N)>{DotAvx512VnniN<N + 1, true>...}
              : std::array<DotNFn, sizeof...(N)>{DotAvx512VnniN<N + 1, false>...};
}

// The kernel for n inputs, 1 <= n <= kMaxInputs.
DotNFn PickDotN(bool q4_1, int n) {
  static constexpr auto kQ4_1 = DotNTable(true, std::make_integer_sequence<int, kMaxInputs>{});
  static constexpr auto kQ8_0 = DotNTable(false, std::make_integer_sequence<int, kMaxInputs>{});
  return (q4_1 ? kQ4_1 : kQ8_0)[n - 1];
}

// QuantizeActivations for AVX-512 CPUs: the same q and d as the scalar loop (round to nearest
// even in both), the block sum in another order.
OSCARKV_AVX512VNNI void QuantizeActivationsAvx512(const float* x, int64_t blocks,
                                                  QuantizedActivations* out) {
  for (int64_t b = 0; b < blocks; ++b) {
    const __m512 x0 = _mm512_loadu_ps(x + b * 32), x1 = _mm512_loadu_ps(x + b * 32 + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    const float d = amax / kActivationMax;
    const __m512 id = _mm512_set1_ps(d > 0 ? 1.0f / d : 0.0f);
    const __m256i q0 = _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(x0, id)));
    const __m256i q1 = _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(x1, id)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out->q.data() + b * 32), q0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out->q.data() + b * 32 + 16), q1);
    out->d[b] = d;
    out->sum[b] = _mm512_reduce_add_ps(_mm512_add_ps(x0, x1));
  }
}

DotFn PickDot(DotKernel k, bool q4_1) {
  switch (k) {
    case DotKernel::kAvx512Vnni:
      return q4_1 ? DotQ4_1Avx512Vnni : DotQ8_0Avx512Vnni;
    case DotKernel::kAvxVnni:
      return q4_1 ? DotQ4_1AvxVnni : DotQ8_0AvxVnni;
    case DotKernel::kScalar:
      break;
  }
  return q4_1 ? DotQ4_1Scalar : DotQ8_0Scalar;
}

// Below this many weights a job stays on the calling thread (handing it over costs ~1 us).
constexpr int64_t kMinParallelWeights = 1 << 15;

struct GemvJob {
  std::span<const QuantMatrix* const> ms;
  std::span<float* const> ys;               // ys[j]: [inputs][ms[j]->rows]
  std::span<const QuantizedActivations> xs;  // the inputs
  DotKernel kernel;
  int64_t total_rows;
};

// Worker `w` of `n` takes a contiguous slice of the concatenated rows of all matrices; slice
// ends are multiples of 16 rows so two workers never write one cache line of y.
void RunGemvSlice(const GemvJob& job, int w, int n) {
  const auto bound = [&](int i) {
    const int64_t r = job.total_rows * i / n;
    return i == n ? job.total_rows : r / 16 * 16;
  };
  int64_t lo = bound(w), hi = bound(w + 1);
  int64_t base = 0;
  for (size_t j = 0; j < job.ms.size() && lo < hi; ++j) {
    const QuantMatrix& m = *job.ms[j];
    const int64_t r0 = std::max<int64_t>(lo - base, 0);
    const int64_t r1 = std::min<int64_t>(hi - base, m.rows);
    if (r0 < r1) QuantDotRowsMulti(job.kernel, m, job.xs, r0, r1, job.ys[j] + r0, m.rows);
    base += m.rows;
  }
}

}  // namespace

void QuantizeActivations(const float* x, int64_t n, QuantizedActivations* out) {
  const int64_t blocks = n / 32;
  out->q.resize(n);
  out->d.resize(blocks);
  out->sum.resize(blocks);
  if (DotKernelAvailable(DotKernel::kAvx512Vnni)) {
    QuantizeActivationsAvx512(x, blocks, out);
    return;
  }
  for (int64_t b = 0; b < blocks; ++b) {
    const float* xb = x + b * 32;
    float amax = 0, sum = 0;
    for (int j = 0; j < 32; ++j) {
      amax = std::max(amax, std::fabs(xb[j]));
      sum += xb[j];
    }
    const float d = amax / kActivationMax;
    const float id = d > 0 ? 1.0f / d : 0.0f;
    int16_t* q = out->q.data() + b * 32;
    for (int j = 0; j < 32; ++j) q[j] = static_cast<int16_t>(std::nearbyint(xb[j] * id));
    out->d[b] = d;
    out->sum[b] = sum;
  }
}

bool DotKernelAvailable(DotKernel k) {
  switch (k) {
    case DotKernel::kAvx512Vnni: {
      static const bool ok = __builtin_cpu_supports("avx512f") &&
                             __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512vl") &&
                             __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("f16c");
      return ok;
    }
    case DotKernel::kAvxVnni: {
      static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                             __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avxvnni");
      return ok;
    }
    case DotKernel::kScalar:
      return true;
  }
  return false;
}

DotKernel BestDotKernel() {
  static const DotKernel best = DotKernelAvailable(DotKernel::kAvx512Vnni) ? DotKernel::kAvx512Vnni
                                : DotKernelAvailable(DotKernel::kAvxVnni) ? DotKernel::kAvxVnni
                                                                           : DotKernel::kScalar;
  return best;
}

void QuantDotRows(DotKernel k, const QuantMatrix& m, const QuantizedActivations& x, int64_t r0,
                  int64_t r1, float* y) {
  const bool q4_1 = IsQ4_1(m);
  const DotFn dot = PickDot(k, q4_1);
  const int64_t blocks = m.cols / 32;
  const int64_t row_bytes = blocks * (q4_1 ? kQ4_1Bytes : kQ8_0Bytes);
  for (int64_t r = r0; r < r1; ++r) {
    y[r - r0] = dot(m.data + r * row_bytes, x.q.data(), x.d.data(), x.sum.data(), blocks);
  }
}

void QuantDotRowsMulti(DotKernel k, const QuantMatrix& m, std::span<const QuantizedActivations> xs,
                       int64_t r0, int64_t r1, float* y, int64_t y_stride) {
  if (k != DotKernel::kAvx512Vnni || xs.size() == 1) {
    for (size_t t = 0; t < xs.size(); ++t) QuantDotRows(k, m, xs[t], r0, r1, y + t * y_stride);
    return;
  }
  const bool q4_1 = IsQ4_1(m);
  const int64_t blocks = m.cols / 32;
  const int64_t row_bytes = blocks * (q4_1 ? kQ4_1Bytes : kQ8_0Bytes);
  for (size_t t0 = 0; t0 < xs.size(); t0 += kMaxInputs) {
    const int n = static_cast<int>(std::min<size_t>(kMaxInputs, xs.size() - t0));
    const DotNFn dot = PickDotN(q4_1, n);
    float* yt = y + t0 * y_stride;
    for (int64_t r = r0; r < r1; ++r) {
      dot(m.data + r * row_bytes, xs.data() + t0, blocks, yt + (r - r0), y_stride);
    }
  }
}

bool QuantGemvSupported(const QuantMatrix& m) {
  if (m.data == nullptr || m.cols % 32 != 0) return false;
  return m.type == static_cast<uint32_t>(GgmlType::kQ4_1) ||
         m.type == static_cast<uint32_t>(GgmlType::kQ8_0);
}

void QuantGemv(const QuantMatrix& m, const float* x, float* y) {
  const QuantMatrix* ms[1] = {&m};
  float* ys[1] = {y};
  QuantGemvMulti(ms, x, ys);
}

void QuantGemvMulti(std::span<const QuantMatrix* const> ms, const float* x,
                    std::span<float* const> ys) {
  QuantGemmMulti(ms, x, 1, ys);
}

void QuantGemmMulti(std::span<const QuantMatrix* const> ms, const float* x, int64_t inputs,
                    std::span<float* const> ys) {
  CHECK(!ms.empty() && ms.size() == ys.size() && inputs >= 1);
  const int64_t cols = ms[0]->cols;
  int64_t total_rows = 0;
  for (const QuantMatrix* m : ms) {
    DCHECK(m->cols == cols);
    total_rows += m->rows;
  }
  thread_local std::vector<QuantizedActivations> xq;
  if (static_cast<int64_t>(xq.size()) < inputs) xq.resize(inputs);
  for (int64_t t = 0; t < inputs; ++t) QuantizeActivations(x + t * cols, cols, &xq[t]);
  const GemvJob job{ms, ys, std::span<const QuantizedActivations>(xq.data(), inputs),
                    BestDotKernel(), total_rows};
  const auto run = [&job](int w, int n) { RunGemvSlice(job, w, n); };
  if (total_rows * cols < kMinParallelWeights) {
    run(0, 1);
    return;
  }
  RunOnCpuPool(run);
}

}  // namespace oscarkv::model

#include "lib/model/quant_gemv.h"

#include <vector>

#include <immintrin.h>

#include <cstring>

#include "lib/kvformat/float16.h"
#include "lib/model/gguf_file.h"

namespace oscarkv::model {
namespace {

// One hardware conversion (F16C), not the portable bit-twiddling of float16.h: it runs twice
// per 32 weights on the decode hot path.
__attribute__((target("f16c"))) inline float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Q4_1 block {fp16 d, fp16 m, u8 qs[16]}: x[j] = d * q[j] + m, so
// dot = d * sum_j q[j] x[j] + m * sum_j x[j].
// `xsum[b]` = sum of x over block b (the min term m * sum(x) needs it once per call, not per row).
__attribute__((target("avx512f,f16c"))) float DotQ4_1(const uint8_t* row, const float* x,
                                                 const float* xsum, int64_t blocks) {
  __m512 acc_q = _mm512_setzero_ps();
  float acc_m = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = row + b * 20;
    const float d = Half(blk), m = Half(blk + 2);
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4));
    const __m512i w = _mm512_cvtepu8_epi32(bytes);
    const __m512i lo = _mm512_and_si512(w, _mm512_set1_epi32(0xF));
    const __m512i hi = _mm512_srli_epi32(w, 4);
    const __m512 x0 = _mm512_loadu_ps(x + b * 32);
    const __m512 x1 = _mm512_loadu_ps(x + b * 32 + 16);
    __m512 s = _mm512_mul_ps(_mm512_cvtepi32_ps(lo), x0);
    s = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), x1, s);
    acc_q = _mm512_fmadd_ps(_mm512_set1_ps(d), s, acc_q);
    acc_m += m * xsum[b];
  }
  return _mm512_reduce_add_ps(acc_q) + acc_m;
}

// Q8_0 block {fp16 d, i8 qs[32]}: x[j] = d * q[j].
__attribute__((target("avx512f,f16c"))) float DotQ8_0(const uint8_t* row, const float* x,
                                                 int64_t blocks) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = row + b * 34;
    const float d = Half(blk);
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 18));
    __m512 s = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)),
                             _mm512_loadu_ps(x + b * 32));
    s = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)),
                        _mm512_loadu_ps(x + b * 32 + 16), s);
    acc = _mm512_fmadd_ps(_mm512_set1_ps(d), s, acc);
  }
  return _mm512_reduce_add_ps(acc);
}

}  // namespace

bool QuantGemvSupported(const QuantMatrix& m) {
  static const bool avx512 =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("f16c");
  if (!avx512 || m.data == nullptr || m.cols % 32 != 0) return false;
  return m.type == static_cast<uint32_t>(GgmlType::kQ4_1) ||
         m.type == static_cast<uint32_t>(GgmlType::kQ8_0);
}

void QuantGemv(const QuantMatrix& m, const float* x, float* y) {
  const int64_t blocks = m.cols / 32;
  // Rows are independent: split them over the cores (decode is memory-bound, one core does not
  // saturate the memory bus). Small matrices stay on one thread (fork/join costs ~µs).
  const bool parallel = m.rows * m.cols >= (1 << 16);
  if (m.type == static_cast<uint32_t>(GgmlType::kQ4_1)) {
    std::vector<float> xsum(blocks);
    for (int64_t b = 0; b < blocks; ++b) {
      float sum = 0;
      for (int j = 0; j < 32; ++j) sum += x[b * 32 + j];
      xsum[b] = sum;
    }
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t r = 0; r < m.rows; ++r) {
      y[r] = DotQ4_1(m.data + r * blocks * 20, x, xsum.data(), blocks);
    }
  } else {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t r = 0; r < m.rows; ++r) y[r] = DotQ8_0(m.data + r * blocks * 34, x, blocks);
  }
}

}  // namespace oscarkv::model

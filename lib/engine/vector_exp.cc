#include "lib/engine/vector_exp.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#if defined(__x86_64__)
#include <immintrin.h>

// libmvec's entry points (the x86-64 vector function ABI: b = SSE, d = AVX2, e = AVX-512).
extern "C" {
__m128 _ZGVbN4v_expf(__m128);
__m256 _ZGVdN8v_expf(__m256);
__m512 _ZGVeN16v_expf(__m512);
}

namespace oscarkv::engine {
namespace {

using Kernel = void (*)(const float*, float, float, float*, size_t);

// One vector of each instruction set: to[0, kLanes) = exp((in − shift) × scale).
struct Sse {
  static constexpr size_t kLanes = 4;
  static void Exp(const float* in, float shift, float scale, float* to) {
    const __m128 x =
        _mm_mul_ps(_mm_sub_ps(_mm_loadu_ps(in), _mm_set1_ps(shift)), _mm_set1_ps(scale));
    _mm_storeu_ps(to, _ZGVbN4v_expf(x));
  }
};
struct Avx2 {
  static constexpr size_t kLanes = 8;
  __attribute__((target("avx2"))) static void Exp(const float* in, float shift, float scale,
                                                  float* to) {
    const __m256 x = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(in), _mm256_set1_ps(shift)),
                                   _mm256_set1_ps(scale));
    _mm256_storeu_ps(to, _ZGVdN8v_expf(x));
  }
};
struct Avx512 {
  static constexpr size_t kLanes = 16;
  __attribute__((target("avx512f"))) static void Exp(const float* in, float shift, float scale,
                                                     float* to) {
    const __m512 x = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(in), _mm512_set1_ps(shift)),
                                   _mm512_set1_ps(scale));
    _mm512_storeu_ps(to, _ZGVeN16v_expf(x));
  }
};

// Whole vectors, then the tail through a padded one, so every element sees the same function.
template <typename Isa>
void ExpAll(const float* x, float shift, float scale, float* out, size_t n) {
  size_t i = 0;
  for (; i + Isa::kLanes <= n; i += Isa::kLanes) Isa::Exp(x + i, shift, scale, out + i);
  if (i == n) return;
  float in[Isa::kLanes] = {}, to[Isa::kLanes];
  std::copy(x + i, x + n, in);
  Isa::Exp(in, shift, scale, to);
  std::copy(to, to + (n - i), out + i);
}

Kernel Pick() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return ExpAll<Avx512>;
  if (__builtin_cpu_supports("avx2")) return ExpAll<Avx2>;
  return ExpAll<Sse>;
}

}  // namespace

void ExpShifted(std::span<const float> x, float shift, float scale, std::span<float> out) {
  static const Kernel kernel = Pick();
  kernel(x.data(), shift, scale, out.data(), x.size());
}

}  // namespace oscarkv::engine

#else  // not x86-64: the scalar expf

namespace oscarkv::engine {

void ExpShifted(std::span<const float> x, float shift, float scale, std::span<float> out) {
  for (size_t i = 0; i < x.size(); ++i) out[i] = std::exp((x[i] - shift) * scale);
}

}  // namespace oscarkv::engine

#endif

#include "lib/quant/hadamard.h"

#include <bit>
#include <cmath>

#include "lib/base/log.h"

namespace oscarkv::quant {

std::vector<double> HadamardMatrix(int d) {
  CHECK(IsPowerOfTwo(d)) << "Hadamard size must be a power of two, got " << d;
  const double inv = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> h(static_cast<size_t>(d) * d);
  for (int i = 0; i < d; ++i) {
    for (int j = 0; j < d; ++j) {
      h[static_cast<size_t>(i) * d + j] =
          (std::popcount(static_cast<unsigned>(i & j)) & 1) ? -inv : inv;
    }
  }
  return h;
}

void FastHadamardTransform(float* x, int d) {
  CHECK(IsPowerOfTwo(d)) << "Hadamard size must be a power of two, got " << d;
  for (int len = 1; len < d; len <<= 1) {
    for (int i = 0; i < d; i += 2 * len) {
      for (int j = i; j < i + len; ++j) {
        const float a = x[j];
        const float b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
    }
  }
  const float inv = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  for (int i = 0; i < d; ++i) x[i] *= inv;
}

std::vector<int> BitReversalPermutation(int d) {
  CHECK(IsPowerOfTwo(d)) << "bit reversal size must be a power of two, got " << d;
  const int bits = std::countr_zero(static_cast<unsigned>(d));
  std::vector<int> br(d);
  for (int i = 0; i < d; ++i) {
    int r = 0;
    for (int b = 0; b < bits; ++b) r |= ((i >> b) & 1) << (bits - 1 - b);
    br[i] = r;
  }
  return br;
}

}  // namespace oscarkv::quant

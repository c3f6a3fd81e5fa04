// Rows that exercise per-token INT2 quantisation and dequantisation: shared by the CPU reference
// test and the GPU test of DequantInt2PerToken, so both run the same inputs.
#ifndef OSCARKV_TESTS_KERNELS_INT2_TEST_ROWS_H_
#define OSCARKV_TESTS_KERNELS_INT2_TEST_ROWS_H_

#include <cstdint>
#include <random>
#include <vector>

namespace oscarkv::kernels::testing {

// [tokens][heads][D] f32 rows: Gaussian with a per-row offset and a few heavy channels, one
// constant row (its fp16 scale rounds to 0) and one tiny row (subnormal fp16 scale), when the
// token count allows.
inline std::vector<float> Int2TestRows(int tokens, int heads, int d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(tokens) * heads * d);
  for (int r = 0; r < tokens * heads; ++r) {
    const float offset = 0.5f * n(rng);
    for (int i = 0; i < d; ++i) {
      float v = n(rng) + offset;
      if (i % 19 == 5) v *= 8.0f;
      x[static_cast<size_t>(r) * d + i] = v;
    }
  }
  if (tokens * heads > 2) {
    for (int i = 0; i < d; ++i) x[static_cast<size_t>(1) * d + i] = 0.75f;   // constant row
    for (int i = 0; i < d; ++i) x[static_cast<size_t>(2) * d + i] *= 1e-6f;  // tiny row
  }
  return x;
}

}  // namespace oscarkv::kernels::testing

#endif  // OSCARKV_TESTS_KERNELS_INT2_TEST_ROWS_H_

// The integer dot products of quant_gemv (Q4_1 and Q8_0 weights x int16-quantized activations): every kernel this CPU
// runs against a float64 reference on random blocks, the SIMD kernels against the scalar
// fallback, the pooled multi-matrix GEMV against single-threaded rows, and several inputs at
// once (a decode batch) against one at a time, bit for bit.
#include "lib/model/quant_gemv.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "lib/kvformat/float16.h"
#include "lib/model/gguf_file.h"

namespace oscarkv::model {
namespace {

constexpr DotKernel kAllKernels[] = {DotKernel::kScalar, DotKernel::kAvxVnni,
                                     DotKernel::kAvx512Vnni};

// A random matrix in ggml layout plus its dequantized float64 copy.
struct TestMatrix {
  std::vector<uint8_t> bytes;
  std::vector<double> w;  // [rows * cols], dequantized
  QuantMatrix m;
};

void PutHalf(uint8_t* p, float f) {
  const uint16_t h = kvformat::FloatToHalfBits(f);
  std::memcpy(p, &h, 2);
}
double GetHalf(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return kvformat::HalfBitsToFloat(h);
}

TestMatrix MakeMatrix(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  TestMatrix t;
  const bool q4_1 = type == GgmlType::kQ4_1;
  const int64_t block_bytes = q4_1 ? 20 : 34, blocks = cols / 32;
  t.bytes.resize(rows * blocks * block_bytes);
  t.w.resize(rows * cols);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f), minv(-0.4f, 0.0f);
  std::uniform_int_distribution<int> code(0, 255);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* blk = t.bytes.data() + (r * blocks + b) * block_bytes;
      double* w = t.w.data() + r * cols + b * 32;
      PutHalf(blk, scale(rng));
      const double d = GetHalf(blk);
      if (q4_1) {
        PutHalf(blk + 2, minv(rng));
        const double m = GetHalf(blk + 2);
        for (int j = 0; j < 16; ++j) {
          blk[4 + j] = static_cast<uint8_t>(code(rng));
          w[j] = d * (blk[4 + j] & 0xF) + m;
          w[j + 16] = d * (blk[4 + j] >> 4) + m;
        }
      } else {
        for (int j = 0; j < 32; ++j) {
          blk[2 + j] = static_cast<uint8_t>(code(rng));  // includes -128
          w[j] = d * static_cast<int8_t>(blk[2 + j]);
        }
      }
    }
  }
  t.m = {static_cast<uint32_t>(type), t.bytes.data(), rows, cols};
  return t;
}

// Activations with the spread of a real hidden state: mostly small, a few outliers, some
// all-zero blocks.
std::vector<float> MakeX(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = g(rng) * (i % 37 == 0 ? 20.0f : 1.0f);
  for (int i = 0; i < 32 && n >= 96; ++i) x[64 + i] = 0.0f;
  return x;
}

// The error budget of one row: x's int16 rounding moves each element by at most d_x[b] / 2, so
// |got - exact| <= sum_b d_x[b] / 2 * sum_{i in b} |w_i|, plus float32 rounding of the block
// terms (relative 1e-5 of sum |w_i x_i| covers the ~cols/32 float additions).
double Budget(const double* w, const float* x, const QuantizedActivations& xq, int64_t cols) {
  double bound = 0, mag = 0;
  for (int64_t b = 0; b < cols / 32; ++b) {
    double wabs = 0;
    for (int j = 0; j < 32; ++j) {
      wabs += std::fabs(w[b * 32 + j]);
      mag += std::fabs(w[b * 32 + j] * x[b * 32 + j]);
    }
    bound += xq.d[b] / 2 * wabs;
  }
  return bound + 1e-5 * mag;
}

TEST(QuantizeActivations, RoundsEachBlockWithinHalfAStep) {
  std::mt19937 rng(7);
  const std::vector<float> x = MakeX(256, rng);
  QuantizedActivations q;
  QuantizeActivations(x.data(), 256, &q);
  for (int64_t i = 0; i < 256; ++i) {
    const int64_t b = i / 32;
    EXPECT_LE(std::abs(q.q[i]), 32767);
    EXPECT_LE(std::fabs(x[i] - q.d[b] * q.q[i]), q.d[b] * 0.51f + 1e-30f) << i;  // 0.01: x * (1/d) in float
  }
  EXPECT_EQ(q.d[2], 0.0f);  // the all-zero block
  double s = 0;
  for (int j = 0; j < 32; ++j) s += x[j];
  EXPECT_NEAR(q.sum[0], s, 1e-4);
}

class QuantDot : public ::testing::TestWithParam<GgmlType> {};

// Every available kernel is within the rounding budget of the float64 product of the dequantized
// weights, on 64 rows of 1536 columns (48 blocks) and an odd block count (the tail path).
TEST_P(QuantDot, MatchesFloat64ReferenceWithinRoundingBudget) {
  std::mt19937 rng(1234);
  for (int64_t cols : {1536, 96, 224}) {
    const int64_t rows = 64;
    TestMatrix t = MakeMatrix(GetParam(), rows, cols, rng);
    const std::vector<float> x = MakeX(cols, rng);
    QuantizedActivations xq;
    QuantizeActivations(x.data(), cols, &xq);
    for (DotKernel k : kAllKernels) {
      if (!DotKernelAvailable(k)) continue;
      std::vector<float> y(rows);
      QuantDotRows(k, t.m, xq, 0, rows, y.data());
      double worst_ratio = 0;
      for (int64_t r = 0; r < rows; ++r) {
        double exact = 0;
        for (int64_t i = 0; i < cols; ++i) exact += t.w[r * cols + i] * x[i];
        const double budget = Budget(&t.w[r * cols], x.data(), xq, cols);
        EXPECT_LE(std::fabs(y[r] - exact), budget)
            << "kernel " << static_cast<int>(k) << " row " << r << " cols " << cols;
        worst_ratio = std::max(worst_ratio, std::fabs(y[r] - exact) / budget);
      }
      // The bound is a worst case; rounding errors mostly cancel.
      EXPECT_LT(worst_ratio, 0.5) << "kernel " << static_cast<int>(k);
    }
  }
}

// The SIMD kernels equal the scalar fallback: the integer block sums are exact, so only the
// float accumulation order differs (relative 1e-6 of sum |block term|, checked as 2e-6 of
// sum |w_i x_i| of the dequantized product).
TEST_P(QuantDot, SimdKernelsEqualScalarFallback) {
  std::mt19937 rng(99);
  for (int64_t cols : {576, 1536, 32 * 9}) {
    const int64_t rows = 48;
    TestMatrix t = MakeMatrix(GetParam(), rows, cols, rng);
    const std::vector<float> x = MakeX(cols, rng);
    QuantizedActivations xq;
    QuantizeActivations(x.data(), cols, &xq);
    std::vector<float> ref(rows);
    QuantDotRows(DotKernel::kScalar, t.m, xq, 0, rows, ref.data());
    int checked = 0;
    for (DotKernel k : {DotKernel::kAvxVnni, DotKernel::kAvx512Vnni}) {
      if (!DotKernelAvailable(k)) continue;
      ++checked;
      std::vector<float> y(rows);
      QuantDotRows(k, t.m, xq, 0, rows, y.data());
      for (int64_t r = 0; r < rows; ++r) {
        double mag = 0;
        for (int64_t i = 0; i < cols; ++i) mag += std::fabs(t.w[r * cols + i] * x[i]);
        EXPECT_NEAR(y[r], ref[r], 2e-6 * mag) << "kernel " << static_cast<int>(k) << " row " << r;
      }
    }
    if (checked == 0) GTEST_SKIP() << "no VNNI on this CPU: only the scalar kernel runs";
  }
}

INSTANTIATE_TEST_SUITE_P(Types, QuantDot, ::testing::Values(GgmlType::kQ4_1, GgmlType::kQ8_0),
                         [](const auto& info) {
                           return info.param == GgmlType::kQ4_1 ? std::string("Q4_1")
                                                                : std::string("Q8_0");
                         });

// The pooled multi-matrix GEMV (rows split over threads) gives exactly the single-threaded rows.
TEST(QuantGemvMulti, EqualsSingleThreadedRows) {
  std::mt19937 rng(5);
  const int64_t cols = 576;
  TestMatrix a = MakeMatrix(GgmlType::kQ4_1, 576, cols, rng);
  TestMatrix b = MakeMatrix(GgmlType::kQ4_1, 192, cols, rng);
  TestMatrix c = MakeMatrix(GgmlType::kQ8_0, 200, cols, rng);
  const std::vector<float> x = MakeX(cols, rng);
  std::vector<float> ya(576), yb(192), yc(200);
  const QuantMatrix* ms[] = {&a.m, &b.m, &c.m};
  float* ys[] = {ya.data(), yb.data(), yc.data()};
  for (int rep = 0; rep < 3; ++rep) {
    QuantGemvMulti(ms, x.data(), ys);
    QuantizedActivations xq;
    QuantizeActivations(x.data(), cols, &xq);
    for (int j = 0; j < 3; ++j) {
      std::vector<float> want(ms[j]->rows);
      QuantDotRows(BestDotKernel(), *ms[j], xq, 0, ms[j]->rows, want.data());
      for (int64_t r = 0; r < ms[j]->rows; ++r) ASSERT_EQ(ys[j][r], want[r]) << j << " " << r;
    }
    std::vector<float> single(200);
    QuantGemv(c.m, x.data(), single.data());
    EXPECT_EQ(single, yc);
  }
}

// Several inputs at once (a decode batch): each weight block is read once for up to 8 inputs,
// and every output is the single-input kernel's bit for bit, on tiles of 8 and a partial one,
// with an odd block count (the scalar tail).
TEST_P(QuantDot, SeveralInputsEqualOneAtATimeBitForBit) {
  std::mt19937 rng(11);
  const int64_t rows = 37, cols = 19 * 32;
  TestMatrix t = MakeMatrix(GetParam(), rows, cols, rng);
  int checked = 0;
  for (DotKernel k : kAllKernels) {
    if (!DotKernelAvailable(k)) continue;
    for (int inputs : {1, 3, 8, 9, 19}) {
      std::vector<QuantizedActivations> xs(inputs);
      for (int i = 0; i < inputs; ++i) {
        const std::vector<float> x = MakeX(cols, rng);
        QuantizeActivations(x.data(), cols, &xs[i]);
      }
      const int64_t r0 = 3, r1 = rows, stride = 40;
      std::vector<float> got(inputs * stride, -1.0f);
      QuantDotRowsMulti(k, t.m, xs, r0, r1, got.data(), stride);
      for (int i = 0; i < inputs; ++i) {
        std::vector<float> want(r1 - r0);
        QuantDotRows(k, t.m, xs[i], r0, r1, want.data());
        for (int64_t r = 0; r < r1 - r0; ++r) {
          ASSERT_EQ(got[i * stride + r], want[r]) << "kernel " << static_cast<int>(k) << " inputs "
                                                  << inputs << " input " << i << " row " << r;
        }
        for (int64_t r = r1 - r0; r < stride; ++r) ASSERT_EQ(got[i * stride + r], -1.0f);
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

// The pooled GEMM over a batch gives each input exactly its own QuantGemvMulti.
TEST(QuantGemmMulti, EachInputEqualsItsOwnGemv) {
  std::mt19937 rng(6);
  const int64_t cols = 576, inputs = 11;
  TestMatrix a = MakeMatrix(GgmlType::kQ4_1, 576, cols, rng);
  TestMatrix c = MakeMatrix(GgmlType::kQ8_0, 208, cols, rng);
  std::vector<float> x;
  for (int i = 0; i < inputs; ++i) {
    const std::vector<float> xi = MakeX(cols, rng);
    x.insert(x.end(), xi.begin(), xi.end());
  }
  std::vector<float> ya(inputs * 576), yc(inputs * 208);
  const QuantMatrix* ms[] = {&a.m, &c.m};
  float* ys[] = {ya.data(), yc.data()};
  QuantGemmMulti(ms, x.data(), inputs, ys);
  for (int i = 0; i < inputs; ++i) {
    std::vector<float> wa(576), wc(208);
    float* ws[] = {wa.data(), wc.data()};
    QuantGemvMulti(ms, x.data() + i * cols, ws);
    for (int64_t r = 0; r < 576; ++r) ASSERT_EQ(ya[i * 576 + r], wa[r]) << i << " " << r;
    for (int64_t r = 0; r < 208; ++r) ASSERT_EQ(yc[i * 208 + r], wc[r]) << i << " " << r;
  }
}

}  // namespace
}  // namespace oscarkv::model

// Dequantization per ggml type on hand-built blocks: the test packs chosen quants, scales and
// mins into the ggml block layout and checks Dequantize returns scale * q (+/- min) per element.
#include "lib/model/dequantize.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "lib/kvformat/float16.h"
#include "lib/model/gguf_file.h"

namespace oscarkv::model {
namespace {

using kvformat::FloatToHalfBits;
using kvformat::HalfBitsToFloat;

void PutHalf(uint8_t* p, float f) {
  uint16_t h = FloatToHalfBits(f);
  std::memcpy(p, &h, 2);
}
float H(float f) { return HalfBitsToFloat(FloatToHalfBits(f)); }

std::vector<float> DequantOrFail(GgmlType t, const std::vector<uint8_t>& data, int64_t n) {
  std::vector<float> out(n);
  absl::Status s = Dequantize(static_cast<uint32_t>(t), data.data(), data.size(), n, out.data());
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

TEST(Dequantize, FloatTypes) {
  std::vector<float> vals = {1.0f, -2.5f, 0.0f, 65504.0f, 1e-3f, -7.25f};
  std::vector<uint8_t> f32(vals.size() * 4), f16(vals.size() * 2), bf16(vals.size() * 2);
  std::memcpy(f32.data(), vals.data(), f32.size());
  for (size_t i = 0; i < vals.size(); ++i) {
    PutHalf(&f16[2 * i], vals[i]);
    uint16_t b = kvformat::FloatToBf16Bits(vals[i]);
    std::memcpy(&bf16[2 * i], &b, 2);
  }
  auto a = DequantOrFail(GgmlType::kF32, f32, vals.size());
  auto b = DequantOrFail(GgmlType::kF16, f16, vals.size());
  auto c = DequantOrFail(GgmlType::kBF16, bf16, vals.size());
  for (size_t i = 0; i < vals.size(); ++i) {
    EXPECT_EQ(a[i], vals[i]);
    EXPECT_EQ(b[i], H(vals[i]));
    EXPECT_EQ(c[i], kvformat::RoundToBf16(vals[i]));
  }
}

TEST(Dequantize, Q8_0) {
  std::mt19937 rng(1);
  std::vector<uint8_t> blk(2 * 34);
  std::vector<float> want(64);
  for (int b = 0; b < 2; ++b) {
    const float d = 0.0123f * (b + 1);
    PutHalf(&blk[b * 34], d);
    for (int j = 0; j < 32; ++j) {
      int8_t q = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
      blk[b * 34 + 2 + j] = static_cast<uint8_t>(q);
      want[b * 32 + j] = H(d) * q;
    }
  }
  auto got = DequantOrFail(GgmlType::kQ8_0, blk, 64);
  for (int i = 0; i < 64; ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << i;
}

// Q4_0 and Q4_1: element j < 16 in the low nibble of byte j, element j + 16 in its high nibble.
TEST(Dequantize, Q4_0AndQ4_1) {
  std::mt19937 rng(2);
  int q[32];
  for (int& v : q) v = rng() % 16;
  std::vector<uint8_t> b0(18), b1(20);
  PutHalf(&b0[0], 0.37f);
  PutHalf(&b1[0], 0.37f);
  PutHalf(&b1[2], -1.25f);
  for (int j = 0; j < 16; ++j) {
    b0[2 + j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
    b1[4 + j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
  }
  auto g0 = DequantOrFail(GgmlType::kQ4_0, b0, 32);
  auto g1 = DequantOrFail(GgmlType::kQ4_1, b1, 32);
  for (int i = 0; i < 32; ++i) {
    EXPECT_FLOAT_EQ(g0[i], H(0.37f) * (q[i] - 8)) << i;
    EXPECT_FLOAT_EQ(g1[i], H(0.37f) * q[i] + H(-1.25f)) << i;
  }
}

// Packs eight 6-bit scales and mins into the 12-byte K-quant scale field: bytes 0-3 hold
// scales 0-3 (low 6 bits) and the top 2 bits of scales 4-7; bytes 4-7 hold mins 0-3 and the top
// 2 bits of mins 4-7; bytes 8-11 hold the low nibbles of scales 4-7 (low) and mins 4-7 (high).
void PackScales(const int sc[8], const int mn[8], uint8_t* out) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = static_cast<uint8_t>((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
  }
}

TEST(Dequantize, Q4_KAndQ5_K) {
  std::mt19937 rng(3);
  int sc[8], mn[8], q[256];
  for (int i = 0; i < 8; ++i) {
    sc[i] = rng() % 64;
    mn[i] = rng() % 64;
  }
  sc[5] = 63;  // exercise the high bits
  mn[7] = 48;
  for (int& v : q) v = rng() % 32;
  const float d = 0.021f, dmin = 0.013f;
  std::vector<uint8_t> b4(144, 0), b5(176, 0);
  PutHalf(&b4[0], d);
  PutHalf(&b4[2], dmin);
  PackScales(sc, mn, &b4[4]);
  std::memcpy(&b5[0], &b4[0], 16);
  // Element e: chunk c = e / 64, half h = (e % 64) / 32, l = e % 32; sub-block 2c + h.
  for (int e = 0; e < 256; ++e) {
    const int c = e / 64, h = (e % 64) / 32, l = e % 32;
    const int q4 = q[e] & 15;
    b4[16 + 32 * c + l] |= static_cast<uint8_t>(q4 << (4 * h));
    b5[48 + 32 * c + l] |= static_cast<uint8_t>((q[e] & 15) << (4 * h));
    if (q[e] & 16) b5[16 + l] |= static_cast<uint8_t>(1 << (2 * c + h));
  }
  auto g4 = DequantOrFail(GgmlType::kQ4_K, b4, 256);
  auto g5 = DequantOrFail(GgmlType::kQ5_K, b5, 256);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32;
    const double w4 = double(H(d)) * sc[s] * (q[e] & 15) - double(H(dmin)) * mn[s];
    const double w5 = double(H(d)) * sc[s] * q[e] - double(H(dmin)) * mn[s];
    EXPECT_NEAR(g4[e], w4, 1e-5) << e;
    EXPECT_NEAR(g5[e], w5, 1e-5) << e;
  }
}

TEST(Dequantize, Q6_K) {
  std::mt19937 rng(4);
  int q[256], sc[16];
  for (int& v : q) v = rng() % 64;
  for (int& v : sc) v = static_cast<int>(rng() % 255) - 127;
  const float d = 0.0071f;
  std::vector<uint8_t> b(210, 0);
  // Element e: half n = e / 128, r = e % 128, k = r / 32, l = r % 32. Low nibble in
  // ql[64n + l + 32(k & 1)] (high nibble when k >= 2); top 2 bits in qh[32n + l] at bit 2k.
  for (int e = 0; e < 256; ++e) {
    const int n = e / 128, r = e % 128, k = r / 32, l = r % 32;
    b[64 * n + l + 32 * (k & 1)] |= static_cast<uint8_t>((q[e] & 15) << (k >= 2 ? 4 : 0));
    b[128 + 32 * n + l] |= static_cast<uint8_t>((q[e] >> 4) << (2 * k));
  }
  for (int i = 0; i < 16; ++i) b[192 + i] = static_cast<uint8_t>(static_cast<int8_t>(sc[i]));
  PutHalf(&b[208], d);
  auto g = DequantOrFail(GgmlType::kQ6_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    const double w = double(H(d)) * sc[e / 16] * (q[e] - 32);
    EXPECT_NEAR(g[e], w, 1e-5) << e;
  }
}

TEST(Dequantize, RejectsShortDataPartialBlocksAndUnknownTypes) {
  std::vector<uint8_t> b(20);
  std::vector<float> out(64);
  EXPECT_EQ(Dequantize(static_cast<uint32_t>(GgmlType::kQ4_1), b.data(), b.size(), 64, out.data())
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Dequantize(static_cast<uint32_t>(GgmlType::kQ4_1), b.data(), b.size(), 31, out.data())
                .code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status s = Dequantize(static_cast<uint32_t>(GgmlType::kQ2_K), b.data(), b.size(), 256,
                              out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(std::string(s.message()).find("Q2_K"), std::string::npos);
}

}  // namespace
}  // namespace oscarkv::model

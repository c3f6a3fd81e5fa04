// ByteChecksumRef (kernels/checksum/byte_checksum.h): known answers computed by an independent
// Python implementation of the documented formula, and the corruptions it exists to catch.
#include "kernels/checksum/byte_checksum.h"

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace oscarkv::kernels {
namespace {

uint64_t Of(const std::string& s) { return ByteChecksumRef(s.data(), s.size()); }

TEST(ByteChecksumRefTest, MatchesTheDocumentedFormula) {
  // Values from the formula in byte_checksum.h evaluated in Python (arbitrary-precision ints).
  EXPECT_EQ(ByteChecksumRef(nullptr, 0), 0x0ull);
  EXPECT_EQ(Of("oscarkv"), 0xb73d296241bad256ull);
  EXPECT_EQ(Of("oscarkv packed KV checksum"), 0x9265f99f51633bccull);
  std::string ramp;
  for (int r = 0; r < 3; ++r) {
    for (int i = 0; i < 256; ++i) ramp.push_back(static_cast<char>(i));
  }
  EXPECT_EQ(Of(ramp), 0xdeeb7be8bdc46380ull);
}

TEST(ByteChecksumRefTest, EverySingleBitFlipChangesIt) {
  std::mt19937_64 rng(7);
  std::vector<unsigned char> buf(203);  // not a multiple of 8: the padded tail word counts too
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  const uint64_t base = ByteChecksumRef(buf.data(), buf.size());
  for (size_t i = 0; i < buf.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      buf[i] ^= static_cast<unsigned char>(1u << bit);
      EXPECT_NE(ByteChecksumRef(buf.data(), buf.size()), base) << "byte " << i << " bit " << bit;
      buf[i] ^= static_cast<unsigned char>(1u << bit);
    }
  }
}

TEST(ByteChecksumRefTest, SwappedWordsAndTruncationChangeIt) {
  std::vector<unsigned char> buf(64);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<unsigned char>(i * 37 + 1);
  const uint64_t base = ByteChecksumRef(buf.data(), buf.size());
  std::vector<unsigned char> swapped = buf;
  for (int b = 0; b < 8; ++b) std::swap(swapped[b], swapped[40 + b]);
  EXPECT_NE(ByteChecksumRef(swapped.data(), swapped.size()), base);
  // Trailing zero bytes are not padding: the length is part of the value.
  std::vector<unsigned char> zeros(16, 0);
  std::set<uint64_t> seen;
  for (size_t n = 0; n <= zeros.size(); ++n) seen.insert(ByteChecksumRef(zeros.data(), n));
  EXPECT_EQ(seen.size(), zeros.size() + 1);
  EXPECT_NE(ByteChecksumRef(buf.data(), buf.size() - 8), base);
}

}  // namespace
}  // namespace oscarkv::kernels

// GGUF parsing: a hand-written tiny GGUF round-trips, and every truncation or targeted corruption
// of it gives a clear error instead of a crash or an out-of-bounds read.
#include "lib/model/gguf_file.h"

#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace oscarkv::model {
namespace {

using ::testing::HasSubstr;

// Builds GGUF images byte by byte, independent of the parser.
class GgufWriter {
 public:
  template <typename T>
  void Put(T v) {
    const char* p = reinterpret_cast<const char*>(&v);
    buf_.append(p, sizeof(T));
  }
  void Str(const std::string& s) {
    Put<uint64_t>(s.size());
    buf_ += s;
  }
  void Pad(size_t align) {
    while (buf_.size() % align != 0) buf_.push_back('\0');
  }
  std::string& buf() { return buf_; }

 private:
  std::string buf_;
};

struct TinyGguf {
  std::string bytes;
  size_t tensor_count_offset;
  size_t kv_count_offset;
  size_t first_string_len_offset;
  size_t array_len_offset;
  size_t data_offset;
};

// A v3 file with one key of every scalar type, a string array, an int array, and two tensors
// (F32 [4] and F16 [2,2]).
TinyGguf MakeTiny(uint32_t version = 3) {
  GgufWriter w;
  TinyGguf t;
  w.Put<uint32_t>(0x46554747);
  w.Put<uint32_t>(version);
  t.tensor_count_offset = w.buf().size();
  w.Put<uint64_t>(2);
  t.kv_count_offset = w.buf().size();
  w.Put<uint64_t>(15);
  t.first_string_len_offset = w.buf().size();
  w.Str("general.architecture");
  w.Put<uint32_t>(8);
  w.Str("llama");
  w.Str("u8"); w.Put<uint32_t>(0); w.Put<uint8_t>(200);
  w.Str("i8"); w.Put<uint32_t>(1); w.Put<int8_t>(-100);
  w.Str("u16"); w.Put<uint32_t>(2); w.Put<uint16_t>(60000);
  w.Str("i16"); w.Put<uint32_t>(3); w.Put<int16_t>(-30000);
  w.Str("u32"); w.Put<uint32_t>(4); w.Put<uint32_t>(4000000000u);
  w.Str("i32"); w.Put<uint32_t>(5); w.Put<int32_t>(-2000000000);
  w.Str("f32"); w.Put<uint32_t>(6); w.Put<float>(1.5f);
  w.Str("bool"); w.Put<uint32_t>(7); w.Put<uint8_t>(1);
  w.Str("u64"); w.Put<uint32_t>(10); w.Put<uint64_t>(1ull << 40);
  w.Str("i64"); w.Put<uint32_t>(11); w.Put<int64_t>(-(1ll << 40));
  w.Str("f64"); w.Put<uint32_t>(12); w.Put<double>(0.25);
  w.Str("strs"); w.Put<uint32_t>(9); w.Put<uint32_t>(8);
  t.array_len_offset = w.buf().size();
  w.Put<uint64_t>(3);
  w.Str("a"); w.Str(""); w.Str("ccc");
  w.Str("ints"); w.Put<uint32_t>(9); w.Put<uint32_t>(5); w.Put<uint64_t>(2);
  w.Put<int32_t>(7); w.Put<int32_t>(-9);
  w.Str("general.alignment"); w.Put<uint32_t>(4); w.Put<uint32_t>(32);
  // Tensor infos.
  w.Str("vec");
  w.Put<uint32_t>(1); w.Put<uint64_t>(4); w.Put<uint32_t>(0); w.Put<uint64_t>(0);
  w.Str("mat");
  w.Put<uint32_t>(2); w.Put<uint64_t>(2); w.Put<uint64_t>(2); w.Put<uint32_t>(1);
  w.Put<uint64_t>(32);
  w.Pad(32);
  t.data_offset = w.buf().size();
  for (float f : {1.0f, -2.0f, 3.5f, 0.0f}) w.Put<float>(f);
  w.Pad(32);
  for (uint16_t h : {0x3C00, 0xC000, 0x3800, 0x0000}) w.Put<uint16_t>(h);  // 1, -2, 0.5, 0
  t.bytes = w.buf();
  return t;
}

TEST(GgufFile, ParsesEveryValueTypeAndTensors) {
  for (uint32_t version : {2u, 3u}) {
    TinyGguf tiny = MakeTiny(version);
    auto f = GgufFile::FromBytes(tiny.bytes);
    ASSERT_TRUE(f.ok()) << f.status();
    const GgufFile& g = **f;
    EXPECT_EQ(g.version(), version);
    EXPECT_EQ(*g.GetString("general.architecture"), "llama");
    EXPECT_EQ(*g.GetInt("u8"), 200);
    EXPECT_EQ(*g.GetInt("i8"), -100);
    EXPECT_EQ(*g.GetInt("u16"), 60000);
    EXPECT_EQ(*g.GetInt("i16"), -30000);
    EXPECT_EQ(*g.GetInt("u32"), 4000000000ll);
    EXPECT_EQ(*g.GetInt("i32"), -2000000000);
    EXPECT_EQ(*g.GetFloat("f32"), 1.5);
    EXPECT_EQ(*g.GetBool("bool"), true);
    EXPECT_EQ(*g.GetInt("u64"), 1ll << 40);
    EXPECT_EQ(*g.GetInt("i64"), -(1ll << 40));
    EXPECT_EQ(*g.GetFloat("f64"), 0.25);
    EXPECT_EQ(*g.GetStringArray("strs"), (std::vector<std::string>{"a", "", "ccc"}));
    EXPECT_EQ(*g.GetIntArray("ints"), (std::vector<int64_t>{7, -9}));
    EXPECT_EQ(g.GetInt("missing").status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(g.GetInt("strs").status().code(), absl::StatusCode::kInvalidArgument);
    ASSERT_EQ(g.tensors().size(), 2u);
    const GgufTensorInfo* vec = g.FindTensor("vec");
    ASSERT_NE(vec, nullptr);
    EXPECT_EQ(vec->num_bytes, 16u);
    float v[4];
    std::memcpy(v, vec->data, 16);
    EXPECT_EQ(v[2], 3.5f);
    const GgufTensorInfo* mat = g.FindTensor("mat");
    ASSERT_NE(mat, nullptr);
    EXPECT_EQ(mat->dims, (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(mat->type, static_cast<uint32_t>(GgmlType::kF16));
    EXPECT_EQ(mat->data - vec->data, 32);
  }
}

TEST(GgufFile, EveryTruncationIsAnError) {
  TinyGguf tiny = MakeTiny();
  // Any prefix that cuts into the header, metadata, tensor infos or tensor data must fail.
  const size_t data_end = tiny.bytes.size();
  for (size_t n = 0; n < data_end; ++n) {
    auto f = GgufFile::FromBytes(std::string_view(tiny.bytes.data(), n));
    EXPECT_FALSE(f.ok()) << "prefix of " << n << " bytes parsed";
    if (!f.ok()) {
      EXPECT_TRUE(f.status().code() == absl::StatusCode::kDataLoss ||
                  f.status().code() == absl::StatusCode::kInvalidArgument)
          << f.status();
    }
  }
  auto cut = GgufFile::FromBytes(std::string_view(tiny.bytes.data(), tiny.data_offset + 8));
  EXPECT_THAT(std::string(cut.status().message()), HasSubstr("extends past the end"));
  EXPECT_THAT(std::string(cut.status().message()), HasSubstr("vec"));
}

TEST(GgufFile, CorruptionsNameTheProblem) {
  TinyGguf tiny = MakeTiny();
  {
    std::string b = tiny.bytes;
    b[0] = 'X';
    auto f = GgufFile::FromBytes(b);
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(f.status().message()), HasSubstr("not a GGUF file"));
  }
  {
    std::string b = tiny.bytes;
    uint32_t v = 7;
    std::memcpy(&b[4], &v, 4);
    auto f = GgufFile::FromBytes(b);
    EXPECT_EQ(f.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(std::string(f.status().message()), HasSubstr("version 7"));
  }
  {
    std::string b = tiny.bytes;
    uint64_t huge = 1ull << 60;
    std::memcpy(&b[tiny.kv_count_offset], &huge, 8);
    auto f = GgufFile::FromBytes(b);
    EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss);
  }
  {
    std::string b = tiny.bytes;
    uint64_t huge = 1ull << 50;
    std::memcpy(&b[tiny.first_string_len_offset], &huge, 8);
    auto f = GgufFile::FromBytes(b);
    EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(f.status().message()), HasSubstr("metadata key #0"));
  }
  {
    std::string b = tiny.bytes;
    uint64_t huge = 1ull << 40;
    std::memcpy(&b[tiny.array_len_offset], &huge, 8);
    auto f = GgufFile::FromBytes(b);
    EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(f.status().message()), HasSubstr("strs"));
  }
  {
    // Value type 77 for the first key.
    std::string b = tiny.bytes;
    const size_t type_off = tiny.first_string_len_offset + 8 + std::strlen("general.architecture");
    uint32_t t = 77;
    std::memcpy(&b[type_off], &t, 4);
    auto f = GgufFile::FromBytes(b);
    EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(f.status().message()), HasSubstr("unknown value type 77"));
  }
  {
    // Random single-byte corruptions anywhere must never crash (errors or a parse are fine).
    uint32_t seed = 12345;
    for (int trial = 0; trial < 2000; ++trial) {
      std::string b = tiny.bytes;
      seed = seed * 1664525u + 1013904223u;
      const size_t pos = (seed >> 8) % tiny.data_offset;
      seed = seed * 1664525u + 1013904223u;
      b[pos] = static_cast<char>(seed >> 24);
      auto f = GgufFile::FromBytes(b);
      if (f.ok()) {
        for (const GgufTensorInfo& t : (*f)->tensors()) {
          EXPECT_LE(t.data + t.num_bytes,
                    reinterpret_cast<const uint8_t*>((*f)->FindTensor(t.name)->data) + t.num_bytes);
        }
      }
    }
  }
}

TEST(GgufFile, OpenMissingFileIsNotFound) {
  auto f = GgufFile::Open("/nonexistent/model.gguf");
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("/nonexistent/model.gguf"));
}

}  // namespace
}  // namespace oscarkv::model

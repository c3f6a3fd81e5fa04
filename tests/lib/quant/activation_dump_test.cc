// Tests of the .npy activation dump format (lib/quant/activation_dump.h).
#include "lib/quant/activation_dump.h"

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "gtest/gtest.h"

namespace oscarkv::quant {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Npy, RoundTripsWithNumpyHeader) {
  const std::string path = ::testing::TempDir() + "/a.npy";
  std::vector<float> data(3 * 5 * 64);
  std::mt19937 rng(1);
  std::normal_distribution<float> n01;
  for (float& v : data) v = n01(rng);
  const int64_t shape[3] = {3, 5, 64};
  ASSERT_TRUE(WriteNpy(path, shape, data).ok());
  const std::string bytes = Slurp(path);
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 6), std::string("\x93NUMPY", 6));
  const size_t header_len = static_cast<unsigned char>(bytes[8]) |
                            (static_cast<unsigned char>(bytes[9]) << 8);
  EXPECT_EQ((10 + header_len) % 64, 0u);  // NumPy's alignment
  EXPECT_NE(bytes.find("'shape': (3, 5, 64)"), std::string::npos);
  EXPECT_EQ(bytes[10 + header_len - 1], '\n');
  EXPECT_EQ(bytes.size(), 10 + header_len + data.size() * 4);
  auto arr = ReadNpy(path);
  ASSERT_TRUE(arr.ok()) << arr.status();
  EXPECT_EQ(arr->shape, (std::vector<int64_t>{3, 5, 64}));
  EXPECT_EQ(arr->data, data);
  const int64_t one[1] = {7};
  ASSERT_TRUE(WriteNpy(path, one, std::vector<float>(7, 2.0f)).ok());
  EXPECT_NE(Slurp(path).find("(7,)"), std::string::npos);
  EXPECT_EQ(ReadNpy(path)->shape, (std::vector<int64_t>{7}));
  EXPECT_FALSE(WriteNpy(path, shape, std::vector<float>(4)).ok());
  std::remove(path.c_str());
}

TEST(Npy, RejectsMalformedFiles) {
  const std::string path = ::testing::TempDir() + "/b.npy";
  const int64_t shape[2] = {4, 8};
  ASSERT_TRUE(WriteNpy(path, shape, std::vector<float>(32, 1.0f)).ok());
  const std::string good = Slurp(path);
  auto write = [&](const std::string& s) { std::ofstream(path, std::ios::binary) << s; };
  write(good.substr(0, good.size() - 3));
  EXPECT_EQ(ReadNpy(path).status().code(), absl::StatusCode::kDataLoss);
  std::string f8 = good;
  f8.replace(f8.find("<f4"), 3, "<f8");
  write(f8);
  EXPECT_EQ(ReadNpy(path).status().code(), absl::StatusCode::kUnimplemented);
  write("hello");
  EXPECT_EQ(ReadNpy(path).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ReadNpy(path + ".missing").status().code(), absl::StatusCode::kNotFound);
  std::remove(path.c_str());
}

TEST(LayerActivations, RoundTripAndShapeChecks) {
  const std::string dir = ::testing::TempDir();
  LayerActivations a;
  a.tokens = 10;
  a.q_heads = 6;
  a.kv_heads = 2;
  a.head_dim = 64;
  a.q.assign(10 * 6 * 64, 0.5f);
  a.k.assign(10 * 2 * 64, -1.0f);
  a.v.assign(10 * 2 * 64, 2.0f);
  ASSERT_TRUE(WriteLayerActivations(dir, 0, a).ok());
  ASSERT_TRUE(WriteLayerActivations(dir, 1, a).ok());
  EXPECT_EQ(ActivationPath("/x", 3, 'k'), "/x/layer_3_k.npy");
  EXPECT_GE(CountDumpedLayers(dir), 2);
  auto b = ReadLayerActivations(dir, 1);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->tokens, 10);
  EXPECT_EQ(b->q_heads, 6);
  EXPECT_EQ(b->kv_heads, 2);
  EXPECT_EQ(b->head_dim, 64);
  EXPECT_EQ(b->q, a.q);
  EXPECT_EQ(b->v, a.v);
  const int64_t wrong[3] = {9, 2, 64};
  ASSERT_TRUE(WriteNpy(ActivationPath(dir, 1, 'v'), wrong, std::vector<float>(9 * 2 * 64)).ok());
  EXPECT_EQ(ReadLayerActivations(dir, 1).status().code(), absl::StatusCode::kInvalidArgument);
  for (int l = 0; l < 2; ++l) {
    for (char w : {'q', 'k', 'v'}) std::remove(ActivationPath(dir, l, w).c_str());
  }
}

}  // namespace
}  // namespace oscarkv::quant

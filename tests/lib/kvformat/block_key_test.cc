// Block key chain: determinism, sensitivity to every input, and the prefix property.
#include "lib/kvformat/block_key.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <random>
#include <set>
#include <utility>
#include <vector>

namespace oscarkv::kvformat {
namespace {

std::vector<uint32_t> RandomTokens(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint32_t> id(0, 151935);
  std::vector<uint32_t> v(n);
  for (auto& t : v) t = id(rng);
  return v;
}

KeyChainParams Params() {
  KeyChainParams p;
  p.model_fingerprint = 0x1234567890abcdefull;
  p.calib_fingerprint = 0xfeedfacecafebeefull;
  p.codec = CodecId::kOscar;
  p.block_tokens = 64;
  return p;
}

TEST(BlockKey, SeedMatchesTheDocumentedBytes) {
  // FORMAT.md: domain string, then model fp, calib fp (u64 LE), codec, block tokens (u16 LE).
  const KeyChainParams p = Params();
  std::vector<uint8_t> bytes = {'o', 's', 'c', 'a', 'r', 'k', 'v', '-', 'b', 'l',
                                'o', 'c', 'k', '-', 'k', 'e', 'y', '-', 'v', '1'};
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<uint8_t>(p.model_fingerprint >> (8 * i)));
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<uint8_t>(p.calib_fingerprint >> (8 * i)));
  bytes.push_back(6);  // kOscar
  bytes.push_back(0);
  bytes.push_back(64);
  bytes.push_back(0);
  const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  EXPECT_EQ(ChainSeed(p), (BlockKey{h.low64, h.high64}));
}

TEST(BlockKey, NumericsTagIsAppendedToTheSeedOnlyWhenSet) {
  // FORMAT.md: a non-empty `numerics` follows the block size in the seed; empty leaves the seed
  // (and so every CPU key) as it was.
  KeyChainParams p = Params();
  const BlockKey cpu = ChainSeed(p);
  p.numerics = "cuda-sm90-132sm";
  std::vector<uint8_t> bytes = {'o', 's', 'c', 'a', 'r', 'k', 'v', '-', 'b', 'l',
                                'o', 'c', 'k', '-', 'k', 'e', 'y', '-', 'v', '1'};
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<uint8_t>(p.model_fingerprint >> (8 * i)));
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<uint8_t>(p.calib_fingerprint >> (8 * i)));
  for (uint8_t b : {6, 0, 64, 0}) bytes.push_back(b);
  bytes.insert(bytes.end(), p.numerics.begin(), p.numerics.end());
  const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  EXPECT_EQ(ChainSeed(p), (BlockKey{h.low64, h.high64}));
  EXPECT_FALSE(ChainSeed(p) == cpu);
  const std::vector<uint32_t> tokens = RandomTokens(256, 7);
  const std::vector<BlockKey> gpu_keys = ComputeBlockKeys(p, tokens);
  p.numerics.clear();
  const std::vector<BlockKey> cpu_keys = ComputeBlockKeys(p, tokens);
  ASSERT_EQ(gpu_keys.size(), cpu_keys.size());
  for (size_t i = 0; i < cpu_keys.size(); ++i) EXPECT_FALSE(gpu_keys[i] == cpu_keys[i]) << i;
}

TEST(BlockKey, LinkMatchesTheDocumentedBytes) {
  const BlockKey prev{0x0102030405060708ull, 0x1112131415161718ull};
  const std::vector<uint32_t> ids = {1, 0xabcdef01u, 7};
  std::vector<uint8_t> bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<uint8_t>(prev.lo >> (8 * i)));
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<uint8_t>(prev.hi >> (8 * i)));
  for (uint32_t t : ids) {
    for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<uint8_t>(t >> (8 * i)));
  }
  const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  EXPECT_EQ(NextBlockKey(prev, ids), (BlockKey{h.low64, h.high64}));
}

TEST(BlockKey, OnlyFullBlocksGetKeys) {
  const auto tokens = RandomTokens(64 * 3 + 63, 1);
  EXPECT_EQ(ComputeBlockKeys(Params(), tokens).size(), 3u);
  EXPECT_TRUE(ComputeBlockKeys(Params(), std::span<const uint32_t>(tokens).first(63)).empty());
}

TEST(BlockKey, ChainEqualsStepByStep) {
  const auto tokens = RandomTokens(64 * 5, 2);
  const auto keys = ComputeBlockKeys(Params(), tokens);
  BlockKey k = ChainSeed(Params());
  for (size_t i = 0; i < keys.size(); ++i) {
    k = NextBlockKey(k, std::span<const uint32_t>(tokens).subspan(i * 64, 64));
    EXPECT_EQ(keys[i], k) << i;
  }
}

TEST(BlockKey, SameInputsSameKeysAndPrefixProperty) {
  const auto a = RandomTokens(64 * 8, 3);
  auto b = a;
  // b shares the first 5 blocks with a, then differs in one token of block 5.
  b[5 * 64 + 17] ^= 1;
  const auto ka = ComputeBlockKeys(Params(), a);
  const auto ka2 = ComputeBlockKeys(Params(), a);
  const auto kb = ComputeBlockKeys(Params(), b);
  EXPECT_EQ(ka, ka2);
  for (int i = 0; i < 8; ++i) {
    if (i < 5) {
      EXPECT_EQ(ka[i], kb[i]) << i;
    } else {
      EXPECT_NE(ka[i], kb[i]) << "block " << i << " follows a differing block";
    }
  }
  // A longer sequence with the same prefix has the same leading keys.
  auto longer = a;
  longer.resize(64 * 10, 42);
  const auto kl = ComputeBlockKeys(Params(), longer);
  ASSERT_EQ(kl.size(), 10u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(kl[i], ka[i]);
}

TEST(BlockKey, SameBlockAtDifferentPositionsHasDifferentKeys) {
  // Block content alone is not the key: the chain encodes everything before it.
  std::vector<uint32_t> t(128, 5);
  const auto k = ComputeBlockKeys(Params(), t);
  EXPECT_NE(k[0], k[1]);
}

TEST(BlockKey, EveryChainInputChangesEveryKey) {
  const auto tokens = RandomTokens(64 * 4, 4);
  const auto base = ComputeBlockKeys(Params(), tokens);
  std::vector<std::pair<const char*, KeyChainParams>> variants;
  KeyChainParams p = Params();
  p.model_fingerprint ^= 1;
  variants.push_back({"model", p});
  p = Params();
  p.calib_fingerprint ^= 1ull << 63;
  variants.push_back({"calib", p});
  p = Params();
  p.calib_fingerprint = 0;
  variants.push_back({"no calib", p});
  p = Params();
  p.codec = CodecId::kOscarTns;
  variants.push_back({"codec", p});
  p = Params();
  p.codec = CodecId::kBf16;
  variants.push_back({"codec bf16", p});
  for (const auto& [name, params] : variants) {
    const auto k = ComputeBlockKeys(params, tokens);
    ASSERT_EQ(k.size(), base.size());
    for (size_t i = 0; i < k.size(); ++i) EXPECT_NE(k[i], base[i]) << name << " block " << i;
  }
  // Block size: 32-token blocks over the same tokens never collide with the 64-token chain.
  p = Params();
  p.block_tokens = 32;
  const auto k32 = ComputeBlockKeys(p, tokens);
  ASSERT_EQ(k32.size(), 8u);
  std::set<std::pair<uint64_t, uint64_t>> seen;
  for (const auto& k : base) seen.insert({k.lo, k.hi});
  for (const auto& k : k32) EXPECT_EQ(seen.count({k.lo, k.hi}), 0u);
}

TEST(BlockKey, EveryTokenPositionMatters) {
  const auto tokens = RandomTokens(64, 5);
  const BlockKey base = ComputeBlockKeys(Params(), tokens)[0];
  std::set<std::pair<uint64_t, uint64_t>> seen = {{base.lo, base.hi}};
  for (size_t i = 0; i < tokens.size(); ++i) {
    auto t = tokens;
    t[i] += 1;
    const BlockKey k = ComputeBlockKeys(Params(), t)[0];
    EXPECT_TRUE(seen.insert({k.lo, k.hi}).second) << "position " << i;
  }
}

TEST(BlockKey, Int32AndUint32TokenIdsAgree) {
  const auto u = RandomTokens(64 * 2, 6);
  std::vector<int32_t> s(u.begin(), u.end());
  EXPECT_EQ(ComputeBlockKeys(Params(), u), ComputeBlockKeys(Params(), s));
}

TEST(BlockKey, HexIsHiThenLo) {
  EXPECT_EQ(BlockKeyToHex(BlockKey{0x1, 0xabcdef0000000002ull}),
            "abcdef00000000020000000000000001");
}

}  // namespace
}  // namespace oscarkv::kvformat

#include "lib/kvformat/block_key.h"

#include <xxhash.h>

#include <bit>
#include <cstring>

#include "absl/strings/str_format.h"
#include "lib/base/log.h"

namespace oscarkv::kvformat {
namespace {

static_assert(std::endian::native == std::endian::little,
              "block keys hash little-endian bytes; add byte swaps for big-endian hosts");

void AppendLe(std::vector<uint8_t>& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

BlockKey ToKey(XXH128_hash_t h) { return BlockKey{h.low64, h.high64}; }

// `buffer` is scratch reused across the chain to avoid an allocation per block.
BlockKey HashLink(const BlockKey& prev, const uint32_t* ids, size_t count,
                  std::vector<uint8_t>& buffer) {
  buffer.resize(sizeof(BlockKey) + count * sizeof(uint32_t));
  std::memcpy(buffer.data(), &prev.lo, 8);
  std::memcpy(buffer.data() + 8, &prev.hi, 8);
  if (count > 0) std::memcpy(buffer.data() + 16, ids, count * sizeof(uint32_t));
  return ToKey(XXH3_128bits(buffer.data(), buffer.size()));
}

}  // namespace

BlockKey ChainSeed(const KeyChainParams& params) {
  CHECK(params.block_tokens >= 1 && params.block_tokens <= 65535)
      << "block_tokens " << params.block_tokens << " outside [1, 65535]";
  std::vector<uint8_t> bytes(kBlockKeyDomain, kBlockKeyDomain + sizeof(kBlockKeyDomain) - 1);
  AppendLe(bytes, params.model_fingerprint, 8);
  AppendLe(bytes, params.calib_fingerprint, 8);
  AppendLe(bytes, static_cast<uint16_t>(params.codec), 2);
  AppendLe(bytes, static_cast<uint16_t>(params.block_tokens), 2);
  bytes.insert(bytes.end(), params.numerics.begin(), params.numerics.end());
  return ToKey(XXH3_128bits(bytes.data(), bytes.size()));
}

BlockKey NextBlockKey(const BlockKey& prev, std::span<const uint32_t> block_token_ids) {
  std::vector<uint8_t> buffer;
  return HashLink(prev, block_token_ids.data(), block_token_ids.size(), buffer);
}

BlockKey NextBlockKey(const BlockKey& prev, std::span<const int32_t> block_token_ids) {
  return NextBlockKey(prev, std::span<const uint32_t>(
                                reinterpret_cast<const uint32_t*>(block_token_ids.data()),
                                block_token_ids.size()));
}

std::vector<BlockKey> ComputeBlockKeys(const KeyChainParams& params,
                                       std::span<const uint32_t> token_ids) {
  BlockKey key = ChainSeed(params);
  const size_t t = static_cast<size_t>(params.block_tokens);
  const size_t blocks = token_ids.size() / t;
  std::vector<BlockKey> keys;
  keys.reserve(blocks);
  std::vector<uint8_t> buffer;
  for (size_t i = 0; i < blocks; ++i) {
    key = HashLink(key, token_ids.data() + i * t, t, buffer);
    keys.push_back(key);
  }
  return keys;
}

std::vector<BlockKey> ComputeBlockKeys(const KeyChainParams& params,
                                       std::span<const int32_t> token_ids) {
  return ComputeBlockKeys(
      params, std::span<const uint32_t>(reinterpret_cast<const uint32_t*>(token_ids.data()),
                                        token_ids.size()));
}

std::string BlockKeyToHex(const BlockKey& key) {
  return absl::StrFormat("%016x%016x", key.hi, key.lo);
}

}  // namespace oscarkv::kvformat

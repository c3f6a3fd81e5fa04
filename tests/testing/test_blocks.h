// Real serialised KV blocks for tests: random payloads of a chosen size under lib/kvformat's
// layout, with valid header and checksums. Header-only.
#ifndef OSCARKV_TESTS_TESTING_TEST_BLOCKS_H_
#define OSCARKV_TESTS_TESTING_TEST_BLOCKS_H_

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "lib/base/log.h"
#include "lib/kvformat/block.h"

namespace oscarkv::testing {

// BF16 blocks of 64 tokens with head_dim 64 hold 16 KiB of payload per (layer, KV head); a block
// of `layers` x `kv_heads` therefore holds layers * kv_heads * 16 KiB (+ 128 header bytes).
inline constexpr size_t kBf16BytesPerLayerHead = 64 * 64 * 2 * 2;

// Serialised block: header + random payload drawn from `seed`.
inline std::vector<std::byte> MakeTestBlock(uint64_t seed, int layers, int kv_heads,
                                            kvformat::BlockKey key = {1, 2},
                                            kvformat::BlockKey prev_key = {0, 0},
                                            kvformat::CodecId codec = kvformat::CodecId::kBf16,
                                            kvformat::BlockKind kind = kvformat::BlockKind::kBf16,
                                            int head_dim = 64) {
  kvformat::BlockFields fields;
  fields.codec = codec;
  fields.kind = kind;
  fields.token_count = 64;
  fields.layer_count = layers;
  fields.kv_heads = kv_heads;
  fields.head_dim = head_dim;
  fields.key = key;
  fields.prev_key = prev_key;
  const size_t payload_bytes =
      kvformat::PayloadBytes(codec, kind, layers, kv_heads, head_dim, fields.token_count);
  std::vector<std::byte> payload(payload_bytes);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < payload.size(); i += 8) {
    const uint64_t r = rng();
    for (size_t j = 0; j < 8 && i + j < payload.size(); ++j) {
      payload[i + j] = static_cast<std::byte>(r >> (8 * j));
    }
  }
  auto block = kvformat::SerializeBlock(fields, payload);
  CHECK(block.ok()) << block.status();
  return *std::move(block);
}

// A BF16 test block of about `bytes` (rounded down to whole 16 KiB (layer, head) units, >= 1).
inline std::vector<std::byte> MakeTestBlockOfSize(uint64_t seed, size_t bytes,
                                                  kvformat::BlockKey key = {1, 2}) {
  const int units = static_cast<int>(std::max<size_t>(1, bytes / kBf16BytesPerLayerHead));
  int heads = 1;
  while (heads < 32 && units % (heads * 2) == 0) heads *= 2;
  return MakeTestBlock(seed, units / heads, heads, key);
}

}  // namespace oscarkv::testing

#endif  // OSCARKV_TESTS_TESTING_TEST_BLOCKS_H_

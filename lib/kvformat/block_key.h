// Block keys: a 128-bit XXH3 hash chain over token ids (FORMAT.md "Block keys").
//
//   seed  = XXH3_128("oscarkv-block-key-v1" ‖ model_fp u64 ‖ calib_fp u64 ‖ codec u16 ‖
//                    block_tokens u16 [‖ numerics bytes, when not empty])    (all little-endian)
//   key_i = XXH3_128(key_{i-1} ‖ token ids of block i as u32)     key_{-1} = seed
//
// A key is 16 bytes: `lo` then `hi`, each u64 little-endian (XXH128_hash_t low64 / high64).
// Two blocks have equal keys iff (up to hash collisions) they hold the same token prefix from
// position 0 under the same model, calibration, codec and block size. Only full blocks get keys.
// Thread-safe: all functions are pure.
#ifndef OSCARKV_LIB_KVFORMAT_BLOCK_KEY_H_
#define OSCARKV_LIB_KVFORMAT_BLOCK_KEY_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "lib/kvformat/int2_block.h"

namespace oscarkv::kvformat {

inline constexpr char kBlockKeyDomain[] = "oscarkv-block-key-v1";  // hashed without the NUL

// What, besides tokens, decides whether cached KV can be reused.
struct KeyChainParams {
  uint64_t model_fingerprint = 0;  // Default: 0 (tests only); lib/model's fingerprint in services
  uint64_t calib_fingerprint = 0;  // Default: 0 = no calibration
  CodecId codec = CodecId::kOscar;  // Default: kOscar (M6)
  int block_tokens = kDefaultBlockTokens;  // Default: 64; must be in [1, 65535]
  // Which computation made the KV when it is not the CPU engine's: KV is reusable bit for bit
  // only between workers that compute it the same way (e.g. "cuda-sm90-132sm" for GPU prefill
  // workers of one GPU type). Default: "" (the CPU engine; keys as before this field existed).
  std::string numerics;
};

// The chain seed: the `prev_key` of a sequence's first block.
BlockKey ChainSeed(const KeyChainParams& params);

// Key of the block holding `block_token_ids`, following the block whose key is `prev`.
BlockKey NextBlockKey(const BlockKey& prev, std::span<const uint32_t> block_token_ids);
BlockKey NextBlockKey(const BlockKey& prev, std::span<const int32_t> block_token_ids);

// Keys of all full blocks of `token_ids` (floor(size / block_tokens) keys; a trailing partial
// block gets none). keys[i] covers tokens [0, (i+1)*block_tokens). CHECK-fails if
// params.block_tokens is outside [1, 65535].
std::vector<BlockKey> ComputeBlockKeys(const KeyChainParams& params,
                                       std::span<const uint32_t> token_ids);
std::vector<BlockKey> ComputeBlockKeys(const KeyChainParams& params,
                                       std::span<const int32_t> token_ids);

// 32 lowercase hex digits, `hi` first (reads like one 128-bit number). For logs and file names.
std::string BlockKeyToHex(const BlockKey& key);

}  // namespace oscarkv::kvformat

#endif  // OSCARKV_LIB_KVFORMAT_BLOCK_KEY_H_

// Building, serialising and parsing whole blocks: a 128-byte BlockHeader followed by the payload
// (layouts in int2_block.h / block_layout.h, bytes in FORMAT.md). Checksums are XXH3-64 (seed 0):
// payload_checksum over the payload, header_checksum over header bytes [0, 120).
//
// ParseBlock() is the one gate every byte string from the network, disk or another process passes
// before anyone computes offsets from it: it never reads outside the given span, and accepts only
// a block whose header is well formed, whose sizes agree with the layout, and whose checksums match.
// All functions are thread-safe (pure).
#ifndef OSCARKV_LIB_KVFORMAT_BLOCK_H_
#define OSCARKV_LIB_KVFORMAT_BLOCK_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/kvformat/int2_block.h"

namespace oscarkv::kvformat {

inline constexpr size_t kBlockHeaderBytes = sizeof(BlockHeader);  // 128

// The header fields a writer chooses; sizes and checksums are derived.
struct BlockFields {
  CodecId codec = CodecId::kOscar;          // Default: kOscar (M6)
  BlockKind kind = BlockKind::kQuantized;   // Default: kQuantized (history)
  uint64_t model_fingerprint = 0;           // Default: 0
  uint64_t calib_fingerprint = 0;           // Default: 0 = no calibration
  uint32_t first_position = 0;              // Default: 0
  int token_count = kDefaultBlockTokens;    // Default: 64
  int layer_count = 0;                      // Default: 0 (must be set)
  int kv_heads = 0;                         // Default: 0 (must be set)
  int head_dim = 0;                         // Default: 0 (must be set)
  BlockKey key{};                           // Default: zero
  BlockKey prev_key{};                      // Default: zero
};

// What a reader expects of a block; each set field must match the header (else
// kFailedPrecondition). Unset fields are not checked.
struct BlockExpectations {
  std::optional<uint64_t> model_fingerprint;  // Default: unchecked
  std::optional<uint64_t> calib_fingerprint;  // Default: unchecked
  std::optional<CodecId> codec;               // Default: unchecked
  std::optional<int> token_count;             // Default: unchecked
  std::optional<BlockKey> key;                // Default: unchecked
};

// A parsed block. `payload` points into the caller's buffer, which must outlive the view.
struct BlockView {
  BlockHeader header;
  std::span<const std::byte> payload;
};

// XXH3-64 (seed 0) of `payload`.
uint64_t PayloadChecksum(std::span<const std::byte> payload);
// XXH3-64 (seed 0) of bytes [0, 120) of `header`.
uint64_t HeaderChecksum(const BlockHeader& header);

// Checks that `fields` describe a valid block (same rules as ParseBlock's header checks).
// @return kInvalidArgument naming the bad field.
absl::Status ValidateBlockFields(const BlockFields& fields);

// Header for `fields` and `payload`: magic, version, payload_bytes, both checksums filled,
// reserved bytes zero.
// @return kInvalidArgument if the fields are invalid or payload.size() differs from the layout's
//         PayloadBytes.
absl::StatusOr<BlockHeader> MakeBlockHeader(const BlockFields& fields,
                                            std::span<const std::byte> payload);

// header bytes (little-endian) followed by the payload, ready to store or send.
// @return the errors of MakeBlockHeader.
absl::StatusOr<std::vector<std::byte>> SerializeBlock(const BlockFields& fields,
                                                      std::span<const std::byte> payload);

// Writes `header`'s 128 little-endian bytes to `out` (which must hold at least 128 bytes).
void WriteBlockHeader(const BlockHeader& header, std::span<std::byte, kBlockHeaderBytes> out);

// Parses and fully validates the header at the start of `bytes` (at least 128 bytes; the payload
// need not be there). Checks in order: length, magic, version, header checksum, fields
// (codec, block kind, reserved bytes, dimensions, payload_bytes vs the layout), expectations.
// @return kDataLoss         fewer than 128 bytes; header checksum mismatch
//         kInvalidArgument  wrong magic; version 0; unknown codec or block kind; non-zero reserved
//                           bytes; zero or unsupported dimensions; payload_bytes != layout size
//         kUnimplemented    version newer than kFormatVersion
//         kFailedPrecondition  a set expectation does not match
absl::StatusOr<BlockHeader> ParseBlockHeader(std::span<const std::byte> bytes,
                                             const BlockExpectations& expect = {});

// Parses a whole serialised block: ParseBlockHeader, then the total length must be exactly
// 128 + payload_bytes, then the payload checksum.
// @return the errors of ParseBlockHeader, and
//         kDataLoss         bytes shorter than 128 + payload_bytes (truncated); payload checksum
//                           mismatch
//         kInvalidArgument  bytes longer than 128 + payload_bytes (trailing bytes)
absl::StatusOr<BlockView> ParseBlock(std::span<const std::byte> bytes,
                                     const BlockExpectations& expect = {});

// Arrival check for a payload that travelled apart from its (already parsed) header.
// @return kDataLoss if payload.size() != header.payload_bytes or the checksum differs.
absl::Status VerifyPayloadChecksum(const BlockHeader& header, std::span<const std::byte> payload);

}  // namespace oscarkv::kvformat

#endif  // OSCARKV_LIB_KVFORMAT_BLOCK_H_

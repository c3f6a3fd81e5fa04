#include "lib/kvformat/block.h"

#include <xxhash.h>

#include <bit>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/base/status_macros.h"
#include "lib/kvformat/block_key.h"
#include "lib/kvformat/block_layout.h"

namespace oscarkv::kvformat {
namespace {

// The header struct's memory image is its little-endian wire form: no padding (offsets asserted
// below) and a little-endian host.
static_assert(std::endian::native == std::endian::little,
              "block headers are memcpy'd; add byte swaps for big-endian hosts");
static_assert(offsetof(BlockHeader, magic) == 0);
static_assert(offsetof(BlockHeader, version) == 4);
static_assert(offsetof(BlockHeader, codec) == 6);
static_assert(offsetof(BlockHeader, model_fingerprint) == 8);
static_assert(offsetof(BlockHeader, calib_fingerprint) == 16);
static_assert(offsetof(BlockHeader, first_position) == 24);
static_assert(offsetof(BlockHeader, token_count) == 28);
static_assert(offsetof(BlockHeader, layer_count) == 30);
static_assert(offsetof(BlockHeader, kv_heads) == 32);
static_assert(offsetof(BlockHeader, head_dim) == 34);
static_assert(offsetof(BlockHeader, block_kind) == 36);
static_assert(offsetof(BlockHeader, reserved0) == 37);
static_assert(offsetof(BlockHeader, key) == 40);
static_assert(offsetof(BlockHeader, prev_key) == 56);
static_assert(offsetof(BlockHeader, payload_bytes) == 72);
static_assert(offsetof(BlockHeader, payload_checksum) == 80);
static_assert(offsetof(BlockHeader, reserved1) == 88);
static_assert(offsetof(BlockHeader, header_checksum) == 120);

constexpr size_t kHeaderChecksummedBytes = offsetof(BlockHeader, header_checksum);

struct Shape {
  uint32_t codec;  // raw, validated here
  uint32_t kind;   // raw, validated here
  int64_t tokens;
  int64_t layers;
  int64_t heads;
  int64_t head_dim;
  uint64_t first_position;
};

absl::Status CheckDim(const char* name, int64_t value) {
  if (value < 1 || value > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("block ", name, " is ", value, "; must be in [1, 65535]"));
  }
  return absl::OkStatus();
}

// Validates codec, kind and dimensions; on success returns the layout's payload size.
absl::StatusOr<uint64_t> ValidateShape(const Shape& s) {
  if (s.codec >= static_cast<uint32_t>(kNumCodecs)) {
    return absl::InvalidArgumentError(absl::StrCat("block codec id ", s.codec,
                                                   " is unknown (known ids 0..",
                                                   kNumCodecs - 1, ")"));
  }
  if (s.kind > static_cast<uint32_t>(BlockKind::kQuantized)) {
    return absl::InvalidArgumentError(
        absl::StrCat("block block_kind ", s.kind, " is unknown (0 = bf16, 1 = quantized)"));
  }
  OSCARKV_RETURN_IF_ERROR(CheckDim("token_count", s.tokens));
  OSCARKV_RETURN_IF_ERROR(CheckDim("layer_count", s.layers));
  OSCARKV_RETURN_IF_ERROR(CheckDim("kv_heads", s.heads));
  OSCARKV_RETURN_IF_ERROR(CheckDim("head_dim", s.head_dim));
  if (s.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("block head_dim ", s.head_dim, " is odd; must be even"));
  }
  const auto codec = static_cast<CodecId>(s.codec);
  const auto kind = static_cast<BlockKind>(s.kind);
  const SegmentKind k = SegmentKindOf(codec, kind, KvSide::kK);
  const SegmentKind v = SegmentKindOf(codec, kind, KvSide::kV);
  const bool int2 = k != SegmentKind::kBf16Rows || v != SegmentKind::kBf16Rows;
  if (int2 && s.head_dim % 32 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block head_dim ", s.head_dim, " is not a multiple of 32, required by INT2 codec ",
        s.codec, " in quantized blocks"));
  }
  if ((k == SegmentKind::kInt2ChannelGroup || v == SegmentKind::kInt2ChannelGroup) &&
      s.tokens % kChannelGroupTokens != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block token_count ", s.tokens, " is not a multiple of ", kChannelGroupTokens,
        ", required by the channel-group K of codec ", s.codec, " in quantized blocks"));
  }
  if (s.first_position + static_cast<uint64_t>(s.tokens) > (uint64_t{1} << 32)) {
    return absl::InvalidArgumentError(absl::StrCat("block first_position ", s.first_position,
                                                   " + token_count ", s.tokens,
                                                   " exceeds 2^32 positions"));
  }
  const BlockLayout layout{codec,
                           kind,
                           static_cast<int>(s.layers),
                           static_cast<int>(s.heads),
                           static_cast<int>(s.head_dim),
                           static_cast<int>(s.tokens)};
  // Each factor is < 2^16, so one layer is < 2^51 bytes; only the final product can overflow.
  const uint64_t per_layer = layout.layer_bytes();
  if (per_layer > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(s.layers)) {
    return absl::InvalidArgumentError(
        absl::StrCat("block payload size overflows 64 bits: ", s.layers, " layers x ", per_layer,
                     " bytes"));
  }
  return per_layer * static_cast<uint64_t>(s.layers);
}

bool AllZero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

std::string KeyString(const BlockKey& key) { return BlockKeyToHex(key); }

}  // namespace

uint64_t PayloadChecksum(std::span<const std::byte> payload) {
  return XXH3_64bits(payload.data(), payload.size());
}

uint64_t HeaderChecksum(const BlockHeader& header) {
  return XXH3_64bits(&header, kHeaderChecksummedBytes);
}

absl::Status ValidateBlockFields(const BlockFields& f) {
  const Shape shape{static_cast<uint32_t>(f.codec), static_cast<uint32_t>(f.kind),
                    f.token_count,  f.layer_count, f.kv_heads, f.head_dim, f.first_position};
  return ValidateShape(shape).status();
}

absl::StatusOr<BlockHeader> MakeBlockHeader(const BlockFields& f,
                                            std::span<const std::byte> payload) {
  const Shape shape{static_cast<uint32_t>(f.codec), static_cast<uint32_t>(f.kind),
                    f.token_count,  f.layer_count, f.kv_heads, f.head_dim, f.first_position};
  OSCARKV_ASSIGN_OR_RETURN(const uint64_t expected_bytes, ValidateShape(shape));
  if (payload.size() != expected_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block payload is ", payload.size(), " bytes; the layout (codec ",
        static_cast<int>(f.codec), ", kind ", static_cast<int>(f.kind), ", L=", f.layer_count,
        " H=", f.kv_heads, " D=", f.head_dim, " T=", f.token_count, ") needs ", expected_bytes));
  }
  BlockHeader h;
  std::memset(&h, 0, sizeof(h));
  h.magic = kBlockMagic;
  h.version = kFormatVersion;
  h.codec = static_cast<uint16_t>(f.codec);
  h.model_fingerprint = f.model_fingerprint;
  h.calib_fingerprint = f.calib_fingerprint;
  h.first_position = f.first_position;
  h.token_count = static_cast<uint16_t>(f.token_count);
  h.layer_count = static_cast<uint16_t>(f.layer_count);
  h.kv_heads = static_cast<uint16_t>(f.kv_heads);
  h.head_dim = static_cast<uint16_t>(f.head_dim);
  h.block_kind = static_cast<uint8_t>(f.kind);
  h.key = f.key;
  h.prev_key = f.prev_key;
  h.payload_bytes = payload.size();
  h.payload_checksum = PayloadChecksum(payload);
  h.header_checksum = HeaderChecksum(h);
  return h;
}

absl::StatusOr<std::vector<std::byte>> SerializeBlock(const BlockFields& fields,
                                                      std::span<const std::byte> payload) {
  OSCARKV_ASSIGN_OR_RETURN(const BlockHeader header, MakeBlockHeader(fields, payload));
  std::vector<std::byte> out(kBlockHeaderBytes + payload.size());
  WriteBlockHeader(header, std::span<std::byte, kBlockHeaderBytes>(out.data(), kBlockHeaderBytes));
  if (!payload.empty()) std::memcpy(out.data() + kBlockHeaderBytes, payload.data(), payload.size());
  return out;
}

void WriteBlockHeader(const BlockHeader& header, std::span<std::byte, kBlockHeaderBytes> out) {
  std::memcpy(out.data(), &header, kBlockHeaderBytes);
}

absl::StatusOr<BlockHeader> ParseBlockHeader(std::span<const std::byte> bytes,
                                             const BlockExpectations& expect) {
  if (bytes.size() < kBlockHeaderBytes) {
    return absl::DataLossError(absl::StrCat("block truncated: ", bytes.size(),
                                            " bytes, shorter than the ", kBlockHeaderBytes,
                                            "-byte header"));
  }
  BlockHeader h;
  std::memcpy(&h, bytes.data(), kBlockHeaderBytes);
  if (h.magic != kBlockMagic) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "block magic is 0x%08x; expected 0x%08x (\"OKVB\"): not an oscarkv block", h.magic,
        kBlockMagic));
  }
  if (h.version > kFormatVersion) {
    return absl::UnimplementedError(absl::StrCat("block format version ", h.version,
                                                 " is newer than this build supports (",
                                                 kFormatVersion, ")"));
  }
  if (h.version == 0) {
    return absl::InvalidArgumentError("block format version 0 is invalid (versions start at 1)");
  }
  const uint64_t header_sum = HeaderChecksum(h);
  if (header_sum != h.header_checksum) {
    return absl::DataLossError(absl::StrFormat(
        "block header_checksum mismatch: stored 0x%016x, computed 0x%016x (header corrupted)",
        h.header_checksum, header_sum));
  }
  if (!AllZero(h.reserved0, sizeof(h.reserved0))) {
    return absl::InvalidArgumentError("block reserved0 (header bytes 37..39) is not zero");
  }
  if (!AllZero(h.reserved1, sizeof(h.reserved1))) {
    return absl::InvalidArgumentError("block reserved1 (header bytes 88..119) is not zero");
  }
  const Shape shape{h.codec,       h.block_kind, h.token_count,   h.layer_count,
                    h.kv_heads,    h.head_dim,   h.first_position};
  OSCARKV_ASSIGN_OR_RETURN(const uint64_t expected_bytes, ValidateShape(shape));
  if (h.payload_bytes != expected_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block payload_bytes is ", h.payload_bytes, "; the layout (codec ", h.codec, ", kind ",
        h.block_kind, ", L=", h.layer_count, " H=", h.kv_heads, " D=", h.head_dim,
        " T=", h.token_count, ") needs ", expected_bytes));
  }
  if (expect.model_fingerprint && *expect.model_fingerprint != h.model_fingerprint) {
    return absl::FailedPreconditionError(
        absl::StrFormat("block model_fingerprint is 0x%016x; expected 0x%016x (another model)",
                        h.model_fingerprint, *expect.model_fingerprint));
  }
  if (expect.calib_fingerprint && *expect.calib_fingerprint != h.calib_fingerprint) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "block calib_fingerprint is 0x%016x; expected 0x%016x (another calibration)",
        h.calib_fingerprint, *expect.calib_fingerprint));
  }
  if (expect.codec && static_cast<uint16_t>(*expect.codec) != h.codec) {
    return absl::FailedPreconditionError(absl::StrCat("block codec is ", h.codec, "; expected ",
                                                      static_cast<int>(*expect.codec)));
  }
  if (expect.token_count && *expect.token_count != h.token_count) {
    return absl::FailedPreconditionError(absl::StrCat(
        "block token_count is ", h.token_count, "; expected ", *expect.token_count));
  }
  if (expect.key && !(*expect.key == h.key)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "block key is ", KeyString(h.key), "; expected ", KeyString(*expect.key)));
  }
  return h;
}

absl::StatusOr<BlockView> ParseBlock(std::span<const std::byte> bytes,
                                     const BlockExpectations& expect) {
  OSCARKV_ASSIGN_OR_RETURN(const BlockHeader h, ParseBlockHeader(bytes, expect));
  const uint64_t available = bytes.size() - kBlockHeaderBytes;
  if (available < h.payload_bytes) {
    return absl::DataLossError(absl::StrCat("block truncated: ", bytes.size(),
                                            " bytes, header says ", kBlockHeaderBytes, " + ",
                                            h.payload_bytes, " = ",
                                            kBlockHeaderBytes + h.payload_bytes));
  }
  if (available > h.payload_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block has ", available - h.payload_bytes, " trailing bytes after its ",
        kBlockHeaderBytes, " + ", h.payload_bytes, " bytes"));
  }
  BlockView view{h, bytes.subspan(kBlockHeaderBytes, h.payload_bytes)};
  OSCARKV_RETURN_IF_ERROR(VerifyPayloadChecksum(h, view.payload));
  return view;
}

absl::Status VerifyPayloadChecksum(const BlockHeader& header, std::span<const std::byte> payload) {
  if (payload.size() != header.payload_bytes) {
    return absl::DataLossError(absl::StrCat("block payload is ", payload.size(),
                                            " bytes; header payload_bytes says ",
                                            header.payload_bytes));
  }
  const uint64_t sum = PayloadChecksum(payload);
  if (sum != header.payload_checksum) {
    return absl::DataLossError(absl::StrFormat(
        "block payload_checksum mismatch: stored 0x%016x, computed 0x%016x (payload corrupted)",
        header.payload_checksum, sum));
  }
  return absl::OkStatus();
}

}  // namespace oscarkv::kvformat

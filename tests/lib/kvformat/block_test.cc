// Block serialisation and validation: round trips for every codec and block kind, every
// corruption case by hand, and a randomized corruption loop.
#include "lib/kvformat/block.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "lib/base/log.h"
#include "lib/kvformat/block_key.h"
#include "lib/kvformat/block_layout.h"

namespace oscarkv::kvformat {
namespace {

using ::testing::HasSubstr;

const CodecId kAllCodecs[] = {CodecId::kBf16,          CodecId::kInt2Naive,
                              CodecId::kInt2Hadamard,  CodecId::kOscarHadamardClip,
                              CodecId::kOscarNoRotation, CodecId::kOscarGram,
                              CodecId::kOscar,         CodecId::kKivi2,
                              CodecId::kOscarTns};

BlockFields Fields(CodecId codec, BlockKind kind, int head_dim, int layers = 2, int heads = 2,
                   int tokens = 64) {
  BlockFields f;
  f.codec = codec;
  f.kind = kind;
  f.model_fingerprint = 0xa1a2a3a4a5a6a7a8ull;
  f.calib_fingerprint = 0xc1c2c3c4c5c6c7c8ull;
  f.first_position = 128;
  f.token_count = tokens;
  f.layer_count = layers;
  f.kv_heads = heads;
  f.head_dim = head_dim;
  KeyChainParams kp{f.model_fingerprint, f.calib_fingerprint, codec, tokens};
  f.prev_key = ChainSeed(kp);
  f.key = BlockKey{0x1111, 0x2222};
  return f;
}

// Byte written at offset `i` of segment (layer, side, head): identifies the segment.
std::byte SegmentByte(int layer, KvSide side, int head, size_t i) {
  return static_cast<std::byte>((layer * 37 + static_cast<int>(side) * 101 + head * 13 + i) & 0xff);
}

// A payload whose every segment carries its own pattern, and token norms random f32.
std::vector<std::byte> StructuredPayload(const BlockFields& f, std::mt19937_64& rng) {
  const BlockLayout lay{f.codec, f.kind, f.layer_count, f.kv_heads, f.head_dim, f.token_count};
  std::vector<std::byte> p(lay.payload_bytes());
  std::uniform_real_distribution<float> norm(0.5f, 40.0f);
  for (int l = 0; l < f.layer_count; ++l) {
    if (lay.has_token_norms()) {
      for (int t = 0; t < f.token_count; ++t) {
        const float v = norm(rng);
        std::memcpy(p.data() + lay.TokenNormsOffset(l) + 4 * t, &v, 4);
      }
    }
    for (KvSide side : {KvSide::kK, KvSide::kV}) {
      for (int h = 0; h < f.kv_heads; ++h) {
        const size_t off = lay.SegmentOffset(l, side, h);
        for (size_t i = 0; i < lay.segment_bytes(side); ++i) p[off + i] = SegmentByte(l, side, h, i);
      }
    }
  }
  return p;
}

std::vector<std::byte> ValidBlock(const BlockFields& f) {
  std::mt19937_64 rng(99);
  auto block = SerializeBlock(f, StructuredPayload(f, rng));
  CHECK_OK(block.status());
  return *std::move(block);
}

// Applies `mutate` to the header of `block` and re-seals the header checksum: a well-checksummed
// but malformed header, as a buggy writer would produce.
std::vector<std::byte> Resealed(std::vector<std::byte> block,
                                const std::function<void(BlockHeader&)>& mutate) {
  BlockHeader h;
  std::memcpy(&h, block.data(), sizeof(h));
  mutate(h);
  h.header_checksum = HeaderChecksum(h);
  std::memcpy(block.data(), &h, sizeof(h));
  return block;
}

TEST(Block, RoundTripEveryCodecKindAndHeadDim) {
  for (CodecId codec : kAllCodecs) {
    for (BlockKind kind : {BlockKind::kBf16, BlockKind::kQuantized}) {
      for (int d : {64, 128}) {
        SCOPED_TRACE(testing::Message() << "codec " << static_cast<int>(codec) << " kind "
                                        << static_cast<int>(kind) << " D" << d);
        const BlockFields f = Fields(codec, kind, d);
        std::mt19937_64 rng(static_cast<uint64_t>(codec) * 4 + d);
        const std::vector<std::byte> payload = StructuredPayload(f, rng);
        auto bytes = SerializeBlock(f, payload);
        ASSERT_TRUE(bytes.ok()) << bytes.status();
        ASSERT_EQ(bytes->size(), 128 + PayloadBytes(codec, kind, 2, 2, d, 64));
        auto view = ParseBlock(*bytes, BlockExpectations{f.model_fingerprint, f.calib_fingerprint,
                                                         codec, 64, f.key});
        ASSERT_TRUE(view.ok()) << view.status();
        const BlockHeader& h = view->header;
        EXPECT_EQ(h.magic, kBlockMagic);
        EXPECT_EQ(h.version, kFormatVersion);
        EXPECT_EQ(h.codec, static_cast<uint16_t>(codec));
        EXPECT_EQ(h.block_kind, static_cast<uint8_t>(kind));
        EXPECT_EQ(h.model_fingerprint, f.model_fingerprint);
        EXPECT_EQ(h.calib_fingerprint, f.calib_fingerprint);
        EXPECT_EQ(h.first_position, 128u);
        EXPECT_EQ(h.token_count, 64);
        EXPECT_EQ(h.layer_count, 2);
        EXPECT_EQ(h.kv_heads, 2);
        EXPECT_EQ(h.head_dim, d);
        EXPECT_EQ(h.key, f.key);
        EXPECT_EQ(h.prev_key, f.prev_key);
        EXPECT_EQ(h.payload_bytes, payload.size());
        ASSERT_EQ(view->payload.size(), payload.size());
        EXPECT_EQ(view->payload.data(), bytes->data() + 128) << "view points into the input";
        EXPECT_EQ(std::memcmp(view->payload.data(), payload.data(), payload.size()), 0);
        // Segments read back through the parsed header's layout carry their own pattern.
        const BlockLayout lay = BlockLayout::Of(h);
        for (int l = 0; l < 2; ++l) {
          for (KvSide side : {KvSide::kK, KvSide::kV}) {
            for (int head = 0; head < 2; ++head) {
              const size_t off = lay.SegmentOffset(l, side, head);
              const size_t n = lay.segment_bytes(side);
              ASSERT_LE(off + n, view->payload.size());
              EXPECT_EQ(view->payload[off], SegmentByte(l, side, head, 0));
              EXPECT_EQ(view->payload[off + n - 1], SegmentByte(l, side, head, n - 1));
            }
          }
        }
        EXPECT_TRUE(VerifyPayloadChecksum(h, view->payload).ok());
      }
    }
  }
}

TEST(Block, HeaderBytesAreLittleEndianAtDocumentedOffsets) {
  const BlockFields f = Fields(CodecId::kKivi2, BlockKind::kQuantized, 128, 3, 4, 64);
  const auto b = ValidBlock(f);
  auto u = [&](size_t off, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(b[off + i]) << (8 * i);
    return v;
  };
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data()), 4), "OKVB");
  EXPECT_EQ(u(4, 2), kFormatVersion);
  EXPECT_EQ(u(6, 2), 7u);
  EXPECT_EQ(u(8, 8), f.model_fingerprint);
  EXPECT_EQ(u(16, 8), f.calib_fingerprint);
  EXPECT_EQ(u(24, 4), 128u);
  EXPECT_EQ(u(28, 2), 64u);
  EXPECT_EQ(u(30, 2), 3u);
  EXPECT_EQ(u(32, 2), 4u);
  EXPECT_EQ(u(34, 2), 128u);
  EXPECT_EQ(u(36, 1), 1u);
  EXPECT_EQ(u(37, 3), 0u);
  EXPECT_EQ(u(40, 8), f.key.lo);
  EXPECT_EQ(u(48, 8), f.key.hi);
  EXPECT_EQ(u(56, 8), f.prev_key.lo);
  EXPECT_EQ(u(64, 8), f.prev_key.hi);
  EXPECT_EQ(u(72, 8), b.size() - 128);
  EXPECT_EQ(u(80, 8), PayloadChecksum(std::span(b).subspan(128)));
  for (size_t i = 88; i < 120; ++i) EXPECT_EQ(u(i, 1), 0u);
  BlockHeader h;
  std::memcpy(&h, b.data(), 128);
  EXPECT_EQ(u(120, 8), HeaderChecksum(h));
}

TEST(Block, TruncatedHeaderAtEveryLengthIsDataLoss) {
  const auto b = ValidBlock(Fields(CodecId::kOscar, BlockKind::kQuantized, 64));
  for (size_t n = 0; n < 128; ++n) {
    // Copy to an exact-size buffer so a sanitizer would catch any read past the end.
    const std::vector<std::byte> prefix(b.begin(), b.begin() + n);
    auto r = ParseBlock(prefix);
    ASSERT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << n << ": " << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr("header"));
    EXPECT_EQ(ParseBlockHeader(prefix).status().code(), absl::StatusCode::kDataLoss);
  }
}

TEST(Block, TruncatedPayloadIsDataLoss) {
  const auto b = ValidBlock(Fields(CodecId::kOscarTns, BlockKind::kQuantized, 128));
  for (size_t n : {size_t{128}, size_t{129}, size_t{200}, b.size() / 2, b.size() - 2,
                   b.size() - 1}) {
    const std::vector<std::byte> prefix(b.begin(), b.begin() + n);
    auto r = ParseBlock(prefix);
    ASSERT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << n << ": " << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr("truncated"));
    // The header alone is fine: it can be parsed before the payload arrives.
    EXPECT_TRUE(ParseBlockHeader(prefix).ok());
  }
}

TEST(Block, TrailingBytesAreInvalidArgument) {
  for (size_t extra : {1, 7, 4096}) {
    auto b = ValidBlock(Fields(CodecId::kOscar, BlockKind::kBf16, 64));
    b.resize(b.size() + extra, std::byte{0});
    auto r = ParseBlock(b);
    ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr("trailing"));
  }
}

TEST(Block, WrongMagicIsInvalidArgument) {
  auto b = ValidBlock(Fields(CodecId::kOscar, BlockKind::kQuantized, 64));
  b[0] ^= std::byte{0x01};
  auto r = ParseBlock(b);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("magic"));
}

TEST(Block, NewerVersionIsUnimplementedAndZeroIsInvalid) {
  const auto b = ValidBlock(Fields(CodecId::kOscar, BlockKind::kQuantized, 64));
  // A newer writer's block: the header checksum is that version's business, so not checked.
  auto newer = b;
  newer[4] = std::byte{2};
  auto r = ParseBlock(newer);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kUnimplemented) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("version 2"));
  auto resealed = Resealed(b, [](BlockHeader& h) { h.version = 0x0100; });
  EXPECT_EQ(ParseBlock(resealed).status().code(), absl::StatusCode::kUnimplemented);
  auto zero = Resealed(b, [](BlockHeader& h) { h.version = 0; });
  r = ParseBlock(zero);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("version 0"));
}

TEST(Block, EveryHeaderBitFlipIsRejected) {
  const auto b = ValidBlock(Fields(CodecId::kOscar, BlockKind::kQuantized, 64));
  for (size_t byte = 0; byte < 128; ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      auto c = b;
      c[byte] ^= static_cast<std::byte>(1 << bit);
      auto r = ParseBlock(c);
      ASSERT_FALSE(r.ok()) << "byte " << byte << " bit " << bit;
      if (byte >= 6) {
        EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << byte;
        EXPECT_THAT(r.status().message(), HasSubstr("header_checksum"));
      }
    }
  }
}

TEST(Block, PayloadByteFlipIsDataLoss) {
  const auto b = ValidBlock(Fields(CodecId::kKivi2, BlockKind::kQuantized, 128));
  for (size_t pos : {size_t{128}, size_t{129}, b.size() / 2, b.size() - 1}) {
    auto c = b;
    c[pos] ^= std::byte{0x80};
    auto r = ParseBlock(c);
    ASSERT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << pos;
    EXPECT_THAT(r.status().message(), HasSubstr("payload_checksum"));
  }
}

struct MalformedCase {
  const char* name;
  std::function<void(BlockHeader&)> mutate;
  const char* message;  // expected in the status message
};

TEST(Block, MalformedButChecksummedHeadersAreInvalidArgument) {
  const std::vector<MalformedCase> cases = {
      {"codec 9", [](BlockHeader& h) { h.codec = 9; }, "codec id 9"},
      {"codec 0xffff", [](BlockHeader& h) { h.codec = 0xffff; }, "codec id 65535"},
      {"block kind 2", [](BlockHeader& h) { h.block_kind = 2; }, "block_kind 2"},
      {"reserved0", [](BlockHeader& h) { h.reserved0[2] = 1; }, "reserved0"},
      {"reserved1", [](BlockHeader& h) { h.reserved1[31] = 0x40; }, "reserved1"},
      {"token_count 0", [](BlockHeader& h) { h.token_count = 0; }, "token_count is 0"},
      {"layer_count 0", [](BlockHeader& h) { h.layer_count = 0; }, "layer_count is 0"},
      {"kv_heads 0", [](BlockHeader& h) { h.kv_heads = 0; }, "kv_heads is 0"},
      {"head_dim 0", [](BlockHeader& h) { h.head_dim = 0; }, "head_dim is 0"},
      {"head_dim 48", [](BlockHeader& h) { h.head_dim = 48; }, "head_dim 48 is not a multiple"},
      {"token_count 48 (channel groups)", [](BlockHeader& h) { h.token_count = 48; },
       "token_count 48 is not a multiple of 32"},
      {"payload_bytes + 1", [](BlockHeader& h) { h.payload_bytes += 1; }, "payload_bytes is"},
      {"payload_bytes - 4", [](BlockHeader& h) { h.payload_bytes -= 4; }, "payload_bytes is"},
      {"payload_bytes huge", [](BlockHeader& h) { h.payload_bytes = ~uint64_t{0}; },
       "payload_bytes is"},
      {"first_position overflow", [](BlockHeader& h) { h.first_position = 0xffffffe0u; },
       "first_position"},
      {"huge shape", [](BlockHeader& h) {
         h.layer_count = h.kv_heads = h.token_count = 65535 - 31;
         h.head_dim = 65535 - 31;
       }, "payload_bytes is"},
  };
  const auto b = ValidBlock(Fields(CodecId::kOscarTns, BlockKind::kQuantized, 64));
  for (const auto& c : cases) {
    auto r = ParseBlock(Resealed(b, c.mutate));
    ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.name << ": " << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr(c.message)) << c.name;
  }
  // Odd head_dim only reaches its own check where INT2 does not apply first.
  const auto bf = ValidBlock(Fields(CodecId::kBf16, BlockKind::kQuantized, 64));
  auto r = ParseBlock(Resealed(bf, [](BlockHeader& h) { h.head_dim = 65; }));
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("head_dim 65 is odd"));
  // BF16 blocks of INT2 codecs take any even head_dim and any token count.
  BlockFields f = Fields(CodecId::kOscarTns, BlockKind::kBf16, 80, 1, 1, 17);
  std::vector<std::byte> payload(PayloadBytes(f.codec, f.kind, 1, 1, 80, 17));
  EXPECT_TRUE(ParseBlock(*SerializeBlock(f, payload)).ok());
}

TEST(Block, ExpectationMismatchIsFailedPrecondition) {
  const BlockFields f = Fields(CodecId::kOscar, BlockKind::kQuantized, 128);
  const auto b = ValidBlock(f);
  struct Case {
    const char* name;
    BlockExpectations expect;
    const char* message;
  };
  std::vector<Case> cases(5);
  cases[0] = {"model", {}, "model_fingerprint"};
  cases[0].expect.model_fingerprint = f.model_fingerprint + 1;
  cases[1] = {"calib", {}, "calib_fingerprint"};
  cases[1].expect.calib_fingerprint = 0;
  cases[2] = {"codec", {}, "codec is 6; expected 8"};
  cases[2].expect.codec = CodecId::kOscarTns;
  cases[3] = {"tokens", {}, "token_count is 64; expected 32"};
  cases[3].expect.token_count = 32;
  cases[4] = {"key", {}, "key is"};
  cases[4].expect.key = BlockKey{1, 2};
  for (const auto& c : cases) {
    auto r = ParseBlock(b, c.expect);
    ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << c.name;
    EXPECT_THAT(r.status().message(), HasSubstr(c.message)) << c.name;
  }
  BlockExpectations all;
  all.model_fingerprint = f.model_fingerprint;
  all.calib_fingerprint = f.calib_fingerprint;
  all.codec = f.codec;
  all.token_count = 64;
  all.key = f.key;
  EXPECT_TRUE(ParseBlock(b, all).ok());
}

TEST(Block, VerifyPayloadChecksumAloneDetectsCorruption) {
  const auto b = ValidBlock(Fields(CodecId::kOscarGram, BlockKind::kQuantized, 64));
  auto header = ParseBlockHeader(b);
  ASSERT_TRUE(header.ok());
  std::vector<std::byte> payload(b.begin() + 128, b.end());
  EXPECT_TRUE(VerifyPayloadChecksum(*header, payload).ok());
  payload[payload.size() / 3] ^= std::byte{4};
  EXPECT_EQ(VerifyPayloadChecksum(*header, payload).code(), absl::StatusCode::kDataLoss);
  payload.pop_back();
  EXPECT_EQ(VerifyPayloadChecksum(*header, payload).code(), absl::StatusCode::kDataLoss);
}

TEST(Block, WriterRejectsBadFieldsAndPayloadSize) {
  BlockFields f = Fields(CodecId::kOscar, BlockKind::kQuantized, 64);
  std::vector<std::byte> payload(PayloadBytes(f.codec, f.kind, 2, 2, 64, 64));
  EXPECT_TRUE(MakeBlockHeader(f, payload).ok());
  payload.push_back(std::byte{0});
  EXPECT_EQ(MakeBlockHeader(f, payload).status().code(), absl::StatusCode::kInvalidArgument);
  payload.pop_back();
  f.head_dim = 96 + 16;
  EXPECT_EQ(SerializeBlock(f, payload).status().code(), absl::StatusCode::kInvalidArgument);
  f.head_dim = 64;
  f.token_count = 70000;
  EXPECT_EQ(ValidateBlockFields(f).code(), absl::StatusCode::kInvalidArgument);
  f.token_count = 64;
  f.codec = static_cast<CodecId>(12);
  EXPECT_EQ(ValidateBlockFields(f).code(), absl::StatusCode::kInvalidArgument);
}

TEST(Block, RandomCorruptionIsNeverAccepted) {
  std::mt19937_64 rng(0x0c0ffee);
  std::vector<std::vector<std::byte>> blocks;
  for (CodecId c : {CodecId::kOscar, CodecId::kKivi2, CodecId::kOscarTns, CodecId::kBf16}) {
    blocks.push_back(ValidBlock(Fields(c, BlockKind::kQuantized, 64, 1, 1, 64)));
  }
  blocks.push_back(ValidBlock(Fields(CodecId::kOscar, BlockKind::kBf16, 64, 1, 2, 32)));
  int rejected = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    const auto& orig = blocks[rng() % blocks.size()];
    std::vector<std::byte> c = orig;
    switch (rng() % 6) {
      case 0:  // 1..8 random bit flips anywhere
      case 1: {
        const int flips = 1 + static_cast<int>(rng() % 8);
        for (int i = 0; i < flips; ++i) c[rng() % c.size()] ^= static_cast<std::byte>(1 << (rng() % 8));
        break;
      }
      case 2:  // random bytes overwritten inside the header
        for (int i = 0; i < 1 + static_cast<int>(rng() % 4); ++i) c[rng() % 128] = static_cast<std::byte>(rng());
        break;
      case 3:  // truncated at a random length
        c.resize(rng() % c.size());
        break;
      case 4:  // trailing garbage
        for (int i = 0, n = 1 + static_cast<int>(rng() % 64); i < n; ++i) c.push_back(static_cast<std::byte>(rng()));
        break;
      case 5: {  // another block's header on this payload, or a splice of two blocks
        const auto& other = blocks[rng() % blocks.size()];
        const size_t cut = rng() % std::min(c.size(), other.size());
        std::vector<std::byte> s(other.begin(), other.begin() + cut);
        s.insert(s.end(), c.begin() + cut, c.end());
        c = std::move(s);
        break;
      }
    }
    if (c == orig) continue;  // flips that cancelled out, or a splice of identical prefixes
    const std::vector<std::byte> exact(c.begin(), c.end());  // exact size: OOB reads show in ASan
    auto r = ParseBlock(exact);
    ASSERT_FALSE(r.ok()) << "iteration " << iter << " accepted a corrupted block";
    ++rejected;
  }
  EXPECT_GT(rejected, 19000);
}

TEST(Block, RandomResealedHeadersNeverReadOutOfBounds) {
  // Well-checksummed headers with random field values: parsing may accept or reject, but an
  // accepted block's payload must be exactly the bytes after the header.
  std::mt19937_64 rng(4242);
  const auto b = ValidBlock(Fields(CodecId::kOscar, BlockKind::kQuantized, 64, 1, 1, 64));
  int accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    auto c = Resealed(b, [&](BlockHeader& h) {
      h.codec = static_cast<uint16_t>(rng() % 11);
      h.block_kind = static_cast<uint8_t>(rng() % 3);
      const uint16_t small[] = {0, 1, 2, 17, 32, 48, 64, 65, 128};
      h.token_count = small[rng() % 9];
      h.layer_count = small[rng() % 4];
      h.kv_heads = small[rng() % 4];
      h.head_dim = small[rng() % 9];
      h.payload_bytes = rng() % 2 ? rng() : PayloadBytes(static_cast<CodecId>(h.codec % 9),
                                                         static_cast<BlockKind>(h.block_kind % 2),
                                                         h.layer_count, h.kv_heads, h.head_dim,
                                                         h.token_count);
    });
    BlockHeader h;
    std::memcpy(&h, c.data(), 128);
    if (h.payload_bytes < (1u << 20)) c.resize(128 + h.payload_bytes, std::byte{0});
    // Re-seal the payload checksum too, so acceptance depends only on the header checks.
    h.payload_checksum = PayloadChecksum(std::span(c).subspan(128));
    h.header_checksum = HeaderChecksum(h);
    std::memcpy(c.data(), &h, 128);
    const std::vector<std::byte> exact(c.begin(), c.end());
    auto r = ParseBlock(exact);
    if (!r.ok()) continue;
    ++accepted;
    ASSERT_LT(h.codec, 9);
    ASSERT_LT(h.block_kind, 2);
    ASSERT_EQ(r->payload.size(), PayloadBytes(static_cast<CodecId>(h.codec),
                                              static_cast<BlockKind>(h.block_kind), h.layer_count,
                                              h.kv_heads, h.head_dim, h.token_count));
    ASSERT_EQ(r->payload.data(), exact.data() + 128);
    ASSERT_EQ(exact.size(), 128 + r->payload.size());
  }
  EXPECT_GT(accepted, 100);  // the loop exercises the accepting path too
}

}  // namespace
}  // namespace oscarkv::kvformat

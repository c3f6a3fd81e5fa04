#include "lib/model_gpu/block_import.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/attention/decode_attention.h"
#include "lib/kvformat/block_layout.h"
#include "lib/kvformat/float16.h"
#include "lib/base/status_macros.h"
#include "lib/quant/three_tier_cache.h"

namespace oscarkv::model_gpu {
namespace {

using kvformat::BlockKind;
using kvformat::KvSide;

// Where token `pos` of a sequence of `n` tokens lives: tier, page index within the tier's pages
// (PackedKvLayout order), row in the page.
struct Place {
  bool int2 = false;
  int64_t page = 0;
  int row = 0;
};

Place PlaceOf(const KvPageTableConfig& c, int64_t n, int64_t pos) {
  if (!c.windowed || pos < c.sink_tokens) return {false, pos / kPageTokens, int(pos % kPageTokens)};
  // PagesHeld's split: the 8-aligned history after the sink, then the recent window.
  const int64_t int2_tokens =
      std::max<int64_t>(0, n - c.sink_tokens - c.recent_tokens) / kPageTokens * kPageTokens;
  const int64_t h = pos - c.sink_tokens;
  if (h < int2_tokens) return {true, h / kPageTokens, int(h % kPageTokens)};
  const int64_t r = h - int2_tokens;
  return {false, c.sink_tokens / kPageTokens + r / kPageTokens, int(r % kPageTokens)};
}

// The page unit of (layer, head) that holds `at`.
template <typename Byte>
Byte* UnitOf(const KvPageTableConfig& c, const PackedKvLayout& layout, Byte* base, int layer,
             int head, const Place& at) {
  const int d = c.head_dim, hkv = c.num_kv_heads;
  if (at.int2) {
    return base + layout.bf16_bytes() +
           ((int64_t{layer} * layout.int2_pages + at.page) * hkv + head) *
               kernels::Int2PageUnitBytes(d);
  }
  return base + ((int64_t{layer} * layout.bf16_pages + at.page) * hkv + head) *
                    kernels::Bf16PageUnitBytes(d);
}

}  // namespace

absl::StatusOr<KvPageTableConfig> GpuPageShape(const model::ModelConfig& config,
                                               const quant::CodecSpec& spec) {
  const bool all_bf16 = spec.id == kvformat::CodecId::kBf16;
  const bool windowed = spec.sink_tokens > 0 && spec.residual_tokens == 0 &&
                        spec.k_segment == kvformat::SegmentKind::kInt2PerToken &&
                        !spec.token_norms;
  if (!all_bf16 && !windowed) {
    return absl::UnimplementedError(absl::StrCat(
        "codec ", std::string(spec.name), " has no GPU path yet (GPU codecs: bf16, oscar, ",
        "oscar-gram, oscar-hadamard, oscar-norot)"));
  }
  if (config.head_dim != 64 && config.head_dim != 128) {
    return absl::UnimplementedError(
        absl::StrCat("the GPU kernels serve head_dim 64 and 128, not ", config.head_dim));
  }
  KvPageTableConfig c;
  c.num_layers = config.num_layers;
  c.num_kv_heads = config.num_kv_heads;
  c.head_dim = config.head_dim;
  c.windowed = windowed;
  if (windowed) {
    c.sink_tokens = spec.sink_tokens;
    c.recent_tokens = spec.recent_tokens;
  }
  return c;
}

ClipRatios EffectiveClipRatios(const quant::ThreeTierCacheConfig& tiers) {
  const quant::CodecSpec& spec = quant::GetCodecSpec(tiers.codec);
  return {tiers.k_clip_ratio > 0 ? tiers.k_clip_ratio : spec.k_clip_ratio,
          tiers.v_clip_ratio > 0 ? tiers.v_clip_ratio : spec.v_clip_ratio};
}

absl::StatusOr<PackedKv> PackedKvFromBlocks(const KvPageTableConfig& shape,
                                            kvformat::CodecId codec, float k_clip, float v_clip,
                                            std::span<const kvformat::BlockView> blocks) {
  const int d = shape.head_dim, hkv = shape.num_kv_heads;
  int64_t n = 0;
  for (size_t b = 0; b < blocks.size(); ++b) {
    const kvformat::BlockHeader& h = blocks[b].header;
    if (h.codec != static_cast<uint16_t>(codec)) {
      return absl::FailedPreconditionError(absl::StrCat("block ", b, " is for another codec"));
    }
    if (h.first_position != n || h.layer_count != shape.num_layers || h.kv_heads != hkv ||
        h.head_dim != d) {
      return absl::InvalidArgumentError(absl::StrCat("block ", b, " starts at ", h.first_position,
                                                     ", expected ", n, " (or bad shape)"));
    }
    n += h.token_count;
  }
  if (n == 0) return absl::InvalidArgumentError("no tokens in the blocks");
  PackedKv out;
  out.layout = PackedLayoutFor(shape, n);
  out.bytes.assign(static_cast<size_t>(out.layout.bytes()), std::byte{0});
  auto* base = reinterpret_cast<uint8_t*>(out.bytes.data());
  const int64_t code_bytes = d / 4;
  std::vector<float> row(d);
  for (const kvformat::BlockView& block : blocks) {
    const kvformat::BlockHeader& h = block.header;
    const kvformat::BlockLayout layout = kvformat::BlockLayout::Of(h);
    const auto* payload = reinterpret_cast<const uint8_t*>(block.payload.data());
    const bool bf16_rows =
        codec == kvformat::CodecId::kBf16 || h.block_kind == static_cast<uint8_t>(BlockKind::kBf16);
    for (int r = 0; r < h.token_count; ++r) {
      const int64_t pos = int64_t{h.first_position} + r;
      const Place at = PlaceOf(shape, n, pos);
      if (!bf16_rows && !at.int2) {
        return absl::FailedPreconditionError(absl::StrCat(
            "token ", pos, " arrives quantised but the windows of ", n, " tokens keep it BF16"));
      }
      for (int l = 0; l < shape.num_layers; ++l) {
        for (int head = 0; head < hkv; ++head) {
          uint8_t* unit = UnitOf(shape, out.layout, base, l, head, at);
          for (const KvSide side : {KvSide::kK, KvSide::kV}) {
            const bool k = side == KvSide::kK;
            if (!at.int2) {  // a bf16 row into a BF16 page unit
              std::memcpy(unit + (k ? kernels::Bf16PageKOffset(d) : kernels::Bf16PageVOffset(d)) +
                              int64_t{at.row} * d * 2,
                          payload + layout.CodesOffset(l, side, head) + int64_t{r} * d * 2, d * 2);
              continue;
            }
            uint8_t* codes = unit + (k ? kernels::Int2PageKCodesOffset(d)
                                       : kernels::Int2PageVCodesOffset(d)) +
                             at.row * code_bytes;
            uint8_t* params = unit + (k ? kernels::Int2PageKParamsOffset(d)
                                        : kernels::Int2PageVParamsOffset(d)) +
                              at.row * sizeof(kvformat::Int2Params);
            if (bf16_rows) {  // the demotion the CPU cache would do
              const auto* bits = reinterpret_cast<const uint16_t*>(
                  payload + layout.CodesOffset(l, side, head) + int64_t{r} * d * 2);
              for (int i = 0; i < d; ++i) row[i] = kvformat::Bf16BitsToFloat(bits[i]);
              kvformat::Int2Params p;
              quant::EncodePerTokenRow(row.data(), d, k ? k_clip : v_clip, codes, &p);
              std::memcpy(params, &p, sizeof(p));
            } else {  // per-token codes as they are
              std::memcpy(codes, payload + layout.CodesOffset(l, side, head) + r * code_bytes,
                          code_bytes);
              std::memcpy(params,
                          payload + layout.ParamsOffset(l, side, head) +
                              r * sizeof(kvformat::Int2Params),
                          sizeof(kvformat::Int2Params));
            }
          }
        }
      }
    }
  }
  return out;
}

kvformat::BlockKind CutBlockKind(const BlockCutSpec& cut, int64_t b) {
  const bool quantised = cut.codec != kvformat::CodecId::kBf16 &&
                         b * cut.block_tokens >= cut.sink_tokens &&
                         b < cut.reuse_boundary / cut.block_tokens;
  return quantised ? BlockKind::kQuantized : BlockKind::kBf16;
}

absl::StatusOr<std::vector<std::byte>> SerializeCutBlock(const BlockCutSpec& cut,
                                                         const KvPageTableConfig& shape, int64_t b,
                                                         int tokens,
                                                         std::span<const std::byte> payload) {
  kvformat::BlockFields fields{.codec = cut.codec,
                               .kind = CutBlockKind(cut, b),
                               .model_fingerprint = cut.model_fingerprint,
                               .calib_fingerprint = cut.calib_fingerprint,
                               .first_position = static_cast<uint32_t>(b * cut.block_tokens),
                               .token_count = tokens,
                               .layer_count = shape.num_layers,
                               .kv_heads = shape.num_kv_heads,
                               .head_dim = shape.head_dim};
  if (b < static_cast<int64_t>(cut.keys.size())) {
    fields.key = cut.keys[b];
    fields.prev_key = b == 0 ? cut.chain_seed : cut.keys[b - 1];
  }
  return kvformat::SerializeBlock(fields, payload);
}

std::string GpuNumericsTag(int major, int minor, int sms) {
  return absl::StrCat("cuda-sm", major, minor, "-", sms, "sm");
}

BlockCutSpec CutSpecFor(const engine::ServingEngine& engine, std::span<const int32_t> prompt,
                        const std::string& numerics) {
  BlockCutSpec cut;
  cut.codec = engine.codec().id;
  cut.model_fingerprint = engine.model_fingerprint();
  cut.calib_fingerprint = engine.calibration_fingerprint();
  cut.block_tokens = engine.options().block_tokens;
  cut.sink_tokens = engine.codec().sink_tokens;
  cut.reuse_boundary = engine.ReuseBoundary(static_cast<int64_t>(prompt.size()));
  kvformat::KeyChainParams params = engine.KeyParams();
  params.numerics = numerics;
  cut.keys = kvformat::ComputeBlockKeys(params, prompt.first(cut.reuse_boundary));
  cut.chain_seed = kvformat::ChainSeed(params);
  cut.clips = EffectiveClipRatios(engine.tier_config());
  return cut;
}

absl::StatusOr<std::vector<std::vector<std::byte>>> BlocksFromPackedKv(
    const KvPageTableConfig& shape, const PackedKv& packed, const TailRows& tail,
    const BlockCutSpec& cut) {
  const int d = shape.head_dim, hkv = shape.num_kv_heads, layers = shape.num_layers;
  const int64_t n = packed.layout.length;
  const int bt = cut.block_tokens;
  const int64_t kv_row = int64_t{hkv} * d;
  if (static_cast<int64_t>(packed.bytes.size()) != packed.layout.bytes() || n <= 0) {
    return absl::InvalidArgumentError("packed KV of the wrong size");
  }
  if (bt <= 0 || cut.reuse_boundary % bt != 0 || cut.reuse_boundary > n ||
      static_cast<int64_t>(cut.keys.size()) != cut.reuse_boundary / bt) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block cut: ", cut.keys.size(), " keys for a reuse boundary of ", cut.reuse_boundary,
        " tokens in blocks of ", bt));
  }
  const int64_t tail_tokens = n - tail.begin;
  if (tail.begin < 0 || tail.begin > cut.reuse_boundary ||
      static_cast<int64_t>(tail.bits.size()) != int64_t{layers} * 2 * tail_tokens * kv_row) {
    return absl::InvalidArgumentError(absl::StrCat("tail rows from ", tail.begin, " (",
                                                   tail.bits.size(), " values) do not cover [",
                                                   cut.reuse_boundary, ", ", n, ")"));
  }
  const auto* base = reinterpret_cast<const uint8_t*>(packed.bytes.data());
  const int64_t code_bytes = d / 4;
  std::vector<float> row(d);
  std::vector<std::vector<std::byte>> out;
  for (int64_t b = 0; b * bt < n; ++b) {
    const int64_t first = b * bt;
    const int tokens = static_cast<int>(std::min<int64_t>(bt, n - first));
    const BlockKind kind = CutBlockKind(cut, b);
    const bool quantised = kind == BlockKind::kQuantized;
    const kvformat::BlockLayout layout{cut.codec, kind, layers, hkv, d, tokens};
    std::vector<std::byte> payload(layout.payload_bytes());
    auto* dst = reinterpret_cast<uint8_t*>(payload.data());
    for (int r = 0; r < tokens; ++r) {
      const int64_t pos = first + r;
      const Place at = PlaceOf(shape, n, pos);
      for (int l = 0; l < layers; ++l) {
        for (int head = 0; head < hkv; ++head) {
          const uint8_t* unit = UnitOf(shape, packed.layout, base, l, head, at);
          for (const KvSide side : {KvSide::kK, KvSide::kV}) {
            const bool k = side == KvSide::kK;
            uint8_t* codes = dst + layout.CodesOffset(l, side, head);
            const auto* page_row = reinterpret_cast<const uint16_t*>(
                unit + (k ? kernels::Bf16PageKOffset(d) : kernels::Bf16PageVOffset(d)) +
                int64_t{at.row} * d * 2);
            if (quantised) {
              uint8_t* params = dst + layout.ParamsOffset(l, side, head) +
                                r * sizeof(kvformat::Int2Params);
              if (at.int2) {
                std::memcpy(codes + r * code_bytes,
                            unit + (k ? kernels::Int2PageKCodesOffset(d)
                                      : kernels::Int2PageVCodesOffset(d)) +
                                at.row * code_bytes,
                            code_bytes);
                std::memcpy(params,
                            unit + (k ? kernels::Int2PageKParamsOffset(d)
                                      : kernels::Int2PageVParamsOffset(d)) +
                                at.row * sizeof(kvformat::Int2Params),
                            sizeof(kvformat::Int2Params));
              } else {
                for (int i = 0; i < d; ++i) row[i] = kvformat::Bf16BitsToFloat(page_row[i]);
                kvformat::Int2Params p;
                quant::EncodePerTokenRow(row.data(), d, k ? cut.clips.k : cut.clips.v,
                                         codes + r * code_bytes, &p);
                std::memcpy(params, &p, sizeof(p));
              }
              continue;
            }
            const uint16_t* bits = page_row;
            if (at.int2) {
              if (pos < tail.begin) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "BF16 block ", b, " needs token ", pos, " before the tail rows"));
              }
              bits = tail.bits.data() +
                     ((int64_t{l} * 2 + (k ? 0 : 1)) * tail_tokens + (pos - tail.begin)) * kv_row +
                     int64_t{head} * d;
            }
            std::memcpy(codes + int64_t{r} * d * 2, bits, d * 2);
          }
        }
      }
    }
    OSCARKV_ASSIGN_OR_RETURN(std::vector<std::byte> bytes,
                             SerializeCutBlock(cut, shape, b, tokens, payload));
    out.push_back(std::move(bytes));
  }
  return out;
}

absl::Status ReadPackedRow(const KvPageTableConfig& shape, const PackedKv& packed, int layer,
                           KvSide side, int head, int64_t pos, float* out) {
  if (pos < 0 || pos >= packed.layout.length || layer < 0 || layer >= shape.num_layers ||
      head < 0 || head >= shape.num_kv_heads) {
    return absl::OutOfRangeError(absl::StrCat("no row at layer ", layer, " head ", head,
                                              " position ", pos));
  }
  const int d = shape.head_dim;
  const bool k = side == KvSide::kK;
  const Place at = PlaceOf(shape, packed.layout.length, pos);
  const auto* unit = UnitOf(shape, packed.layout,
                            reinterpret_cast<const uint8_t*>(packed.bytes.data()), layer, head, at);
  if (!at.int2) {
    const auto* bits = reinterpret_cast<const uint16_t*>(
        unit + (k ? kernels::Bf16PageKOffset(d) : kernels::Bf16PageVOffset(d)) +
        int64_t{at.row} * d * 2);
    for (int i = 0; i < d; ++i) out[i] = kvformat::Bf16BitsToFloat(bits[i]);
    return absl::OkStatus();
  }
  kvformat::Int2Params p;
  std::memcpy(&p,
              unit + (k ? kernels::Int2PageKParamsOffset(d) : kernels::Int2PageVParamsOffset(d)) +
                  at.row * sizeof(p),
              sizeof(p));
  quant::DecodePerTokenRow(
      unit + (k ? kernels::Int2PageKCodesOffset(d) : kernels::Int2PageVCodesOffset(d)) +
          at.row * (d / 4),
      p, d, out);
  return absl::OkStatus();
}

}  // namespace oscarkv::model_gpu

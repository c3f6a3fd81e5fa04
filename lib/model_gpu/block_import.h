// From kvformat blocks to the GPU's packed page form (issue #6: GPU decode workers). A prompt's
// blocks as ServingEngine::Prefill cuts them and the kvstore holds them (BF16 blocks of rotated
// rows for the sink and the tail past the reuse boundary, per-token INT2 history blocks in
// between) become the bytes GpuModel::AddPackedSequence admits (PackedKvLayout): no model run.
//
// The GPU's tiers follow the length (PagesHeld: the CPU cache's windows). A token lands in the
// BF16 tier as its block's bf16 row; in the INT2 tier as its block's codes and params unchanged,
// or, when it arrives as a BF16 row (the tail past the reuse boundary that the windows already
// count as history), quantised here exactly as the CPU cache does when it demotes it
// (quant::EncodePerTokenRow with the codec's clip ratios). So the GPU reads the same values the
// CPU decode cache rebuilt from the same blocks reads (tested bit for bit).
//
// And back, for GPU prefill workers: how a prompt is cut into blocks (BlockCutSpec, CutSpecFor,
// CutBlockKind, SerializeCutBlock) and the one-pass export from pages (BlocksFromPackedKv).
//
// Pure C++ (no CUDA): runs on the host of a worker; the caller moves the bytes to or from the GPU.
#ifndef OSCARKV_LIB_MODEL_GPU_BLOCK_IMPORT_H_
#define OSCARKV_LIB_MODEL_GPU_BLOCK_IMPORT_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/kvformat/block.h"
#include "lib/kvformat/block_layout.h"
#include "lib/model/model_config.h"
#include "lib/engine/serving_engine.h"
#include "lib/kvformat/block_key.h"
#include "lib/model_gpu/kv_page_table.h"
#include "lib/quant/codec_spec.h"
#include "lib/quant/three_tier_cache.h"

namespace oscarkv::model_gpu {

// The page-table shape (layers, KV heads, head_dim, tier windows) of a model and codec on the
// GPU; budget and page counts are left 0 for the caller. @return kUnimplemented for codecs
// without a GPU path (GPU codecs: bf16 and the windowed per-token INT2 family, M3-M6) or a
// head_dim other than 64 / 128.
absl::StatusOr<KvPageTableConfig> GpuPageShape(const model::ModelConfig& config,
                                               const quant::CodecSpec& spec);

// The per-row clip ratios a cache of `tiers` quantises with: the calibration's when set, else
// the codec spec's.
struct ClipRatios {
  float k = 1.0f;
  float v = 1.0f;
};
ClipRatios EffectiveClipRatios(const quant::ThreeTierCacheConfig& tiers);

struct PackedKv {
  PackedKvLayout layout;
  std::vector<std::byte> bytes;  // layout.bytes() bytes, host memory
};

// Converts ALL of a prompt's blocks, in order (already parsed and checksum-verified, e.g. by
// transfer::VerifyBlockOnArrival). `shape` from GpuPageShape; k_clip / v_clip: the codec's
// clip ratios (KvCacheFactory::tier_config() or the spec's).
// @return kInvalidArgument for blocks out of order or of another shape; kFailedPrecondition for
//   a quantised token that the windows put in the BF16 tier, or another codec's blocks.
absl::StatusOr<PackedKv> PackedKvFromBlocks(const KvPageTableConfig& shape,
                                            kvformat::CodecId codec, float k_clip, float v_clip,
                                            std::span<const kvformat::BlockView> blocks);

// Bf16 copies of the cache rows (the tier basis: rotated by R_K / R_V) of prompt tokens
// [begin, n), as bits [layers][K then V][n - begin][Hkv][D]. A GPU prefill worker needs them besides
// the pages to cut a prompt's blocks: the pages keep only INT2 for tokens that the windows already
// count as history, while the blocks past the reuse boundary carry them in BF16.
struct TailRows {
  int64_t begin = 0;            // first token copied (set by the caller)
  std::vector<uint16_t> bits;   // written by AddSequence
};

// How a prompt's blocks are cut and labelled: ServingEngine::Prefill's cut (serving_engine.h):
// block 0 is the BF16 sink, blocks wholly before the reuse boundary are stored in the codec's
// form and keyed, the rest are BF16 and unkeyed.
struct BlockCutSpec {
  kvformat::CodecId codec = kvformat::CodecId::kOscar;
  uint64_t model_fingerprint = 0;
  uint64_t calib_fingerprint = 0;
  int block_tokens = kvformat::kDefaultBlockTokens;
  int sink_tokens = 64;                  // quantised blocks start at or after the sink
  int64_t reuse_boundary = 0;            // a multiple of block_tokens
  std::vector<kvformat::BlockKey> keys;  // reuse_boundary / block_tokens chain keys
  kvformat::BlockKey chain_seed{};       // prev_key of block 0 (kvformat::ChainSeed)
  ClipRatios clips;  // for tokens of a quantised block that the pages hold in BF16
};

// Kind of block `b` of the cut: quantised for blocks of a quantising codec past the sink and
// wholly before the reuse boundary, else BF16.
kvformat::BlockKind CutBlockKind(const BlockCutSpec& cut, int64_t b);

// Serialises block `b` of the cut (first token b * block_tokens, `tokens` tokens, the model shape
// of `shape`, key and prev_key when reusable) with `payload`.
absl::StatusOr<std::vector<std::byte>> SerializeCutBlock(const BlockCutSpec& cut,
                                                         const KvPageTableConfig& shape, int64_t b,
                                                         int tokens,
                                                         std::span<const std::byte> payload);

// The cut `engine` makes of `prompt` (its ReuseBoundary, ReusableKeys, chain seed, codec,
// fingerprints and clip ratios). `numerics` (kvformat::KeyChainParams) is mixed into the keys:
// empty for KV the CPU engine computed, GpuNumericsTag for the GPU's chunked prefill.
BlockCutSpec CutSpecFor(const engine::ServingEngine& engine, std::span<const int32_t> prompt,
                        const std::string& numerics = "");

// "cuda-sm<major><minor>-<SMs>sm": the numerics tag of KV computed by GpuModel on a GPU of this
// compute capability and SM count (cuBLAS is deterministic for one GPU type and shape).
std::string GpuNumericsTag(int major, int minor, int sms);

// The reverse of PackedKvFromBlocks, for a GPU prefill worker: the prompt's packed KV
// (GpuModel::PackSequence, on the host) and `tail` (GpuModel's TailRows, from
// tail.begin <= cut.reuse_boundary) → serialised blocks, in order. A token is taken from its page
// (codes and params of an INT2 page unchanged, or the bf16 row of a BF16 page, quantised with
// quant::EncodePerTokenRow when its block is stored quantised) or, when a BF16 block needs a token
// the pages hold only in INT2, from `tail`. So PackedKvFromBlocks of the result gives back
// `packed`, and blocks cut by ServingEngine round-trip byte for byte.
// @return kInvalidArgument when `tail` does not cover what the BF16 blocks need, or for keys /
//   sizes that do not match; errors of kvformat::SerializeBlock.
absl::StatusOr<std::vector<std::vector<std::byte>>> BlocksFromPackedKv(
    const KvPageTableConfig& shape, const PackedKv& packed, const TailRows& tail,
    const BlockCutSpec& cut);

// The row attention reads for token `pos` of `packed` (layer, K or V, KV head), in the rotated
// basis: a BF16 row widened, or an INT2 row dequantised (quant::DecodePerTokenRow). out: [D].
// For tests and debugging. @return kOutOfRange for a bad position, layer or head.
absl::Status ReadPackedRow(const KvPageTableConfig& shape, const PackedKv& packed, int layer,
                           kvformat::KvSide side, int head, int64_t pos, float* out);

}  // namespace oscarkv::model_gpu

#endif  // OSCARKV_LIB_MODEL_GPU_BLOCK_IMPORT_H_

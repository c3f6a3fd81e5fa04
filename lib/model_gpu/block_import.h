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
// Pure C++ (no CUDA): runs on the host of a decode worker; the caller copies the bytes to the GPU.
#ifndef OSCARKV_LIB_MODEL_GPU_BLOCK_IMPORT_H_
#define OSCARKV_LIB_MODEL_GPU_BLOCK_IMPORT_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/kvformat/block.h"
#include "lib/kvformat/block_layout.h"
#include "lib/model/model_config.h"
#include "lib/model_gpu/kv_page_table.h"
#include "lib/quant/codec_spec.h"

namespace oscarkv::model_gpu {

// The page-table shape (layers, KV heads, head_dim, tier windows) of a model and codec on the
// GPU; budget and page counts are left 0 for the caller. @return kUnimplemented for codecs
// without a GPU path (GPU codecs: bf16 and the windowed per-token INT2 family, M3-M6) or a
// head_dim other than 64 / 128.
absl::StatusOr<KvPageTableConfig> GpuPageShape(const model::ModelConfig& config,
                                               const quant::CodecSpec& spec);

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

// The row attention reads for token `pos` of `packed` (layer, K or V, KV head), in the rotated
// basis: a BF16 row widened, or an INT2 row dequantised (quant::DecodePerTokenRow). out: [D].
// For tests and debugging. @return kOutOfRange for a bad position, layer or head.
absl::Status ReadPackedRow(const KvPageTableConfig& shape, const PackedKv& packed, int layer,
                           kvformat::KvSide side, int head, int64_t pos, float* out);

}  // namespace oscarkv::model_gpu

#endif  // OSCARKV_LIB_MODEL_GPU_BLOCK_IMPORT_H_

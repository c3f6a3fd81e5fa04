// GpuModel::PrefillChunked: ServingEngine's chunked prefill over a stored prefix
// (lib/engine/serving_engine.h), on the GPU, for prefill workers that share the kvstore.
//
// The prompt runs in chunks of chunk_tokens (positions fixed by the chunk grid, so every chunk
// before a prompt's last is full and has the same shapes in every prompt). Each chunk's queries
// attend, causally, to the chunk's own K/V and to every earlier token's *stored form*:
//   * a token of the codec's sink, or any token of codec bf16: its bf16 row in the tier basis
//     (rotated by R_K / R_V), widened;
//   * any other token: that bf16 row quantised per token (the codes its block stores) and
//     dequantised;
// rotated back to the model's basis (R^T), since attention runs there. A reused block is turned
// into the stored form by the same kernels from the same bytes, so a prefix hit changes work,
// never output, between GPU workers of one kind (cuBLAS is deterministic for one GPU type and
// shape). The KV differs from the CPU engine's in the low bits (bf16 activations), which is why
// GPU keys carry a numerics tag (BlockCutSpec::keys from CutSpecFor with GpuNumericsTag).
//
// Device buffers (grown on demand, kept between calls): the stored form [L][K,V][n][Hkv*D] f32,
// the quantised blocks' payloads, and the bf16 rows of the BF16 blocks' tokens.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "kernels/model/model_kernels_cuda.h"
#include "kernels/quant/int2_dequant_cuda.h"
#include "kernels/quant/kv_quant_cuda.h"
#include "lib/base/status_macros.h"
#include "lib/kvformat/block_layout.h"
#include "lib/model_gpu/gpu_model.h"
#include "lib/model_gpu/widen_bf16.h"

namespace oscarkv::model_gpu {
namespace {

namespace k = ::oscarkv::kernels;
using kvformat::BlockKind;
using kvformat::KvSide;

// Which prompt tokens are kept as bf16 rows (those of BF16 blocks), and where.
struct Bf16Rows {
  bool all = false;      // codec bf16: every token
  int64_t sink = 0;      // tokens [0, sink)
  int64_t tail_begin = 0;  // and [tail_begin, n)
  int64_t count = 0;
  // Index of `pos` in the rows, or -1.
  int64_t IndexOf(int64_t pos) const {
    if (all || pos < sink) return pos;
    return pos >= tail_begin ? sink + (pos - tail_begin) : -1;
  }
};

absl::Status Grow(DeviceBuffer& buffer, size_t bytes, const char* what) {
  if (buffer.bytes() >= bytes) return absl::OkStatus();
  return buffer.Allocate(bytes, what);
}

}  // namespace

absl::StatusOr<ChunkedPrefillResult> GpuModel::PrefillChunked(
    std::span<const int32_t> prompt, const BlockCutSpec& cut, int chunk_tokens,
    std::span<const kvformat::BlockView> reused, int prompt_logprobs,
    const engine::PrefillStopCheck* stop_check) {
  const auto t_start = std::chrono::steady_clock::now();
  const model::ModelConfig& c = config_;
  const int d = c.head_dim, hq = c.num_heads, hkv = c.num_kv_heads, layers = c.num_layers;
  const int64_t dm = c.d_model, qdim = int64_t{hq} * d, kvdim = int64_t{hkv} * d;
  const int64_t qkvdim = qdim + 2 * kvdim;
  const int64_t n = static_cast<int64_t>(prompt.size());
  const int bt = cut.block_tokens;
  const KvPageTableConfig& shape = pages_.config();
  OSCARKV_RETURN_IF_ERROR(CheckPrompt(prompt));
  if (bt <= 0 || chunk_tokens <= 0 || chunk_tokens % bt != 0 ||
      chunk_tokens > options_.max_prompt_tokens || cut.reuse_boundary % chunk_tokens != 0 ||
      cut.sink_tokens % bt != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunked prefill: chunk ", chunk_tokens, ", block ", bt, ", reuse boundary ",
        cut.reuse_boundary, " and sink ", cut.sink_tokens, " do not fit together"));
  }
  if (prompt_logprobs > engine::kMaxTopLogprobs || (prompt_logprobs >= 0 && !reused.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunked prefill: prompt_logprobs ", prompt_logprobs, " must be in [0, ",
        engine::kMaxTopLogprobs, "] and comes without reused blocks (", reused.size(), " given)"));
  }
  const bool quantising = cut.codec != kvformat::CodecId::kBf16;

  // Reused blocks: a leading run that belongs to this prompt, cut to a chunk boundary.
  int64_t use = 0;
  const int64_t reusable_blocks = cut.reuse_boundary / bt;
  while (use < static_cast<int64_t>(reused.size()) && use < reusable_blocks) {
    const kvformat::BlockHeader& h = reused[use].header;
    if (!(h.key == cut.keys[use]) || h.codec != static_cast<uint16_t>(cut.codec) ||
        h.block_kind != static_cast<uint8_t>(CutBlockKind(cut, use)) ||
        h.model_fingerprint != cut.model_fingerprint ||
        h.calib_fingerprint != cut.calib_fingerprint ||
        h.first_position != static_cast<uint32_t>(use * bt) || h.token_count != bt ||
        h.layer_count != layers || h.kv_heads != hkv || h.head_dim != d) {
      return absl::FailedPreconditionError(
          absl::StrCat("reused block ", use, " does not belong to this prompt/engine"));
    }
    ++use;
  }
  const int64_t reused_tokens = use * bt / chunk_tokens * chunk_tokens;
  use = reused_tokens / bt;

  // Layout of the outputs.
  const int64_t num_blocks = (n + bt - 1) / bt;
  std::vector<int64_t> payload_offset(num_blocks, -1);  // quantised blocks, in chunk_payload_
  int64_t payload_bytes = 0;
  for (int64_t b = 0; b < num_blocks; ++b) {
    if (CutBlockKind(cut, b) != BlockKind::kQuantized) continue;
    payload_offset[b] = payload_bytes;
    payload_bytes += static_cast<int64_t>(
        kvformat::BlockLayout{cut.codec, BlockKind::kQuantized, layers, hkv, d, bt}
            .payload_bytes());
  }
  Bf16Rows rows16;
  rows16.all = !quantising;
  rows16.sink = std::min<int64_t>(cut.sink_tokens, n);
  rows16.tail_begin = std::max<int64_t>(cut.reuse_boundary, cut.sink_tokens);
  rows16.count = rows16.all ? n : rows16.sink + std::max<int64_t>(0, n - rows16.tail_begin);
  const int64_t seg_bytes =
      static_cast<int64_t>(kvformat::SegmentBytes(kvformat::SegmentKind::kInt2PerToken,
                                                  chunk_tokens, d));
  OSCARKV_RETURN_IF_ERROR(
      Grow(chunk_stored_, static_cast<size_t>(layers) * 2 * n * kvdim * 4, "stored-form rows"));
  OSCARKV_RETURN_IF_ERROR(
      Grow(chunk_payload_, std::max<int64_t>(payload_bytes, 16), "quantised block payloads"));
  OSCARKV_RETURN_IF_ERROR(Grow(chunk_bf16_rows_,
                               static_cast<size_t>(layers) * 2 * rows16.count * kvdim * 2 + 16,
                               "bf16 block rows"));
  OSCARKV_RETURN_IF_ERROR(Grow(chunk_segments_, static_cast<size_t>(seg_bytes) * hkv, "segments"));
  OSCARKV_RETURN_IF_ERROR(
      Grow(chunk_bf16_tmp_, static_cast<size_t>(chunk_tokens) * kvdim * 2, "bf16 chunk rows"));
  auto stored = [&](int l, int side) {
    return chunk_stored_.as<float>() + (int64_t{l} * 2 + side) * n * kvdim;
  };
  auto bf16_rows = [&](int l, int side) {
    return chunk_bf16_rows_.as<uint16_t>() + (int64_t{l} * 2 + side) * rows16.count * kvdim;
  };
  const ClipRatios clips = cut.clips;
  float* scratch = k_rot_.as<float>();  // [rows][kvdim] f32 (rows >= chunk_tokens)

  // Rotates rows [lo, hi) of `scratch` (f32, the tier basis) back into the stored form.
  auto store_back = [&](int l, int side, int64_t lo, int64_t hi, int64_t scratch_row0)
      -> absl::Status {
    const float* r_t = RotationOf(l, side == 0 ? 3 : 2);
    float* dst = stored(l, side) + lo * kvdim;
    const float* src = scratch + (lo - scratch_row0) * kvdim;
    if (r_t == nullptr) {
      OSCARKV_CUDA_OK(cudaMemcpyAsync(dst, src, (hi - lo) * kvdim * 4, cudaMemcpyDeviceToDevice,
                                      stream_));
      return absl::OkStatus();
    }
    return Rotate(src, kvdim, hi - lo, hkv, r_t, dst);
  };
  // Dequantises the per-token INT2 segments (one per head, `head_stride` apart) of tokens
  // [lo, hi) into scratch rows starting at (lo - scratch_row0).
  auto dequant = [&](const uint8_t* segments, int64_t head_stride, int64_t lo, int64_t hi,
                     int64_t scratch_row0) -> absl::Status {
    k::DequantInt2Params p;
    p.segments = segments;
    p.segment_head_stride = head_stride;
    p.tokens = static_cast<int>(hi - lo);
    p.heads = hkv;
    p.head_dim = d;
    p.out = scratch + (lo - scratch_row0) * kvdim;
    p.out_row_stride = kvdim;
    OSCARKV_CUDA_OK(k::DequantInt2PerTokenCuda(p, stream_));
    return absl::OkStatus();
  };

  // Seed the stored prefix from the reused blocks.
  if (reused_tokens > 0) {
    std::vector<uint16_t> host_rows(static_cast<size_t>(layers) * 2 * rows16.count * kvdim);
    for (int64_t b = 0; b < use; ++b) {
      const kvformat::BlockLayout layout = kvformat::BlockLayout::Of(reused[b].header);
      const std::byte* payload = reused[b].payload.data();
      if (payload_offset[b] >= 0) {
        OSCARKV_CUDA_OK(cudaMemcpyAsync(chunk_payload_.as<std::byte>() + payload_offset[b],
                                        payload, layout.payload_bytes(),
                                        cudaMemcpyHostToDevice, stream_));
        continue;
      }
      for (int l = 0; l < layers; ++l) {
        for (int side = 0; side < 2; ++side) {
          for (int h = 0; h < hkv; ++h) {
            for (int r = 0; r < bt; ++r) {
              std::memcpy(host_rows.data() +
                              ((int64_t{l} * 2 + side) * rows16.count +
                               rows16.IndexOf(b * bt + r)) * kvdim + int64_t{h} * d,
                          payload + layout.CodesOffset(l, side == 0 ? KvSide::kK : KvSide::kV, h) +
                              int64_t{r} * d * 2,
                          d * 2);
            }
          }
        }
      }
    }
    // The reused BF16 rows are the leading rows16 indices [0, bf16_reused).
    const int64_t bf16_reused = rows16.all ? reused_tokens : std::min(rows16.sink, reused_tokens);
    for (int lside = 0; lside < layers * 2; ++lside) {
      OSCARKV_CUDA_OK(cudaMemcpyAsync(
          chunk_bf16_rows_.as<uint16_t>() + lside * rows16.count * kvdim,
          host_rows.data() + lside * rows16.count * kvdim, bf16_reused * kvdim * 2,
          cudaMemcpyHostToDevice, stream_));
    }
    for (int l = 0; l < layers; ++l) {
      for (int side = 0; side < 2; ++side) {
        OSCARKV_CUDA_OK(WidenBf16Cuda(bf16_rows(l, side), bf16_reused * kvdim, scratch, stream_));
        for (int64_t b = 0; b < use; ++b) {
          if (payload_offset[b] < 0) continue;
          const kvformat::BlockLayout layout{cut.codec, BlockKind::kQuantized, layers, hkv, d, bt};
          const KvSide kv = side == 0 ? KvSide::kK : KvSide::kV;
          const uint8_t* seg = chunk_payload_.as<uint8_t>() + payload_offset[b] +
                               layout.SegmentOffset(l, kv, 0);
          OSCARKV_RETURN_IF_ERROR(dequant(seg, layout.segment_bytes(kv), b * bt, (b + 1) * bt, 0));
        }
        OSCARKV_RETURN_IF_ERROR(store_back(l, side, 0, reused_tokens, 0));
      }
    }
  }

  // The chunks.
  ChunkedPrefillResult result;
  result.reused_tokens = reused_tokens;
  std::vector<int32_t> positions;
  for (int64_t c0 = reused_tokens; c0 < n; c0 += chunk_tokens) {
    const int64_t c1 = std::min<int64_t>(n, c0 + chunk_tokens), t = c1 - c0;
    if (stop_check != nullptr && *stop_check) OSCARKV_RETURN_IF_ERROR((*stop_check)());
    meta_host_.assign(prompt.begin() + c0, prompt.begin() + c1);
    positions.resize(t);
    std::iota(positions.begin(), positions.end(), static_cast<int32_t>(c0));
    meta_host_.insert(meta_host_.end(), positions.begin(), positions.end());
    OSCARKV_RETURN_IF_ERROR(UploadMeta(meta_host_));
    const int32_t* tokens_dev = meta_.as<int32_t>();
    OSCARKV_CUDA_OK(k::EmbedRowsCuda(weights_.token_embd(), tokens_dev, t, c.d_model,
                                     x_.as<float>(), stream_));
    float* qkv = qkv_.as<float>();
    for (int l = 0; l < layers; ++l) {
      OSCARKV_RETURN_IF_ERROR(LayerQkv(l, t, tokens_dev + t));
      // The chunk's own K/V follow the stored prefix; attention runs over [0, c1).
      for (int side = 0; side < 2; ++side) {
        OSCARKV_CUDA_OK(cudaMemcpy2DAsync(stored(l, side) + c0 * kvdim, kvdim * 4,
                                          qkv + qdim + side * kvdim, qkvdim * 4, kvdim * 4, t,
                                          cudaMemcpyDeviceToDevice, stream_));
      }
      k::PrefillAttentionParams pa;
      pa.q = qkv;
      pa.q_row_stride = qkvdim;
      pa.k = stored(l, 0);
      pa.v = stored(l, 1);
      pa.k_row_stride = pa.v_row_stride = kvdim;
      pa.num_tokens = t;
      pa.q_offset = c0;
      pa.num_q_heads = hq;
      pa.num_kv_heads = hkv;
      pa.head_dim = d;
      pa.sm_scale = 1.0f / std::sqrt(static_cast<float>(d));
      pa.out_bf16 = attn_bf16_.as<uint16_t>();
      pa.workspace = prefill_attn_workspace_.get();
      pa.workspace_bytes = static_cast<int64_t>(prefill_attn_workspace_.bytes());
      OSCARKV_CUDA_OK(k::PrefillAttentionCuda(pa, stream_));

      // Record the chunk: bf16 rows in the tier basis, block payloads, stored form.
      for (int side = 0; side < 2; ++side) {
        const KvSide kv = side == 0 ? KvSide::kK : KvSide::kV;
        const float* raw = qkv + qdim + side * kvdim;
        const float* r = RotationOf(l, side);
        if (r != nullptr) {
          OSCARKV_RETURN_IF_ERROR(Rotate(raw, qkvdim, t, hkv, r, scratch));
        } else {
          OSCARKV_CUDA_OK(cudaMemcpy2DAsync(scratch, kvdim * 4, raw, qkvdim * 4, kvdim * 4, t,
                                            cudaMemcpyDeviceToDevice, stream_));
        }
        uint16_t* row16 = chunk_bf16_tmp_.as<uint16_t>();
        OSCARKV_CUDA_OK(k::F32ToBf16Cuda(scratch, t * kvdim, row16, stream_));
        // BF16 blocks' rows: [c0, c1) ∩ ([0, sink) ∪ [tail_begin, n)), or all (codec bf16).
        auto keep_rows = [&](int64_t lo, int64_t hi) -> absl::Status {
          if (lo >= hi) return absl::OkStatus();
          OSCARKV_CUDA_OK(cudaMemcpyAsync(bf16_rows(l, side) + rows16.IndexOf(lo) * kvdim,
                                          row16 + (lo - c0) * kvdim, (hi - lo) * kvdim * 2,
                                          cudaMemcpyDeviceToDevice, stream_));
          return absl::OkStatus();
        };
        if (rows16.all) {
          OSCARKV_RETURN_IF_ERROR(keep_rows(c0, c1));
        } else {
          OSCARKV_RETURN_IF_ERROR(keep_rows(c0, std::min(c1, rows16.sink)));
          OSCARKV_RETURN_IF_ERROR(keep_rows(std::max(c0, rows16.tail_begin), c1));
        }
        // Quantised blocks of this chunk, straight into their payloads.
        const float clip = side == 0 ? clips.k : clips.v;
        const kvformat::BlockLayout qlayout{cut.codec, BlockKind::kQuantized, layers, hkv, d, bt};
        for (int64_t b = c0 / bt; b * bt < c1; ++b) {
          if (payload_offset[b] < 0) continue;
          k::KvQuantParams qp;
          qp.input_bf16 = row16 + (b * bt - c0) * kvdim;
          qp.tokens = bt;
          qp.heads = hkv;
          qp.head_dim = d;
          qp.kind = kvformat::SegmentKind::kInt2PerToken;
          qp.clip_ratio = clip;
          qp.output = chunk_payload_.as<uint8_t>() + payload_offset[b] +
                      qlayout.SegmentOffset(l, kv, 0);
          qp.output_head_stride = static_cast<ptrdiff_t>(qlayout.segment_bytes(kv));
          OSCARKV_CUDA_OK(k::KvQuantCuda(qp, stream_));
        }
        // Stored form of the chunk, for the chunks after it.
        const int64_t widen_end = rows16.all ? c1 : std::min(c1, rows16.sink);
        if (widen_end > c0) {
          OSCARKV_CUDA_OK(WidenBf16Cuda(row16, (widen_end - c0) * kvdim, scratch, stream_));
        }
        if (!rows16.all && c1 > std::max(c0, rows16.sink)) {
          const int64_t lo = std::max(c0, rows16.sink);
          k::KvQuantParams qp;
          qp.input_bf16 = row16 + (lo - c0) * kvdim;
          qp.tokens = static_cast<int>(c1 - lo);
          qp.heads = hkv;
          qp.head_dim = d;
          qp.kind = kvformat::SegmentKind::kInt2PerToken;
          qp.clip_ratio = clip;
          qp.output = chunk_segments_.as<uint8_t>();
          qp.output_head_stride = seg_bytes;
          OSCARKV_CUDA_OK(k::KvQuantCuda(qp, stream_));
          // Each head's segment holds c1 - lo tokens (codes, then params), seg_bytes apart.
          OSCARKV_RETURN_IF_ERROR(dequant(chunk_segments_.as<uint8_t>(), seg_bytes, lo, c1, c0));
        }
        OSCARKV_RETURN_IF_ERROR(store_back(l, side, c0, c1, c0));
      }
      OSCARKV_RETURN_IF_ERROR(LayerOutputAndFfn(l, t));
    }
    if (prompt_logprobs >= 0) {  // row r scores prompt[c0 + r + 1]; the prompt's last, nothing
      const int64_t scored = std::min<int64_t>(t, n - 1 - c0);
      OSCARKV_RETURN_IF_ERROR(ScoreRows(x_.as<float>(), prompt.subspan(c0 + 1, scored),
                                        prompt_logprobs, &result.prompt_logprobs));
    }
    if (c1 == n) {
      result.last_logits.resize(c.vocab_size);
      int32_t arg = 0;
      OSCARKV_RETURN_IF_ERROR(
          Logits(1, x_.as<float>() + (t - 1) * dm, &result.last_logits, &arg));
    }
  }

  // Blocks: quantised payloads from the GPU, BF16 blocks assembled from the kept rows.
  std::vector<std::byte> payloads(static_cast<size_t>(payload_bytes));
  std::vector<uint16_t> host_rows(static_cast<size_t>(layers) * 2 * rows16.count * kvdim);
  if (payload_bytes > 0) {
    OSCARKV_CUDA_OK(cudaMemcpyAsync(payloads.data(), chunk_payload_.get(), payload_bytes,
                                    cudaMemcpyDeviceToHost, stream_));
  }
  OSCARKV_CUDA_OK(cudaMemcpyAsync(host_rows.data(), chunk_bf16_rows_.get(),
                                  host_rows.size() * 2, cudaMemcpyDeviceToHost, stream_));
  OSCARKV_CUDA_OK(cudaStreamSynchronize(stream_));
  for (int64_t b = 0; b < num_blocks; ++b) {
    const int tokens = static_cast<int>(std::min<int64_t>(bt, n - b * bt));
    std::vector<std::byte> payload;
    if (payload_offset[b] >= 0) {
      payload.assign(payloads.begin() + payload_offset[b],
                     payloads.begin() + payload_offset[b] +
                         static_cast<int64_t>(kvformat::BlockLayout{cut.codec, BlockKind::kQuantized,
                                                                    layers, hkv, d, bt}
                                                  .payload_bytes()));
    } else {
      const kvformat::BlockLayout layout{cut.codec, BlockKind::kBf16, layers, hkv, d, tokens};
      payload.resize(layout.payload_bytes());
      for (int l = 0; l < layers; ++l) {
        for (int side = 0; side < 2; ++side) {
          for (int h = 0; h < hkv; ++h) {
            for (int r = 0; r < tokens; ++r) {
              std::memcpy(payload.data() +
                              layout.CodesOffset(l, side == 0 ? KvSide::kK : KvSide::kV, h) +
                              int64_t{r} * d * 2,
                          host_rows.data() +
                              ((int64_t{l} * 2 + side) * rows16.count +
                               rows16.IndexOf(b * bt + r)) * kvdim + int64_t{h} * d,
                          d * 2);
            }
          }
        }
      }
    }
    OSCARKV_ASSIGN_OR_RETURN(std::vector<std::byte> bytes,
                             SerializeCutBlock(cut, shape, b, tokens, payload));
    result.blocks.push_back(std::move(bytes));
  }
  last_prefill_.forward_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  last_prefill_.cache_write_seconds = 0;
  return result;
}

}  // namespace oscarkv::model_gpu

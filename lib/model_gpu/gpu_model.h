// The transformer on the GPU (issue #7): bf16 weights and cuBLAS for the large products, the
// kernels of kernels/model for the rest, a paged three-tier KV cache in device memory (BF16 sink
// and recent pages, INT2 history pages; codec bf16 keeps every token in BF16 pages), the fused
// demotion kernel (kernels/quant) and the fused INT2 decode attention (kernels/attention).
//
// Numerics follow the CPU runtime (lib/model + lib/quant ThreeTierCache): K/V rows are rotated
// by the layer's R_K / R_V, rounded to bf16, and quantised from that bf16 row with the codec's
// clip ratios; prompt attention is causal over bf16-rounded, unrotated K/V; the decode query is
// rotated by R_K and the output rotated back by R_V^T. Differences: the GPU rounds activations
// to bf16 before every matrix product (the CPU uses f32 activations), and the attention MMAs
// round q and P; so logits agree within a tolerance, not bit for bit.
//
// Sequences: Admit+Prefill with AddSequence (the prompt goes into an empty sequence in one
// pass), then any set of admitted sequences steps together in DecodeStep (continuous batching:
// the caller adds and removes sequences between steps). Admission checks the KV byte budget for
// the sequence's final length, so an admitted sequence never runs out of pages.
//
// Supported codecs: bf16 (M0) and the windowed per-token INT2 codecs (oscar, oscar-gram,
// oscar-hadamard, oscar-norot; M3-M6). Others get kUnimplemented.
//
// Thread-compatible: one thread drives a GpuModel.
#ifndef OSCARKV_LIB_MODEL_GPU_GPU_MODEL_H_
#define OSCARKV_LIB_MODEL_GPU_GPU_MODEL_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/engine/logprobs.h"
#include "lib/engine/serving_engine.h"
#include "lib/model/model_config.h"
#include "lib/model_gpu/block_import.h"
#include "lib/model_gpu/cuda_status.h"
#include "lib/model_gpu/gpu_weights.h"
#include "lib/model_gpu/kv_page_table.h"
#include "lib/model_gpu/step_graph_cache.h"
#include "lib/quant/three_tier_cache.h"

namespace oscarkv::kernels {
struct QkvRotatedOut;  // kernels/model/model_kernels_cuda.h
struct QkvPageWrite;
}  // namespace oscarkv::kernels

namespace oscarkv::model_gpu {

struct GpuModelOptions {
  int device = 0;                    // CUDA device ordinal; Default: 0
  int max_batch = 64;                // sequences per decode step; Default: 64
  int64_t max_prompt_tokens = 8192;  // longest prompt AddSequence accepts; Default: 8192
  // Bytes of KV cache the admitted sequences may hold (all layers, both pools). Default: 4 GiB.
  int64_t kv_budget_bytes = int64_t{4} << 30;
  // Rows of the FFN computed at once during prefill (bounds its scratch). Default: 4096.
  int ffn_chunk_tokens = 4096;
  // Prefill attention on the Hopper (wgmma) kernel, which needs a workspace of
  // 4 * Hkv * head_dim * max_prompt_tokens bytes; false: the mma.sync kernel, no workspace (the
  // benchmarks' baseline). Default: true.
  bool hopper_prefill_attention = true;
  // Decode steps replayed from captured CUDA graphs, one per step shape (StepGraphCache): the host
  // issues a step's hundreds of kernels as one launch. false: every kernel launched one by one
  // (the same bits; the benchmarks' baseline). Default: true.
  bool decode_graphs = true;
};

// Timings of the last AddSequence (host wall clock around synchronised GPU work).
struct PrefillTimings {
  double forward_seconds = 0;  // the whole prefill incl. cache writes and demotion
  // GPU time (events) of writing the cache: K/V rotation, BF16 page writes and INT2
  // quantisation of the history, summed over layers; part of forward_seconds.
  double cache_write_seconds = 0;
};

// What GpuModel::PrefillChunked returns.
struct ChunkedPrefillResult {
  std::vector<float> last_logits;             // [vocab] after the last prompt token
  std::vector<std::vector<std::byte>> blocks;  // the prompt's blocks, serialised, in order
  int64_t reused_tokens = 0;                   // taken from the reused blocks
  // With prompt_logprobs >= 0: [i] scores prompt[i + 1] after the tokens before it.
  std::vector<engine::TokenLogprobs> prompt_logprobs;
};

class GpuModel {
 public:
  // `tiers`: codec, rotations (per layer, or empty = identity) and clip ratios, e.g.
  // engine::KvCacheFactory::tier_config(). Allocates weights' scratch, the KV pools (sized from
  // kv_budget_bytes) and a cuBLAS handle on `options.device`.
  static absl::StatusOr<std::unique_ptr<GpuModel>> Create(const model::ModelConfig& config,
                                                          GpuWeights weights,
                                                          const quant::ThreeTierCacheConfig& tiers,
                                                          const GpuModelOptions& options);
  // Create() with `engine`'s model (weights uploaded to options.device) and tier configuration.
  static absl::StatusOr<std::unique_ptr<GpuModel>> ForEngine(const engine::ServingEngine& engine,
                                                             const GpuModelOptions& options);
  ~GpuModel();
  GpuModel(const GpuModel&) = delete;
  GpuModel& operator=(const GpuModel&) = delete;

  // Whether a sequence of `max_total_tokens` (prompt + generated) fits in the budget now.
  bool CanAdmit(int64_t max_total_tokens) const { return pages_.CanAdmit(max_total_tokens); }

  // Admits sequence `id` for up to `max_total_tokens` tokens and prefills `prompt` into it.
  // Writes the last position's logits [vocab] when `last_logits` is non-null and, when
  // `all_logits` is non-null, every position's [T, vocab]; `*next_greedy` = argmax. When `tail`
  // is non-null, fills tail->bits for tokens [tail->begin, T) (see TailRows).
  // @return kResourceExhausted when the budget is full now; kInvalidArgument for bad tokens, a
  //   prompt longer than max_prompt_tokens or a sequence that can never fit.
  absl::Status AddSequence(int64_t id, std::span<const int32_t> prompt, int64_t max_total_tokens,
                           int32_t* next_greedy, std::vector<float>* last_logits = nullptr,
                           std::vector<float>* all_logits = nullptr, TailRows* tail = nullptr);

  // ServingEngine's chunked prefill over a stored prefix, on this GPU (gpu_chunked_prefill.cc):
  // chunks of `chunk_tokens` attend to themselves and to the stored form of every earlier token;
  // the output is the prompt's blocks cut by `cut` (CutSpecFor), their quantised history made on
  // the GPU. `reused`: parsed blocks for a leading run of the prompt's reusable blocks (used up
  // to a chunk boundary). Needs no admitted sequence and leaves none; one call at a time.
  // `prompt_logprobs` in [0, engine::kMaxTopLogprobs]: also scores every prompt token after the
  // first (ChunkedPrefillResult::prompt_logprobs, with that many alternatives), as
  // engine::AppendPromptLogprobs does from ServingEngine::Prefill's logits, computed on the GPU
  // (TokenLogprobsRowsCuda) so that only the scores come back; needs `reused` empty (reused
  // positions have no logits). last_logits stays the one-row product either way.
  // `stop_check` (optional) is asked before each chunk is queued; its error ends the prefill
  // (chunks already queued on the stream still run).
  // @return kInvalidArgument for bad tokens, a prompt longer than max_prompt_tokens, a cut that
  //   does not fit the chunk or prompt_logprobs out of range / with reused blocks;
  //   kFailedPrecondition for a reused block of another prompt or engine (the caller retries
  //   without); CUDA errors; stop_check's.
  absl::StatusOr<ChunkedPrefillResult> PrefillChunked(
      std::span<const int32_t> prompt, const BlockCutSpec& cut, int chunk_tokens,
      std::span<const kvformat::BlockView> reused, int prompt_logprobs = -1,
      const engine::PrefillStopCheck* stop_check = nullptr);

  // Speed-only: admits `id` with `length` tokens of random KV (no forward pass), as if a prompt
  // of that length had been prefilled.
  absl::Status AddSyntheticSequence(int64_t id, int64_t length, int64_t max_total_tokens,
                                    uint64_t seed);

  // One decode step: appends tokens[i] to sequence ids[i] (distinct, admitted) and writes the
  // argmax of each new distribution to (*next_greedy)[i]; logits [B, vocab] when non-null.
  absl::Status DecodeStep(std::span<const int64_t> ids, std::span<const int32_t> tokens,
                          std::vector<int32_t>* next_greedy,
                          std::vector<float>* logits = nullptr);
  // How decode steps ran: directly, captured, replayed (GpuModelOptions::decode_graphs).
  const StepGraphCache::Counts& decode_graph_counts() const { return decode_graphs_.counts(); }

  // The packed form of a sequence of `length` tokens of this model and codec.
  PackedKvLayout PackedLayout(int64_t length) const;
  // Copies sequence `id`'s pages into `packed` (device memory on this GPU, at least
  // PackedLayout(length).bytes(), 16-byte aligned) and waits for the copy.
  // @return kNotFound for an unknown id, kInvalidArgument for a short buffer.
  absl::Status PackSequence(int64_t id, std::span<std::byte> packed);
  // Admits sequence `id` for up to `max_total_tokens` tokens with the `length` tokens of KV in
  // `packed` (device memory on this GPU, exactly PackedLayout(length).bytes(), from PackSequence
  // on a GPU with the same model and codec); decoding continues as if prefilled here.
  // @return AddSequence's admission errors; kInvalidArgument for a size mismatch.
  absl::Status AddPackedSequence(int64_t id, int64_t length, int64_t max_total_tokens,
                                 std::span<const std::byte> packed);

  // Frees the pages and budget of `id` (no-op when unknown).
  void RemoveSequence(int64_t id) { pages_.Remove(id); }

  const model::ModelConfig& config() const { return config_; }
  const KvPageTable& pages() const { return pages_; }
  const GpuModelOptions& options() const { return options_; }
  const PrefillTimings& last_prefill() const { return last_prefill_; }
  // GpuNumericsTag of this GPU: the `numerics` of the keys of KV that PrefillChunked makes.
  const std::string& numerics_tag() const { return numerics_tag_; }
  size_t weight_bytes() const { return weights_.device_bytes(); }
  // Physical bytes of the two KV pools (>= the budget's share each can use).
  size_t kv_pool_bytes() const { return bf16_pool_.bytes() + int2_pool_.bytes(); }

 private:
  GpuModel(const model::ModelConfig& config, GpuWeights weights, KvPageTable pages,
           const GpuModelOptions& options)
      : config_(config), weights_(std::move(weights)), pages_(std::move(pages)),
        options_(options) {}

  absl::Status Init(const quant::ThreeTierCacheConfig& tiers);
  // kInvalidArgument for an empty prompt, one longer than max_prompt_tokens, or a bad token.
  absl::Status CheckPrompt(std::span<const int32_t> prompt) const;
  // y[rows, out] (f32) = x[rows, in] (bf16) W[out, in]^T (bf16) + beta * y.
  absl::Status Gemm(const uint16_t* x, const uint16_t* w, int64_t rows, int64_t in, int64_t out,
                    float beta, float* y);
  // out = in * R per row (kernels' RotateRowsCuda, bit-identical to the CPU cache's rotation);
  // in rows at in_token_stride floats per token of `heads` rows, out packed [tokens][heads][D].
  absl::Status Rotate(const float* in, int64_t in_token_stride, int64_t tokens, int heads,
                      const float* r, float* out);
  // Runs the layers over rows of x (residual stream). Prefill when `prefill` (one sequence,
  // positions pos 0..rows-1) else a decode step (rows = B sequences). Writes the cache per
  // `plan_dev` (device copies of the step's metadata).
  struct StepMeta;
  absl::Status RunLayers(int64_t rows, bool prefill, const StepMeta& meta);
  // One layer's attention norm, fused QKV product, biases, QK norms and RoPE at `positions`
  // (device) over rows of x_, into qkv_; with `rotated` also its rotated copies in the same
  // launch (a decode step's q, K and V in the tier basis). With `pages`, the same launch also
  // writes the K and V rows to their BF16 pages: the rotated copies with `rotated`, else the
  // rows in qkv_.
  absl::Status LayerQkv(int l, int64_t rows, const int32_t* positions,
                        const kernels::QkvRotatedOut* rotated = nullptr,
                        const kernels::QkvPageWrite* pages = nullptr);
  // One layer's output projection of attn_bf16_ (residual into x_) and its FFN.
  absl::Status LayerOutputAndFfn(int l, int64_t rows);
  // Device rotation `which` of `layer` (0 R_K, 1 R_V, 2 R_V^T, 3 R_K^T); null without rotations.
  const float* RotationOf(int layer, int which) const;
  static constexpr int kRotationsPerLayer = 4;
  absl::Status Logits(int64_t rows, const float* x_rows, std::vector<float>* logits_out,
                      int32_t* argmax_out);
  // Logits of n <= max_batch rows into logits_, or of n rows of the activation scratch into
  // `out` ([n, vocab] device) when given (and, with `argmax`, n <= max_batch and their argmax
  // into argmax_), enqueued only.
  absl::Status LogitsKernels(int64_t n, const float* x_rows, bool argmax, float* out = nullptr);
  // Appends to `out` the logprobs of tokens[r] under the logits of row r of x_rows (device,
  // tokens.size() rows) with `top_n` alternatives, computed on the GPU.
  absl::Status ScoreRows(const float* x_rows, std::span<const int32_t> tokens, int top_n,
                         std::vector<engine::TokenLogprobs>* out);
  // A decode step's metadata at fixed offsets in decode_meta_ (so that the pointers its kernels
  // get do not move between steps, as a replayed graph needs), room for `work_items` at least.
  struct DecodeMetaLayout {
    enum Array {  // per-sequence arrays, `small` int32 each, in this order from offset 0
      kTokens,
      kPositions,
      kPage,
      kRow,
      kDemoteSrc,
      kDemoteDst,
      kBf16Indptr,
      kBf16Tokens,
      kInt2Indptr,
      kInt2Tokens,
      kSeqWorkIndptr,
      kNumSmall
    };
    int64_t small = 0;  // max_batch + 1, rounded up to 4
    int64_t work = 0;   // DecodeWorkItems (4 int32 each), room for work_items
    int64_t work_items = 0;
    int64_t bf16_indices = 0, int2_indices = 0;  // room for every page of each pool
    int64_t total = 0;                           // int32 elements; 0 until reserved
    int64_t At(Array a) const { return static_cast<int64_t>(a) * small; }
  };
  absl::Status ReserveDecodeMeta(int64_t work_items);
  absl::Status UploadMeta(const std::vector<int32_t>& host);
  // Packs (pack) or unpacks the pages of held sequence `id` to/from `packed`.
  absl::Status CopyPackedPages(int64_t id, std::byte* packed, bool pack);

  model::ModelConfig config_;
  GpuWeights weights_;
  KvPageTable pages_;
  GpuModelOptions options_;
  bool windowed_ = false;
  float k_clip_ = 1.0f, v_clip_ = 1.0f;
  PrefillTimings last_prefill_;
  int num_sms_ = 0;
  std::string numerics_tag_;
  bool pools_filled_ = false;  // AddSyntheticSequence filled the pools with random KV

  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> cache_events_;  // per layer: before/after the prefill's cache write
  cublasHandle_t cublas_ = nullptr;
  DeviceBuffer rotations_;  // [L][3][D][D] f32 (R_K, R_V, R_V^T) when the codec rotates
  bool has_rotation_ = false;
  DeviceBuffer bf16_pool_, int2_pool_;
  // Scratch (rows = max(max_prompt_tokens, max_batch)).
  DeviceBuffer x_, h_, qkv_, attn_bf16_, k_rot_, v_rot_, kv_tmp_bf16_, gate_up_, act_bf16_;
  // bf16 K/V staging of the Hopper prefill attention (empty with hopper_prefill_attention off).
  DeviceBuffer prefill_attn_workspace_;
  DeviceBuffer q_rot_, attn_out_, partial_out_, partial_lse_, logits_, argmax_;
  DeviceBuffer merge_counters_;  // DecodeAttentionParams::merge_counters, zero between calls
  DeviceBuffer meta_;            // per-call int32 metadata (prefill, page packing)
  DeviceBuffer decode_meta_;     // a decode step's, at decode_meta_layout_'s offsets
  DecodeMetaLayout decode_meta_layout_;
  std::vector<int32_t> decode_meta_host_;
  DeviceBuffer cublas_workspace_;  // set explicitly, so that graph captures share it
  StepGraphCache decode_graphs_;
  DeviceBuffer tail_;  // TailRows of the running prefill (grown on demand)
  // PrefillChunked's buffers (grown on demand): stored-form rows, quantised block payloads, bf16
  // rows of BF16-block tokens, one chunk's INT2 segments and bf16 rows.
  DeviceBuffer chunk_stored_, chunk_payload_, chunk_bf16_rows_, chunk_segments_, chunk_bf16_tmp_;
  // ScoreRows' logits, tokens and results for up to kScoreRows rows (allocated on first use).
  static constexpr int64_t kScoreRows = 128;
  DeviceBuffer score_logits_, score_;
  std::vector<int32_t> meta_host_;
};

}  // namespace oscarkv::model_gpu

#endif  // OSCARKV_LIB_MODEL_GPU_GPU_MODEL_H_

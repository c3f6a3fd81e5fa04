// Decode-equivalent teacher forcing (quant.md E.0 rules 1-2) over a whole window of tokens.
//
// lib/model's Model::Run has no way to substitute attention for a whole window (its KvCache is
// called one query at a time, and a fresh sequence's prompt always uses full-precision
// PromptAttention). This file is therefore the smallest adapter on the eval side: a forward pass
// over one window, from position 0, written with lib/model's public building blocks
// (forward_cpu.h, ModelWeights) in the same order as Model::Run, where every layer's attention is
// quant::EmulateDecodeAttention: query t reads exactly the K/V that ThreeTierCache would hold at
// decode step t (sink/recent BF16 rotated, the rest dequantised), and the output is rotated back
// by R_V^T. For the bf16 codec this equals Model::Forward (tested).
//
//   OSCARKV_ASSIGN_OR_RETURN(CodecSetup oscar, PrepareCodec(*model, "oscar", &calibration));
//   OSCARKV_ASSIGN_OR_RETURN(ForwardResult r, TeacherForcedForward(*model, oscar, tokens, {}));
//   std::vector<float> logits;  OutputLogits(*model, r.hidden.data() + t0 * d_model, rows, &logits);
#ifndef OSCARKV_LIB_EVAL_TEACHER_FORCING_H_
#define OSCARKV_LIB_EVAL_TEACHER_FORCING_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/model/model.h"
#include "lib/quant/calibration.h"
#include "lib/quant/codec.h"
#include "lib/quant/codec_spec.h"
#include "lib/quant/three_tier_cache.h"

namespace oscarkv::eval {

// One codec prepared for one model: its spec, one quant::Codec per layer (rotations) and the
// clip ratios in force.
struct CodecSetup {
  const quant::CodecSpec* spec = nullptr;
  std::string label;  // how results name it: the codec's name, or the eval's variant of it
  std::vector<std::unique_ptr<quant::Codec>> layers;
  float k_clip = 1.0f;  // per-row clip ratio used for K (1 = none)
  float v_clip = 1.0f;
  // > 0: per-token codecs quantise rows in groups of this many channels (an emulation-only
  // lever, quant::BuildEmulatedLayerKv); 0 = the stored format (one group per row).
  int per_token_group = 0;
  const float* rot_k(int layer) const { return layers[layer]->key_rotation(); }
  const float* rot_v(int layer) const { return layers[layer]->value_rotation(); }
  // A ThreeTierCache config for this codec (rotations, clip ratios) for `model`.
  absl::StatusOr<quant::ThreeTierCacheConfig> CacheConfig(const model::ModelConfig& config) const;
};

// Builds the per-layer codecs. `calibration` is required for calibrated codecs (its objectives
// must match the spec's). `k_clip` / `v_clip` > 0 override the ratios of codecs that clip
// (a lever for the evaluation); otherwise the spec's (or the calibration's) ratios apply.
absl::StatusOr<CodecSetup> PrepareCodec(const model::Model& model, std::string_view codec_name,
                                        const quant::Calibration* calibration,
                                        float k_clip = -1.0f, float v_clip = -1.0f);

// Per-layer attention fidelity of the codec's attention against BF16 attention on the SAME
// inputs (the layer's q/k/v in the codec's own run: error without upstream propagation).
struct LayerFidelity {
  int layer = 0;
  double attn_row_kl = 0;       // mean KL(p_bf16 || p_codec) of attention rows (heads x sampled t)
  double attn_out_rel_err = 0;  // ||O - O^||_F / ||O||_F over rows t >= from, pre-W_o
  double k_rel_mse = 0;         // ||K^ - K||^2 / ||K||^2 over all tokens (rotated basis)
  double v_rel_mse = 0;
};

struct ForwardOptions {
  // Per-layer fidelity (costs one extra BF16 attention per layer and the sampled rows).
  bool attention_fidelity = false;
  int fidelity_from = 512;    // queries t >= this count; Default: 512 (quant.md E.2)
  int fidelity_stride = 61;   // attention rows sampled every this many queries; Default: 61
  // When non-null, each layer's K/V of the window is appended to it (bytes actually allocated
  // for bits/element). Its config must match the model (layers, heads, head_dim).
  quant::ThreeTierCache* cache_sink = nullptr;
  // Called after each layer (progress).
  std::function<void(int layer)> on_layer;
};

struct ForwardResult {
  std::vector<float> hidden;  // [T][d_model] after the output RMSNorm (input of the LM head)
  std::vector<LayerFidelity> fidelity;  // per layer when requested
};

// Runs the window `tokens` (positions 0..T-1) with decode-equivalent attention for `codec`.
// kInvalidArgument for an empty window or out-of-vocab token; errors of the emulation.
absl::StatusOr<ForwardResult> TeacherForcedForward(const model::Model& model,
                                                   const CodecSetup& codec,
                                                   std::span<const int32_t> tokens,
                                                   const ForwardOptions& options = {});

// Runs `tokens` through the model with attention over real KV caches, like Model's non-prompt
// path: row r (position positions[r]) is appended to *caches[r] and attends through it, layer by
// layer; rows sharing a cache must be consecutive positions in order. Used for true decode over
// a codec's ThreeTierCache (several sequences batched, one row each). Returns normed hidden
// states [rows][d_model].
absl::StatusOr<std::vector<float>> CacheForward(const model::Model& model,
                                                std::span<model::KvCache* const> caches,
                                                std::span<const int32_t> tokens,
                                                std::span<const int64_t> positions);

// Appends every call to several caches (a prompt prefilled once at full precision into the
// caches of several codecs). Attend is an error.
class FanoutKvCache : public model::KvCache {
 public:
  explicit FanoutKvCache(std::vector<model::KvCache*> targets) : targets_(std::move(targets)) {}
  absl::Status AppendLayer(int layer, const float* k, const float* v, int num_tokens) override;
  absl::Status Attend(int layer, const float* q, int num_q_heads, float scale,
                      float* out) override;
  int64_t Length(int layer) const override;

 private:
  std::vector<model::KvCache*> targets_;
};

// logits [rows][vocab] = LM head of `rows` rows of normed hidden states.
void OutputLogits(const model::Model& model, const float* hidden, int64_t rows,
                  std::vector<float>* logits);

}  // namespace oscarkv::eval

#endif  // OSCARKV_LIB_EVAL_TEACHER_FORCING_H_

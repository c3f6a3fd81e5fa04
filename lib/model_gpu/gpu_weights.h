// The model's weights on the GPU: matrices in bf16 (fused where one product can replace several:
// Q|K|V and gate|up), norms, biases and RoPE divisors in f32. One device allocation.
#ifndef OSCARKV_LIB_MODEL_GPU_GPU_WEIGHTS_H_
#define OSCARKV_LIB_MODEL_GPU_GPU_WEIGHTS_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/model/model_config.h"
#include "lib/model/weights.h"
#include "lib/model_gpu/cuda_status.h"

namespace oscarkv::model_gpu {

struct GpuLayerWeights {
  const float* attn_norm = nullptr;   // [d_model]
  const uint16_t* wqkv = nullptr;     // [(Hq + 2 Hkv) D, d_model] bf16: rows of wq, wk, wv
  const float* bqkv = nullptr;        // [(Hq + 2 Hkv) D] or null (qwen2 only)
  const float* q_norm = nullptr;      // [D] or null (qwen3 only)
  const float* k_norm = nullptr;      // [D] or null
  const uint16_t* wo = nullptr;       // [d_model, Hq D] bf16
  const float* ffn_norm = nullptr;    // [d_model]
  const uint16_t* w_gate_up = nullptr;  // [2 d_ff, d_model] bf16: rows of gate, then up
  const uint16_t* w_down = nullptr;   // [d_model, d_ff] bf16
};

class GpuWeights {
 public:
  // Rounds the host weights (float32) to bf16 and copies them to the device.
  static absl::StatusOr<GpuWeights> Upload(const model::ModelConfig& config,
                                           const model::ModelWeights& weights);
  // Random weights of the config's shapes (speed-only runs: no checkpoint of that size is
  // installable here). Norm weights are 1, matrices uniform in +-1/sqrt(fan_in).
  static absl::StatusOr<GpuWeights> Random(const model::ModelConfig& config, uint64_t seed);

  const uint16_t* token_embd() const { return token_embd_; }  // [vocab, d_model] bf16
  const uint16_t* output() const { return output_; }          // [vocab, d_model] bf16
  const float* output_norm() const { return output_norm_; }
  const float* rope_freqs() const { return rope_freqs_; }     // [rope_dim / 2] or null
  const GpuLayerWeights& layer(int l) const { return layers_[l]; }
  size_t device_bytes() const { return arena_.bytes(); }

 private:
  DeviceBuffer arena_;
  const uint16_t* token_embd_ = nullptr;
  const uint16_t* output_ = nullptr;
  const float* output_norm_ = nullptr;
  const float* rope_freqs_ = nullptr;
  std::vector<GpuLayerWeights> layers_;
};

}  // namespace oscarkv::model_gpu

#endif  // OSCARKV_LIB_MODEL_GPU_GPU_WEIGHTS_H_

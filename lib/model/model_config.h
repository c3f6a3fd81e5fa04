// Architecture facts of a decoder-only transformer, read from GGUF metadata. Supported:
// llama (Llama, SmolLM2), qwen2 (QKV bias) and qwen3 (QK-norm), all with GQA.
#ifndef OSCARKV_LIB_MODEL_MODEL_CONFIG_H_
#define OSCARKV_LIB_MODEL_MODEL_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "lib/model/gguf_file.h"

namespace oscarkv::model {

enum class Arch { kLlama, kQwen2, kQwen3 };

// How RoPE pairs the dimensions of a head. GGUF llama weights are permuted at conversion so
// that rotating adjacent pairs (2i, 2i+1) is right; qwen2/qwen3 keep HF's layout and rotate
// (i, i + D/2) ("NeoX" style).
enum class RopeStyle { kAdjacentPairs, kNeox };

struct ModelConfig {
  std::string arch_name;            // general.architecture, e.g. "llama"
  Arch arch = Arch::kLlama;         // Default: kLlama
  int num_layers = 0;               // {arch}.block_count
  int d_model = 0;                  // {arch}.embedding_length
  int num_heads = 0;                // {arch}.attention.head_count (query heads)
  int num_kv_heads = 0;             // {arch}.attention.head_count_kv; Default: num_heads
  int head_dim = 0;                 // {arch}.attention.key_length; Default: d_model / num_heads
  int d_ff = 0;                     // {arch}.feed_forward_length
  int vocab_size = 0;               // tokenizer size (or {arch}.vocab_size)
  int context_length = 0;           // {arch}.context_length
  int rope_dim = 0;                 // {arch}.rope.dimension_count; Default: head_dim
  double rope_theta = 10000.0;      // {arch}.rope.freq_base; Default: 10000
  double rope_scale = 1.0;          // linear position scale factor; Default: 1 (none)
  RopeStyle rope_style = RopeStyle::kAdjacentPairs;  // from arch
  double norm_eps = 1e-5;           // {arch}.attention.layer_norm_rms_epsilon; Default: 1e-5
  bool qkv_bias = false;            // qwen2: attention Q/K/V have biases
  bool qk_norm = false;             // qwen3: per-head RMSNorm on Q and K before RoPE
  bool tied_embeddings = false;     // no output.weight: logits use token_embd

  // Reads the config from `file`.
  // @return kUnimplemented naming an unsupported architecture or rope scaling;
  //   kInvalidArgument/kNotFound for missing or inconsistent dimensions.
  static absl::StatusOr<ModelConfig> FromGguf(const GgufFile& file);

  // Bytes of K and V per token over all layers when both are stored in bf16.
  int64_t KvBytesPerTokenBf16() const {
    return int64_t{2} * num_layers * num_kv_heads * head_dim * 2;
  }
  // Elements of K (or of V) per token per layer.
  int64_t KvElementsPerTokenPerLayer() const { return int64_t{num_kv_heads} * head_dim; }
};

}  // namespace oscarkv::model

#endif  // OSCARKV_LIB_MODEL_MODEL_CONFIG_H_

// ModelConfig from a Hugging Face config.json (transformers 4.x and 5.x layouts) for
// LlamaForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM. HF checkpoints keep the un-permuted
// Q/K layout, so RoPE rotates (i, i + D/2) ("NeoX" style) for all three (docs/DECISIONS.md);
// GGUF llama files are permuted at conversion and use adjacent pairs instead.
#ifndef OSCARKV_LIB_MODEL_HF_CONFIG_H_
#define OSCARKV_LIB_MODEL_HF_CONFIG_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "lib/model/model_config.h"

namespace oscarkv::model {

// Parses config.json text. Reads architectures[0], hidden_size, num_hidden_layers,
// num_attention_heads, num_key_value_heads (Default: num_attention_heads), head_dim (Default:
// hidden_size / num_attention_heads), intermediate_size, vocab_size, max_position_embeddings,
// rope_theta (top level, or inside rope_parameters as transformers 5 writes it; Default: 10000),
// rms_norm_eps, tie_word_embeddings (Default: false), attention_bias. arch_name is set to the
// GGUF name ("llama", "qwen2", "qwen3"). vocab_size is the config's (the embedding rows).
// @return kUnimplemented naming an unsupported architecture, rope scaling other than
//   none/default/linear, partial rotary, sliding-window attention, activation other than silu,
//   or biases our forward lacks (o_proj / MLP); kInvalidArgument for bad JSON or missing or
//   inconsistent dimensions.
absl::StatusOr<ModelConfig> ModelConfigFromHfJson(std::string_view json_text);

// Reads and parses `dir`/config.json. @return kNotFound when it cannot be read; as above.
absl::StatusOr<ModelConfig> ModelConfigFromHfDir(const std::string& dir);

}  // namespace oscarkv::model

#endif  // OSCARKV_LIB_MODEL_HF_CONFIG_H_

#include "lib/model/model_config.h"

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"

namespace oscarkv::model {

absl::StatusOr<ModelConfig> ModelConfig::FromGguf(const GgufFile& f) {
  ModelConfig c;
  OSCARKV_ASSIGN_OR_RETURN(c.arch_name, f.GetString("general.architecture"));
  if (c.arch_name == "llama") {
    c.arch = Arch::kLlama;
    c.rope_style = RopeStyle::kAdjacentPairs;
  } else if (c.arch_name == "qwen2") {
    c.arch = Arch::kQwen2;
    c.rope_style = RopeStyle::kNeox;
    c.qkv_bias = true;
  } else if (c.arch_name == "qwen3") {
    c.arch = Arch::kQwen3;
    c.rope_style = RopeStyle::kNeox;
    c.qk_norm = true;
  } else {
    return absl::UnimplementedError(absl::StrCat("model architecture '", c.arch_name,
                                                 "' is not supported (llama, qwen2, qwen3)"));
  }
  const std::string a = c.arch_name + ".";
  OSCARKV_ASSIGN_OR_RETURN(int64_t layers, f.GetInt(a + "block_count"));
  OSCARKV_ASSIGN_OR_RETURN(int64_t d_model, f.GetInt(a + "embedding_length"));
  OSCARKV_ASSIGN_OR_RETURN(int64_t heads, f.GetInt(a + "attention.head_count"));
  OSCARKV_ASSIGN_OR_RETURN(int64_t d_ff, f.GetInt(a + "feed_forward_length"));
  c.num_layers = static_cast<int>(layers);
  c.d_model = static_cast<int>(d_model);
  c.num_heads = static_cast<int>(heads);
  c.d_ff = static_cast<int>(d_ff);
  c.num_kv_heads = c.num_heads;
  if (f.Find(a + "attention.head_count_kv")) {
    OSCARKV_ASSIGN_OR_RETURN(int64_t kv, f.GetInt(a + "attention.head_count_kv"));
    c.num_kv_heads = static_cast<int>(kv);
  }
  if (c.num_layers <= 0 || c.d_model <= 0 || c.num_heads <= 0 || c.num_kv_heads <= 0 ||
      c.num_heads % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inconsistent dimensions: layers ", c.num_layers, ", d_model ", c.d_model, ", heads ",
        c.num_heads, ", kv heads ", c.num_kv_heads));
  }
  c.head_dim = c.d_model / c.num_heads;
  if (f.Find(a + "attention.key_length")) {
    OSCARKV_ASSIGN_OR_RETURN(int64_t hd, f.GetInt(a + "attention.key_length"));
    c.head_dim = static_cast<int>(hd);
  }
  if (f.Find(a + "attention.value_length")) {
    OSCARKV_ASSIGN_OR_RETURN(int64_t vd, f.GetInt(a + "attention.value_length"));
    if (vd != c.head_dim) {
      return absl::UnimplementedError("key_length != value_length is not supported");
    }
  }
  c.rope_dim = c.head_dim;
  if (f.Find(a + "rope.dimension_count")) {
    OSCARKV_ASSIGN_OR_RETURN(int64_t rd, f.GetInt(a + "rope.dimension_count"));
    c.rope_dim = static_cast<int>(rd);
  }
  if (c.rope_dim > c.head_dim || c.rope_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("rope dimension ", c.rope_dim, " bad for head_dim ", c.head_dim));
  }
  if (f.Find(a + "rope.freq_base")) {
    OSCARKV_ASSIGN_OR_RETURN(c.rope_theta, f.GetFloat(a + "rope.freq_base"));
  }
  if (f.Find(a + "rope.scaling.type")) {
    OSCARKV_ASSIGN_OR_RETURN(std::string type, f.GetString(a + "rope.scaling.type"));
    if (type == "linear") {
      OSCARKV_ASSIGN_OR_RETURN(c.rope_scale, f.GetFloat(a + "rope.scaling.factor"));
    } else if (type != "none") {
      return absl::UnimplementedError(absl::StrCat("rope scaling '", type, "' is not supported"));
    }
  }
  if (f.Find(a + "attention.layer_norm_rms_epsilon")) {
    OSCARKV_ASSIGN_OR_RETURN(c.norm_eps, f.GetFloat(a + "attention.layer_norm_rms_epsilon"));
  }
  if (f.Find(a + "context_length")) {
    OSCARKV_ASSIGN_OR_RETURN(int64_t ctx, f.GetInt(a + "context_length"));
    c.context_length = static_cast<int>(ctx);
  }
  if (const GgufValue* toks = f.Find("tokenizer.ggml.tokens"); toks != nullptr) {
    c.vocab_size = static_cast<int>(toks->array.size());
  } else if (f.Find(a + "vocab_size")) {
    OSCARKV_ASSIGN_OR_RETURN(int64_t v, f.GetInt(a + "vocab_size"));
    c.vocab_size = static_cast<int>(v);
  }
  if (const GgufTensorInfo* e = f.FindTensor("token_embd.weight"); e != nullptr) {
    if (e->dims.size() != 2 || e->dims[0] != c.d_model) {
      return absl::InvalidArgumentError("token_embd.weight shape does not match embedding_length");
    }
    c.vocab_size = static_cast<int>(e->dims[1]);
  } else {
    return absl::NotFoundError("GGUF lacks token_embd.weight");
  }
  c.tied_embeddings = f.FindTensor("output.weight") == nullptr;
  return c;
}

}  // namespace oscarkv::model

#include "lib/model/hf_config.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "nlohmann/json.hpp"

namespace oscarkv::model {
namespace {

using Json = nlohmann::json;

absl::StatusOr<int> GetInt(const Json& j, const char* key, bool required, int dflt) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) return absl::InvalidArgumentError(absl::StrCat("config.json lacks '", key, "'"));
    return dflt;
  }
  if (!it->is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat("config.json '", key, "' is not an integer"));
  }
  return static_cast<int>(it->get<int64_t>());
}

absl::StatusOr<double> GetDouble(const Json& j, const char* key, double dflt) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return dflt;
  if (!it->is_number()) {
    return absl::InvalidArgumentError(absl::StrCat("config.json '", key, "' is not a number"));
  }
  return it->get<double>();
}

bool GetBool(const Json& j, const char* key, bool dflt) {
  auto it = j.find(key);
  return (it != j.end() && it->is_boolean()) ? it->get<bool>() : dflt;
}

// Applies a rope_scaling (4.x) or rope_parameters (5.x) object: "default"/absent type is no
// scaling, "linear" is a position scale, anything else is unsupported.
absl::Status ApplyRopeObject(const Json& r, const char* where, ModelConfig* c) {
  if (r.is_null()) return absl::OkStatus();
  if (!r.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("config.json '", where, "' is not an object"));
  }
  if (auto t = r.find("rope_theta"); t != r.end() && t->is_number()) c->rope_theta = t->get<double>();
  std::string type = "default";
  for (const char* k : {"rope_type", "type"}) {
    if (auto t = r.find(k); t != r.end() && t->is_string()) {
      type = t->get<std::string>();
      break;
    }
  }
  if (type == "default" || type == "none") return absl::OkStatus();
  if (type == "linear") {
    auto f = r.find("factor");
    if (f == r.end() || !f->is_number()) {
      return absl::InvalidArgumentError(absl::StrCat("config.json '", where, "' linear lacks factor"));
    }
    c->rope_scale = f->get<double>();
    return absl::OkStatus();
  }
  return absl::UnimplementedError(absl::StrCat("rope scaling '", type, "' (config.json '", where,
                                               "') is not supported (none, linear)"));
}

}  // namespace

absl::StatusOr<ModelConfig> ModelConfigFromHfJson(std::string_view json_text) {
  Json j = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("config.json is not a JSON object");
  }
  std::string arch;
  if (auto a = j.find("architectures"); a != j.end() && a->is_array() && !a->empty() &&
                                        (*a)[0].is_string()) {
    arch = (*a)[0].get<std::string>();
  } else if (auto mt = j.find("model_type"); mt != j.end() && mt->is_string()) {
    arch = mt->get<std::string>();  // fall back to model_type: "llama", "qwen2", "qwen3"
  }
  ModelConfig c;
  c.rope_style = RopeStyle::kNeox;  // HF keeps the un-permuted Q/K layout for every arch
  if (arch == "LlamaForCausalLM" || arch == "llama") {
    c.arch = Arch::kLlama;
    c.arch_name = "llama";
  } else if (arch == "Qwen2ForCausalLM" || arch == "qwen2") {
    c.arch = Arch::kQwen2;
    c.arch_name = "qwen2";
    c.qkv_bias = true;  // Qwen2Attention: q/k/v always biased, o_proj never
  } else if (arch == "Qwen3ForCausalLM" || arch == "qwen3") {
    c.arch = Arch::kQwen3;
    c.arch_name = "qwen3";
    c.qk_norm = true;
  } else {
    return absl::UnimplementedError(absl::StrCat(
        "model architecture '", arch,
        "' is not supported (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)"));
  }
  OSCARKV_ASSIGN_OR_RETURN(c.d_model, GetInt(j, "hidden_size", true, 0));
  OSCARKV_ASSIGN_OR_RETURN(c.num_layers, GetInt(j, "num_hidden_layers", true, 0));
  OSCARKV_ASSIGN_OR_RETURN(c.num_heads, GetInt(j, "num_attention_heads", true, 0));
  OSCARKV_ASSIGN_OR_RETURN(c.num_kv_heads, GetInt(j, "num_key_value_heads", false, c.num_heads));
  OSCARKV_ASSIGN_OR_RETURN(c.d_ff, GetInt(j, "intermediate_size", true, 0));
  OSCARKV_ASSIGN_OR_RETURN(c.vocab_size, GetInt(j, "vocab_size", true, 0));
  OSCARKV_ASSIGN_OR_RETURN(c.context_length, GetInt(j, "max_position_embeddings", false, 0));
  if (c.num_layers <= 0 || c.d_model <= 0 || c.num_heads <= 0 || c.num_kv_heads <= 0 ||
      c.num_heads % c.num_kv_heads != 0 || c.d_ff <= 0 || c.vocab_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: inconsistent dimensions: layers ", c.num_layers, ", hidden ", c.d_model,
        ", heads ", c.num_heads, ", kv heads ", c.num_kv_heads, ", intermediate ", c.d_ff,
        ", vocab ", c.vocab_size));
  }
  OSCARKV_ASSIGN_OR_RETURN(c.head_dim, GetInt(j, "head_dim", false, c.d_model / c.num_heads));
  if (c.head_dim <= 0 || c.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: bad head_dim ", c.head_dim));
  }
  c.rope_dim = c.head_dim;
  OSCARKV_ASSIGN_OR_RETURN(double partial, GetDouble(j, "partial_rotary_factor", 1.0));
  if (partial != 1.0) {
    return absl::UnimplementedError(
        absl::StrCat("partial_rotary_factor ", partial, " is not supported (only 1)"));
  }
  OSCARKV_ASSIGN_OR_RETURN(c.rope_theta, GetDouble(j, "rope_theta", 10000.0));
  if (auto r = j.find("rope_scaling"); r != j.end()) {
    OSCARKV_RETURN_IF_ERROR(ApplyRopeObject(*r, "rope_scaling", &c));
  }
  if (auto r = j.find("rope_parameters"); r != j.end()) {
    OSCARKV_RETURN_IF_ERROR(ApplyRopeObject(*r, "rope_parameters", &c));
  }
  OSCARKV_ASSIGN_OR_RETURN(c.norm_eps, GetDouble(j, "rms_norm_eps", 1e-6));
  c.tied_embeddings = GetBool(j, "tie_word_embeddings", false);
  if (auto act = j.find("hidden_act"); act != j.end() && act->is_string() &&
                                       act->get<std::string>() != "silu") {
    return absl::UnimplementedError(absl::StrCat(
        "hidden_act '", act->get<std::string>(), "' is not supported (only silu)"));
  }
  if (GetBool(j, "use_sliding_window", false)) {
    return absl::UnimplementedError("sliding-window attention (use_sliding_window) is not supported");
  }
  if (auto lt = j.find("layer_types"); lt != j.end() && lt->is_array()) {
    for (const Json& t : *lt) {
      if (t.is_string() && t.get<std::string>() != "full_attention") {
        return absl::UnimplementedError(absl::StrCat(
            "layer type '", t.get<std::string>(), "' is not supported (only full_attention)"));
      }
    }
  }
  if (c.arch != Arch::kQwen2 && GetBool(j, "attention_bias", false)) {
    // Llama/Qwen3 attention_bias also biases o_proj, which our forward does not have.
    return absl::UnimplementedError("attention_bias (biased q/k/v/o projections) is not supported");
  }
  if (GetBool(j, "mlp_bias", false)) {
    return absl::UnimplementedError("mlp_bias is not supported");
  }
  return c;
}

absl::StatusOr<ModelConfig> ModelConfigFromHfDir(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  auto c = ModelConfigFromHfJson(ss.str());
  if (!c.ok()) return Annotate(c.status(), path);
  return c;
}

}  // namespace oscarkv::model

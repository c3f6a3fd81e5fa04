// ModelWeights::FromSafetensors (declared in weights.h): Hugging Face tensor names to our layout.
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/model/gguf_file.h"
#include "lib/model/weights.h"

namespace oscarkv::model {
namespace {

std::string ShapeString(const std::vector<int64_t>& dims) {
  std::string s;
  for (int64_t d : dims) absl::StrAppend(&s, s.empty() ? "" : "x", d);
  return s;
}

// Converts tensor `name`, which must have exactly `shape` (PyTorch order, outermost first).
absl::Status Load(const SafetensorsCheckpoint& ck, const std::string& name,
                  std::vector<int64_t> shape, std::vector<float>* out) {
  const SafetensorsTensor* t = ck.FindTensor(name);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat("checkpoint lacks tensor '", name, "'"));
  if (t->shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has shape ",
                                                   ShapeString(t->shape), ", expected ",
                                                   ShapeString(shape)));
  }
  out->resize(t->num_elements);
  return SafetensorsToFloat32(*t, out->data());
}

QuantMatrix View(const SafetensorsCheckpoint& ck, const std::string& name) {
  const SafetensorsTensor* t = ck.FindTensor(name);
  QuantMatrix m;
  if (t == nullptr || t->shape.size() != 2) return m;
  switch (t->dtype) {
    case SafetensorsDtype::kF32: m.type = static_cast<uint32_t>(GgmlType::kF32); break;
    case SafetensorsDtype::kF16: m.type = static_cast<uint32_t>(GgmlType::kF16); break;
    case SafetensorsDtype::kBF16: m.type = static_cast<uint32_t>(GgmlType::kBF16); break;
    case SafetensorsDtype::kOther: return m;
  }
  m.data = t->data;
  m.rows = t->shape[0];
  m.cols = t->shape[1];
  return m;
}

}  // namespace

absl::StatusOr<ModelWeights> ModelWeights::FromSafetensors(const SafetensorsCheckpoint& ck,
                                                           const ModelConfig& c) {
  ModelWeights w;
  const int64_t dm = c.d_model, q_out = int64_t{c.num_heads} * c.head_dim,
                kv_out = int64_t{c.num_kv_heads} * c.head_dim;
  OSCARKV_RETURN_IF_ERROR(Load(ck, "model.embed_tokens.weight", {c.vocab_size, dm}, &w.token_embd));
  OSCARKV_RETURN_IF_ERROR(Load(ck, "model.norm.weight", {dm}, &w.output_norm));
  if (!c.tied_embeddings) {
    OSCARKV_RETURN_IF_ERROR(Load(ck, "lm_head.weight", {c.vocab_size, dm}, &w.output));
  }
  w.q_output = View(ck, c.tied_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  w.layers.resize(c.num_layers);
  for (int i = 0; i < c.num_layers; ++i) {
    LayerWeights& l = w.layers[i];
    const std::string p = absl::StrCat("model.layers.", i, ".");
    const std::string a = p + "self_attn.";
    OSCARKV_RETURN_IF_ERROR(Load(ck, p + "input_layernorm.weight", {dm}, &l.attn_norm));
    OSCARKV_RETURN_IF_ERROR(Load(ck, a + "q_proj.weight", {q_out, dm}, &l.wq));
    OSCARKV_RETURN_IF_ERROR(Load(ck, a + "k_proj.weight", {kv_out, dm}, &l.wk));
    OSCARKV_RETURN_IF_ERROR(Load(ck, a + "v_proj.weight", {kv_out, dm}, &l.wv));
    OSCARKV_RETURN_IF_ERROR(Load(ck, a + "o_proj.weight", {dm, q_out}, &l.wo));
    if (c.qkv_bias) {
      OSCARKV_RETURN_IF_ERROR(Load(ck, a + "q_proj.bias", {q_out}, &l.bq));
      OSCARKV_RETURN_IF_ERROR(Load(ck, a + "k_proj.bias", {kv_out}, &l.bk));
      OSCARKV_RETURN_IF_ERROR(Load(ck, a + "v_proj.bias", {kv_out}, &l.bv));
    }
    if (c.qk_norm) {
      OSCARKV_RETURN_IF_ERROR(Load(ck, a + "q_norm.weight", {c.head_dim}, &l.q_norm));
      OSCARKV_RETURN_IF_ERROR(Load(ck, a + "k_norm.weight", {c.head_dim}, &l.k_norm));
    }
    OSCARKV_RETURN_IF_ERROR(Load(ck, p + "post_attention_layernorm.weight", {dm}, &l.ffn_norm));
    OSCARKV_RETURN_IF_ERROR(Load(ck, p + "mlp.gate_proj.weight", {c.d_ff, dm}, &l.w_gate));
    OSCARKV_RETURN_IF_ERROR(Load(ck, p + "mlp.up_proj.weight", {c.d_ff, dm}, &l.w_up));
    OSCARKV_RETURN_IF_ERROR(Load(ck, p + "mlp.down_proj.weight", {dm, c.d_ff}, &l.w_down));
    l.q_wq = View(ck, a + "q_proj.weight");
    l.q_wk = View(ck, a + "k_proj.weight");
    l.q_wv = View(ck, a + "v_proj.weight");
    l.q_wo = View(ck, a + "o_proj.weight");
    l.q_gate = View(ck, p + "mlp.gate_proj.weight");
    l.q_up = View(ck, p + "mlp.up_proj.weight");
    l.q_down = View(ck, p + "mlp.down_proj.weight");
  }
  return w;
}

}  // namespace oscarkv::model

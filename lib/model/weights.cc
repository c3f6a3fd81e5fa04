#include "lib/model/weights.h"

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/model/dequantize.h"

namespace oscarkv::model {
namespace {

// Dequantizes tensor `name`, which must have exactly `dims` (ggml order, fastest first).
absl::Status Load(const GgufFile& f, const std::string& name, std::vector<int64_t> dims,
                  std::vector<float>* out) {
  const GgufTensorInfo* t = f.FindTensor(name);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat("GGUF lacks tensor '", name, "'"));
  if (t->dims != dims) {
    std::string got, want;
    for (int64_t d : t->dims) absl::StrAppend(&got, got.empty() ? "" : "x", d);
    for (int64_t d : dims) absl::StrAppend(&want, want.empty() ? "" : "x", d);
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' has shape ", got, ", expected ", want));
  }
  out->resize(t->num_elements);
  return Annotate(Dequantize(t->type, t->data, t->num_bytes, t->num_elements, out->data()),
                  absl::StrCat("tensor '", name, "'"));
}

QuantMatrix Quant(const GgufFile& f, const std::string& name) {
  const GgufTensorInfo* t = f.FindTensor(name);
  QuantMatrix m;
  if (t == nullptr || t->dims.size() != 2) return m;
  m.type = t->type;
  m.data = t->data;
  m.cols = t->dims[0];
  m.rows = t->dims[1];
  return m;
}

}  // namespace

absl::StatusOr<ModelWeights> ModelWeights::FromGguf(const GgufFile& f, const ModelConfig& c) {
  ModelWeights w;
  const int64_t dm = c.d_model, q_out = int64_t{c.num_heads} * c.head_dim,
                kv_out = int64_t{c.num_kv_heads} * c.head_dim;
  OSCARKV_RETURN_IF_ERROR(Load(f, "token_embd.weight", {dm, c.vocab_size}, &w.token_embd));
  OSCARKV_RETURN_IF_ERROR(Load(f, "output_norm.weight", {dm}, &w.output_norm));
  if (!c.tied_embeddings) {
    OSCARKV_RETURN_IF_ERROR(Load(f, "output.weight", {dm, c.vocab_size}, &w.output));
  }
  if (f.FindTensor("rope_freqs.weight") != nullptr) {
    OSCARKV_RETURN_IF_ERROR(Load(f, "rope_freqs.weight", {c.rope_dim / 2}, &w.rope_freqs));
  }
  w.q_output = Quant(f, c.tied_embeddings ? "token_embd.weight" : "output.weight");
  w.layers.resize(c.num_layers);
  for (int i = 0; i < c.num_layers; ++i) {
    LayerWeights& l = w.layers[i];
    const std::string p = absl::StrCat("blk.", i, ".");
    OSCARKV_RETURN_IF_ERROR(Load(f, p + "attn_norm.weight", {dm}, &l.attn_norm));
    OSCARKV_RETURN_IF_ERROR(Load(f, p + "attn_q.weight", {dm, q_out}, &l.wq));
    OSCARKV_RETURN_IF_ERROR(Load(f, p + "attn_k.weight", {dm, kv_out}, &l.wk));
    OSCARKV_RETURN_IF_ERROR(Load(f, p + "attn_v.weight", {dm, kv_out}, &l.wv));
    OSCARKV_RETURN_IF_ERROR(Load(f, p + "attn_output.weight", {q_out, dm}, &l.wo));
    if (c.qkv_bias) {
      OSCARKV_RETURN_IF_ERROR(Load(f, p + "attn_q.bias", {q_out}, &l.bq));
      OSCARKV_RETURN_IF_ERROR(Load(f, p + "attn_k.bias", {kv_out}, &l.bk));
      OSCARKV_RETURN_IF_ERROR(Load(f, p + "attn_v.bias", {kv_out}, &l.bv));
    }
    if (c.qk_norm) {
      OSCARKV_RETURN_IF_ERROR(Load(f, p + "attn_q_norm.weight", {c.head_dim}, &l.q_norm));
      OSCARKV_RETURN_IF_ERROR(Load(f, p + "attn_k_norm.weight", {c.head_dim}, &l.k_norm));
    }
    OSCARKV_RETURN_IF_ERROR(Load(f, p + "ffn_norm.weight", {dm}, &l.ffn_norm));
    OSCARKV_RETURN_IF_ERROR(Load(f, p + "ffn_gate.weight", {dm, c.d_ff}, &l.w_gate));
    OSCARKV_RETURN_IF_ERROR(Load(f, p + "ffn_up.weight", {dm, c.d_ff}, &l.w_up));
    OSCARKV_RETURN_IF_ERROR(Load(f, p + "ffn_down.weight", {c.d_ff, dm}, &l.w_down));
    l.q_wq = Quant(f, p + "attn_q.weight");
    l.q_wk = Quant(f, p + "attn_k.weight");
    l.q_wv = Quant(f, p + "attn_v.weight");
    l.q_wo = Quant(f, p + "attn_output.weight");
    l.q_gate = Quant(f, p + "ffn_gate.weight");
    l.q_up = Quant(f, p + "ffn_up.weight");
    l.q_down = Quant(f, p + "ffn_down.weight");
  }
  return w;
}

}  // namespace oscarkv::model

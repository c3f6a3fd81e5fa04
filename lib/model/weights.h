// Model weights dequantized to float32 at load (SmolLM2-135M: ~0.55 GB), from a GGUF file or a
// Hugging Face safetensors checkpoint. Matrices keep ggml's layout: a linear layer y = W x with
// x in R^in, y in R^out is `out` rows of `in` floats (HF's nn.Linear [out, in] is the same).
#ifndef OSCARKV_LIB_MODEL_WEIGHTS_H_
#define OSCARKV_LIB_MODEL_WEIGHTS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "lib/model/gguf_file.h"
#include "lib/model/model_config.h"
#include "lib/model/quant_gemv.h"
#include "lib/model/safetensors_file.h"

namespace oscarkv::model {

struct LayerWeights {
  std::vector<float> attn_norm;       // [d_model]
  std::vector<float> wq, wk, wv, wo;  // [Hq*D, d_model], [Hkv*D, d_model] x2, [d_model, Hq*D]
  std::vector<float> bq, bk, bv;      // qwen2 only: [Hq*D], [Hkv*D], [Hkv*D]; else empty
  std::vector<float> q_norm, k_norm;  // qwen3 only: [D]; else empty
  std::vector<float> ffn_norm;        // [d_model]
  std::vector<float> w_gate, w_up;    // [d_ff, d_model]
  std::vector<float> w_down;          // [d_model, d_ff]
  // The same matrices as stored in the file (for QuantGemv in decode). From safetensors they
  // are F32/F16/BF16 views (GgmlType kF32/kF16/kBF16), which QuantGemv does not take, so
  // decode uses the float32 copies above.
  QuantMatrix q_wq, q_wk, q_wv, q_wo, q_gate, q_up, q_down;
};

struct ModelWeights {
  std::vector<float> token_embd;   // [vocab, d_model]
  std::vector<float> output_norm;  // [d_model]
  std::vector<float> output;       // [vocab, d_model]; empty when tied to token_embd
  std::vector<float> rope_freqs;   // optional per-pair frequency divisors [rope_dim/2]; else empty
  std::vector<LayerWeights> layers;
  QuantMatrix q_output;            // the file's output (or tied token_embd) matrix

  const std::vector<float>& output_matrix() const { return output.empty() ? token_embd : output; }

  // Dequantizes every tensor the config needs, checking its shape.
  // @return kNotFound naming a missing tensor; kInvalidArgument naming a mis-shaped one;
  //   kUnimplemented for a tensor type we cannot dequantize.
  static absl::StatusOr<ModelWeights> FromGguf(const GgufFile& file, const ModelConfig& config);

  // Converts a Hugging Face checkpoint's tensors (model.embed_tokens.weight, model.norm.weight,
  // lm_head.weight unless tied, model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj,
  // self_attn.{q,k,v}_proj.bias (qwen2), self_attn.{q,k}_norm (qwen3), post_attention_layernorm,
  // mlp.{gate,up,down}_proj}.weight) to float32, checking each shape. The q_* views point into
  // `ckpt`, which must outlive the result.
  // @return kNotFound naming a missing tensor; kInvalidArgument naming a mis-shaped one;
  //   kUnimplemented for a dtype other than F32/F16/BF16.
  static absl::StatusOr<ModelWeights> FromSafetensors(const SafetensorsCheckpoint& ckpt,
                                                      const ModelConfig& config);
};

}  // namespace oscarkv::model

#endif  // OSCARKV_LIB_MODEL_WEIGHTS_H_

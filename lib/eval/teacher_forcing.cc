#include "lib/eval/teacher_forcing.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/kvformat/float16.h"
#include "lib/model/forward_cpu.h"
#include "lib/quant/decode_emulation.h"

namespace oscarkv::eval {

absl::StatusOr<quant::ThreeTierCacheConfig> CodecSetup::CacheConfig(
    const model::ModelConfig& config) const {
  std::vector<const quant::Codec*> ptrs;
  for (const auto& c : layers) ptrs.push_back(c.get());
  OSCARKV_ASSIGN_OR_RETURN(quant::ThreeTierCacheConfig cfg,
                           quant::ThreeTierCacheConfigFromCodecs(ptrs, config.num_kv_heads));
  cfg.k_clip_ratio = k_clip;
  cfg.v_clip_ratio = v_clip;
  return cfg;
}

absl::StatusOr<CodecSetup> PrepareCodec(const model::Model& model, std::string_view codec_name,
                                        const quant::Calibration* calibration, float k_clip,
                                        float v_clip) {
  OSCARKV_ASSIGN_OR_RETURN(const quant::CodecSpec* spec, quant::FindCodec(codec_name));
  const model::ModelConfig& c = model.config();
  CodecSetup setup;
  setup.spec = spec;
  setup.label = std::string(codec_name);
  if (spec->needs_calibration) {
    if (calibration == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("codec ", std::string(codec_name), " needs a calibration (",
                       std::string(spec->k_objective), "/", std::string(spec->v_objective), ")"));
    }
    if (static_cast<int>(calibration->layers.size()) != c.num_layers) {
      return absl::InvalidArgumentError(absl::StrCat("calibration has ",
                                                     calibration->layers.size(),
                                                     " layers, model ", c.num_layers));
    }
  }
  for (int l = 0; l < c.num_layers; ++l) {
    OSCARKV_ASSIGN_OR_RETURN(
        auto codec, quant::Codec::Create(*spec, c.head_dim,
                                         spec->needs_calibration ? calibration : nullptr, l));
    setup.layers.push_back(std::move(codec));
  }
  setup.k_clip = setup.layers[0]->clip_ratio(quant::KvSide::kKey);
  setup.v_clip = setup.layers[0]->clip_ratio(quant::KvSide::kValue);
  // Only codecs that clip take an override (clipping M1/M2/M7 would change their definition).
  if (k_clip > 0 && spec->k_clip_ratio < 1.0f) setup.k_clip = k_clip;
  if (v_clip > 0 && spec->v_clip_ratio < 1.0f) setup.v_clip = v_clip;
  return setup;
}

void OutputLogits(const model::Model& model, const float* hidden, int64_t rows,
                  std::vector<float>* logits) {
  const model::ModelConfig& c = model.config();
  logits->resize(rows * c.vocab_size);
  model::Linear(hidden, model.weights().output_matrix().data(), nullptr, rows, c.d_model,
                c.vocab_size, logits->data());
}

namespace {

// p = softmax(scale * q . k_j (* ts_j)) over rows j < n, in float64.
void SoftmaxRow(const float* q, const float* k, const float* token_scale, int n, int d,
                double scale, std::vector<double>* p) {
  p->resize(n);
  double mx = -1e300;
  for (int j = 0; j < n; ++j) {
    double s = 0;
    for (int i = 0; i < d; ++i) s += static_cast<double>(q[i]) * k[j * d + i];
    if (token_scale != nullptr) s *= token_scale[j];
    (*p)[j] = s * scale;
    mx = std::max(mx, (*p)[j]);
  }
  double sum = 0;
  for (int j = 0; j < n; ++j) sum += ((*p)[j] = std::exp((*p)[j] - mx));
  for (int j = 0; j < n; ++j) (*p)[j] /= sum;
}

void Fidelity(const CodecSetup& codec, const quant::EmulatedLayerKv& kv, int layer, const float* q,
              const float* k, const float* v, const float* out_codec, int t_total, int hq,
              int hkv, int hd, float scale, const ForwardOptions& options, LayerFidelity* f) {
  f->layer = layer;
  // Reference: BF16 attention over the same (unrotated) inputs.
  std::vector<float> kb(k, k + static_cast<size_t>(t_total) * hkv * hd);
  std::vector<float> vb(v, v + kb.size());
  for (auto& x : kb) x = kvformat::RoundToBf16(x);
  for (auto& x : vb) x = kvformat::RoundToBf16(x);
  std::vector<float> ref(static_cast<size_t>(t_total) * hq * hd);
  model::PromptAttention(q, kb.data(), vb.data(), t_total, hq, hkv, hd, scale, ref.data());
  double num = 0, den = 0;
  for (int64_t t = options.fidelity_from; t < t_total; ++t) {
    for (int64_t i = 0; i < static_cast<int64_t>(hq) * hd; ++i) {
      const double a = ref[t * hq * hd + i], b = out_codec[t * hq * hd + i];
      num += (a - b) * (a - b);
      den += a * a;
    }
  }
  f->attn_out_rel_err = den > 0 ? std::sqrt(num / den) : 0.0;
  auto rel = [](const std::vector<float>& a, const std::vector<float>& b) {
    double n = 0, d = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      n += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
      d += static_cast<double>(b[i]) * b[i];
    }
    return d > 0 ? n / d : 0.0;
  };
  f->k_rel_mse = rel(kv.k_deq, kv.k_fp);
  f->v_rel_mse = rel(kv.v_deq, kv.v_fp);
  // Attention-row KL on sampled queries: reference rows from bf16 K in the model basis, codec
  // rows from exactly what the query reads (SeenRowsAt) with the rotated query.
  const int g = hq / hkv;
  std::vector<float> seen_k, seen_v, seen_s, qrot(hd), kref;
  std::vector<double> p, pc;
  double kl_sum = 0;
  int64_t kl_n = 0;
  for (int t = options.fidelity_from; t < t_total; t += std::max(1, options.fidelity_stride)) {
    for (int h = 0; h < hkv; ++h) {
      quant::SeenRowsAt(*codec.spec, kv, t, h, &seen_k, &seen_v, &seen_s);
      kref.resize(static_cast<size_t>(t + 1) * hd);
      for (int j = 0; j <= t; ++j) {
        std::copy_n(kb.data() + (static_cast<size_t>(j) * hkv + h) * hd, hd, kref.data() + j * hd);
      }
      for (int qh = h * g; qh < (h + 1) * g; ++qh) {
        const float* qrow = q + (static_cast<size_t>(t) * hq + qh) * hd;
        SoftmaxRow(qrow, kref.data(), nullptr, t + 1, hd, scale, &p);
        std::copy_n(qrow, hd, qrot.data());
        (void)codec.layers[layer]->RotateQuery(qrot);
        SoftmaxRow(qrot.data(), seen_k.data(), seen_s.empty() ? nullptr : seen_s.data(), t + 1,
                   hd, scale, &pc);
        double kl = 0;
        for (int j = 0; j <= t; ++j) {
          if (p[j] > 0) kl += p[j] * (std::log(p[j]) - std::log(std::max(pc[j], 1e-300)));
        }
        kl_sum += kl;
        ++kl_n;
      }
    }
  }
  f->attn_row_kl = kl_n > 0 ? kl_sum / kl_n : 0.0;
}

}  // namespace

absl::StatusOr<ForwardResult> TeacherForcedForward(const model::Model& model,
                                                   const CodecSetup& codec,
                                                   std::span<const int32_t> tokens,
                                                   const ForwardOptions& options) {
  const model::ModelConfig& c = model.config();
  const model::ModelWeights& weights = model.weights();
  const int64_t rows = static_cast<int64_t>(tokens.size());
  if (rows == 0) return absl::InvalidArgumentError("empty window");
  const int64_t dm = c.d_model, hq = c.num_heads, hkv = c.num_kv_heads, hd = c.head_dim;
  const int64_t qdim = hq * hd, kvdim = hkv * hd, dff = c.d_ff;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float eps = static_cast<float>(c.norm_eps);
  const float* freq_div = weights.rope_freqs.empty() ? nullptr : weights.rope_freqs.data();
  for (int32_t tok : tokens) {
    if (tok < 0 || tok >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", tok, " outside vocab"));
    }
  }
  std::vector<float> x(rows * dm), h(rows * dm), tmp(rows * dm);
  std::vector<float> q(rows * qdim), k(rows * kvdim), v(rows * kvdim), attn(rows * qdim);
  std::vector<float> gate(rows * dff), up(rows * dff);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(weights.token_embd.data() + static_cast<int64_t>(tokens[r]) * dm, dm,
                x.data() + r * dm);
  }
  ForwardResult result;
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const model::LayerWeights& w = weights.layers[layer];
    model::RmsNormTo(x.data(), w.attn_norm.data(), rows, dm, eps, h.data());
    model::Linear(h.data(), w.wq.data(), w.bq.empty() ? nullptr : w.bq.data(), rows, dm, qdim,
                  q.data());
    model::Linear(h.data(), w.wk.data(), w.bk.empty() ? nullptr : w.bk.data(), rows, dm, kvdim,
                  k.data());
    model::Linear(h.data(), w.wv.data(), w.bv.empty() ? nullptr : w.bv.data(), rows, dm, kvdim,
                  v.data());
    if (c.qk_norm) {
      model::RmsNorm(q.data(), w.q_norm.data(), rows * hq, hd, eps);
      model::RmsNorm(k.data(), w.k_norm.data(), rows * hkv, hd, eps);
    }
    for (int64_t r = 0; r < rows; ++r) {
      model::ApplyRope(q.data() + r * qdim, hq, hd, c.rope_dim, r, c.rope_theta, c.rope_scale,
                       freq_div, c.rope_style);
      model::ApplyRope(k.data() + r * kvdim, hkv, hd, c.rope_dim, r, c.rope_theta, c.rope_scale,
                       freq_div, c.rope_style);
    }
    OSCARKV_ASSIGN_OR_RETURN(
        quant::EmulatedLayerKv kv,
        quant::BuildEmulatedLayerKv(*codec.spec, codec.rot_k(layer), codec.rot_v(layer),
                                    static_cast<int>(rows), hkv, hd, k.data(), v.data(),
                                    codec.k_clip, codec.v_clip, codec.per_token_group));
    OSCARKV_RETURN_IF_ERROR(quant::EmulateDecodeAttention(*codec.spec, kv, codec.rot_k(layer),
                                                          codec.rot_v(layer), q.data(), hq,
                                                          attn.data(), scale));
    if (options.attention_fidelity) {
      LayerFidelity f;
      Fidelity(codec, kv, layer, q.data(), k.data(), v.data(), attn.data(),
               static_cast<int>(rows), hq, hkv, hd, scale, options, &f);
      result.fidelity.push_back(f);
    }
    if (options.cache_sink != nullptr) {
      OSCARKV_RETURN_IF_ERROR(
          options.cache_sink->Append(layer, k.data(), v.data(), static_cast<int>(rows)));
    }
    model::Linear(attn.data(), w.wo.data(), nullptr, rows, qdim, dm, tmp.data());
    for (int64_t i = 0; i < rows * dm; ++i) x[i] += tmp[i];
    model::RmsNormTo(x.data(), w.ffn_norm.data(), rows, dm, eps, h.data());
    model::Linear(h.data(), w.w_gate.data(), nullptr, rows, dm, dff, gate.data());
    model::Linear(h.data(), w.w_up.data(), nullptr, rows, dm, dff, up.data());
    model::SiluMul(gate.data(), up.data(), rows * dff);
    model::Linear(gate.data(), w.w_down.data(), nullptr, rows, dff, dm, tmp.data());
    for (int64_t i = 0; i < rows * dm; ++i) x[i] += tmp[i];
    if (options.on_layer) options.on_layer(layer);
  }
  result.hidden.resize(rows * dm);
  model::RmsNormTo(x.data(), weights.output_norm.data(), rows, dm, eps, result.hidden.data());
  return result;
}

absl::StatusOr<std::vector<float>> CacheForward(const model::Model& model,
                                                std::span<model::KvCache* const> caches,
                                                std::span<const int32_t> tokens,
                                                std::span<const int64_t> positions) {
  const model::ModelConfig& c = model.config();
  const model::ModelWeights& weights = model.weights();
  const int64_t rows = static_cast<int64_t>(tokens.size());
  if (rows == 0 || caches.size() != tokens.size() || positions.size() != tokens.size()) {
    return absl::InvalidArgumentError("CacheForward needs one cache and position per token");
  }
  const int64_t dm = c.d_model, hq = c.num_heads, hkv = c.num_kv_heads, hd = c.head_dim;
  const int64_t qdim = hq * hd, kvdim = hkv * hd, dff = c.d_ff;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float eps = static_cast<float>(c.norm_eps);
  const float* freq_div = weights.rope_freqs.empty() ? nullptr : weights.rope_freqs.data();
  for (int32_t tok : tokens) {
    if (tok < 0 || tok >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", tok, " outside vocab"));
    }
  }
  std::vector<float> x(rows * dm), h(rows * dm), tmp(rows * dm);
  std::vector<float> q(rows * qdim), k(rows * kvdim), v(rows * kvdim), attn(rows * qdim);
  std::vector<float> gate(rows * dff), up(rows * dff);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(weights.token_embd.data() + static_cast<int64_t>(tokens[r]) * dm, dm,
                x.data() + r * dm);
  }
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const model::LayerWeights& w = weights.layers[layer];
    model::RmsNormTo(x.data(), w.attn_norm.data(), rows, dm, eps, h.data());
    model::Linear(h.data(), w.wq.data(), w.bq.empty() ? nullptr : w.bq.data(), rows, dm, qdim,
                  q.data());
    model::Linear(h.data(), w.wk.data(), w.bk.empty() ? nullptr : w.bk.data(), rows, dm, kvdim,
                  k.data());
    model::Linear(h.data(), w.wv.data(), w.bv.empty() ? nullptr : w.bv.data(), rows, dm, kvdim,
                  v.data());
    if (c.qk_norm) {
      model::RmsNorm(q.data(), w.q_norm.data(), rows * hq, hd, eps);
      model::RmsNorm(k.data(), w.k_norm.data(), rows * hkv, hd, eps);
    }
    for (int64_t r = 0; r < rows; ++r) {
      model::ApplyRope(q.data() + r * qdim, hq, hd, c.rope_dim, positions[r], c.rope_theta,
                       c.rope_scale, freq_div, c.rope_style);
      model::ApplyRope(k.data() + r * kvdim, hkv, hd, c.rope_dim, positions[r], c.rope_theta,
                       c.rope_scale, freq_div, c.rope_style);
    }
    for (int64_t r = 0; r < rows; ++r) {
      OSCARKV_RETURN_IF_ERROR(
          caches[r]->AppendLayer(layer, k.data() + r * kvdim, v.data() + r * kvdim, 1));
      OSCARKV_RETURN_IF_ERROR(caches[r]->Attend(layer, q.data() + r * qdim, static_cast<int>(hq),
                                                scale, attn.data() + r * qdim));
    }
    model::Linear(attn.data(), w.wo.data(), nullptr, rows, qdim, dm, tmp.data());
    for (int64_t i = 0; i < rows * dm; ++i) x[i] += tmp[i];
    model::RmsNormTo(x.data(), w.ffn_norm.data(), rows, dm, eps, h.data());
    model::Linear(h.data(), w.w_gate.data(), nullptr, rows, dm, dff, gate.data());
    model::Linear(h.data(), w.w_up.data(), nullptr, rows, dm, dff, up.data());
    model::SiluMul(gate.data(), up.data(), rows * dff);
    model::Linear(gate.data(), w.w_down.data(), nullptr, rows, dff, dm, tmp.data());
    for (int64_t i = 0; i < rows * dm; ++i) x[i] += tmp[i];
  }
  std::vector<float> out(rows * dm);
  model::RmsNormTo(x.data(), weights.output_norm.data(), rows, dm, eps, out.data());
  return out;
}

absl::Status FanoutKvCache::AppendLayer(int layer, const float* k, const float* v,
                                        int num_tokens) {
  for (model::KvCache* t : targets_) {
    OSCARKV_RETURN_IF_ERROR(t->AppendLayer(layer, k, v, num_tokens));
  }
  return absl::OkStatus();
}

absl::Status FanoutKvCache::Attend(int, const float*, int, float, float*) {
  return absl::FailedPreconditionError("FanoutKvCache only records a prompt");
}

int64_t FanoutKvCache::Length(int layer) const {
  return targets_.empty() ? 0 : targets_[0]->Length(layer);
}

}  // namespace oscarkv::eval

#include "lib/model/kv_cache.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "lib/kvformat/float16.h"

namespace oscarkv::model {

FullKvCache::FullKvCache(int num_layers, int num_kv_heads, int head_dim, bool round_to_bf16)
    : num_layers_(num_layers),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      round_to_bf16_(round_to_bf16),
      k_(num_layers),
      v_(num_layers) {}

absl::Status FullKvCache::AppendLayer(int layer, const float* k, const float* v, int num_tokens) {
  if (layer < 0 || layer >= num_layers_) {
    return absl::InvalidArgumentError(absl::StrCat("layer ", layer, " out of range"));
  }
  const size_t n = static_cast<size_t>(num_tokens) * num_kv_heads_ * head_dim_;
  std::vector<float>& kd = k_[layer];
  std::vector<float>& vd = v_[layer];
  const size_t old = kd.size();
  kd.insert(kd.end(), k, k + n);
  vd.insert(vd.end(), v, v + n);
  if (round_to_bf16_) {
    for (size_t i = old; i < kd.size(); ++i) {
      kd[i] = kvformat::RoundToBf16(kd[i]);
      vd[i] = kvformat::RoundToBf16(vd[i]);
    }
  }
  return absl::OkStatus();
}

absl::Status FullKvCache::Attend(int layer, const float* q, int num_q_heads, float scale,
                                 float* out) {
  if (layer < 0 || layer >= num_layers_) {
    return absl::InvalidArgumentError(absl::StrCat("layer ", layer, " out of range"));
  }
  if (num_q_heads % num_kv_heads_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat(num_q_heads, " query heads for ",
                                                   num_kv_heads_, " KV heads"));
  }
  const int64_t t_len = Length(layer);
  if (t_len == 0) return absl::FailedPreconditionError("attention over an empty cache");
  const int group = num_q_heads / num_kv_heads_;
  const int d = head_dim_;
  const int row = num_kv_heads_ * d;
  const float* kd = k_[layer].data();
  const float* vd = v_[layer].data();
  scores_.resize(t_len);
  for (int h = 0; h < num_q_heads; ++h) {
    const int g = h / group;
    const float* qh = q + h * d;
    float mx = -INFINITY;
    for (int64_t t = 0; t < t_len; ++t) {
      const float* kt = kd + t * row + g * d;
      float s = 0;
      for (int i = 0; i < d; ++i) s += qh[i] * kt[i];
      s *= scale;
      scores_[t] = s;
      mx = std::max(mx, s);
    }
    float sum = 0;
    for (int64_t t = 0; t < t_len; ++t) {
      scores_[t] = std::exp(scores_[t] - mx);
      sum += scores_[t];
    }
    const float inv = 1.0f / sum;
    float* oh = out + h * d;
    std::fill(oh, oh + d, 0.0f);
    for (int64_t t = 0; t < t_len; ++t) {
      const float p = scores_[t] * inv;
      const float* vt = vd + t * row + g * d;
      for (int i = 0; i < d; ++i) oh[i] += p * vt[i];
    }
  }
  return absl::OkStatus();
}

int64_t FullKvCache::Length(int layer) const {
  if (layer < 0 || layer >= num_layers_) return 0;
  return static_cast<int64_t>(k_[layer].size()) / (num_kv_heads_ * head_dim_);
}

}  // namespace oscarkv::model

#include "lib/eval/three_tier_kv_cache.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace oscarkv::eval {

absl::Status ThreeTierKvCache::AppendLayer(int layer, const float* k, const float* v,
                                           int num_tokens) {
  return cache_->Append(layer, k, v, num_tokens);
}

absl::Status ThreeTierKvCache::Attend(int layer, const float* q, int num_q_heads, float scale,
                                      float* out) {
  if (std::abs(scale - sm_scale_) > 1e-6f * std::abs(sm_scale_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Attend scale ", scale, " != the cache's sm_scale ", sm_scale_));
  }
  return cache_->Attend(layer, q, num_q_heads, out);
}

int64_t ThreeTierKvCache::Length(int layer) const { return cache_->tokens(layer); }

}  // namespace oscarkv::eval

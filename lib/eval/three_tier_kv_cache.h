// Adapter: lib/quant's ThreeTierCache (true token-by-token decode state of a codec) behind
// lib/model's KvCache interface, so Model::Prefill / DecodeStep / generation run over a codec's
// real cache. Attend's `scale` must equal the cache's sm_scale (checked).
#ifndef OSCARKV_LIB_EVAL_THREE_TIER_KV_CACHE_H_
#define OSCARKV_LIB_EVAL_THREE_TIER_KV_CACHE_H_

#include <memory>

#include "lib/model/kv_cache.h"
#include "lib/quant/three_tier_cache.h"

namespace oscarkv::eval {

class ThreeTierKvCache : public model::KvCache {
 public:
  explicit ThreeTierKvCache(std::unique_ptr<quant::ThreeTierCache> cache, float sm_scale)
      : cache_(std::move(cache)), sm_scale_(sm_scale) {}

  absl::Status AppendLayer(int layer, const float* k, const float* v, int num_tokens) override;
  absl::Status Attend(int layer, const float* q, int num_q_heads, float scale,
                      float* out) override;
  int64_t Length(int layer) const override;

  const quant::ThreeTierCache& cache() const { return *cache_; }

 private:
  std::unique_ptr<quant::ThreeTierCache> cache_;
  float sm_scale_;
};

}  // namespace oscarkv::eval

#endif  // OSCARKV_LIB_EVAL_THREE_TIER_KV_CACHE_H_

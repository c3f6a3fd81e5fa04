// The model's KvCache (lib/model/kv_cache.h) backed by the three-tier cache of lib/quant
// (BF16 sink · INT2 history · BF16 recent) in any codec M0–M8, plus the factory that turns a
// codec name and an optional calibration file into caches for new sequences. This is how
// `oscarkv generate --codec`, the decode worker and the prefill worker get a quantised cache.
#ifndef OSCARKV_LIB_ENGINE_QUANT_KV_CACHE_H_
#define OSCARKV_LIB_ENGINE_QUANT_KV_CACHE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/model/kv_cache.h"
#include "lib/model/model_config.h"
#include "lib/quant/calibration.h"
#include "lib/quant/codec.h"
#include "lib/quant/three_tier_cache.h"

namespace oscarkv::engine {

// KvCache over a ThreeTierCache. Not thread-safe (one sequence, one thread at a time).
class QuantKvCache : public model::KvCache {
 public:
  // `score_scale`: the scale `cache` was configured with (ThreeTierCacheConfig::sm_scale).
  QuantKvCache(std::unique_ptr<quant::ThreeTierCache> cache, float score_scale)
      : cache_(std::move(cache)), score_scale_(score_scale) {}

  absl::Status AppendLayer(int layer, const float* k, const float* v, int num_tokens) override;
  // `scale` must equal the cache's score scale (1/sqrt(head_dim)); kInvalidArgument otherwise.
  absl::Status Attend(int layer, const float* q, int num_q_heads, float scale,
                      float* out) override;
  int64_t Length(int layer) const override;
  bool AttendsOverThePool() const override { return cache_->config().run_on_threads != nullptr; }

  const quant::ThreeTierCache& tiers() const { return *cache_; }
  quant::ThreeTierCache& mutable_tiers() { return *cache_; }

 private:
  std::unique_ptr<quant::ThreeTierCache> cache_;
  float score_scale_;
};

// Makes caches of one codec for one model. Thread-safe after Create.
class KvCacheFactory {
 public:
  // `codec_name`: a lib/quant codec name (bf16, oscar, kivi2, ...). `calibration_path`: required
  // for calibrated codecs (oscar, oscar-gram); its head_dim and layer count must match the model.
  // @return kNotFound for an unknown codec; kFailedPrecondition when a calibration is needed but
  //   absent or was made for another model (`model_fingerprint`, when both are non-zero);
  //   kInvalidArgument when it does not fit the model; file errors of the calibration.
  static absl::StatusOr<std::unique_ptr<KvCacheFactory>> Create(
      const model::ModelConfig& config, const std::string& codec_name,
      const std::string& calibration_path, uint64_t model_fingerprint = 0);

  // A fresh, empty cache for one sequence.
  absl::StatusOr<std::unique_ptr<model::KvCache>> NewCache() const;

  const quant::CodecSpec& spec() const { return *spec_; }
  // The configuration every cache of this factory is created with.
  const quant::ThreeTierCacheConfig& tier_config() const { return tier_config_; }
  // XXH3-64 of the calibration file bytes; 0 when the codec uses none (block headers carry it).
  uint64_t calibration_fingerprint() const { return calibration_fingerprint_; }

 private:
  KvCacheFactory() = default;
  const quant::CodecSpec* spec_ = nullptr;
  quant::ThreeTierCacheConfig tier_config_;
  uint64_t calibration_fingerprint_ = 0;
};

}  // namespace oscarkv::engine

#endif  // OSCARKV_LIB_ENGINE_QUANT_KV_CACHE_H_

#include "lib/engine/quant_kv_cache.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/model/thread_pool.h"
#include "lib/quant/codec_spec.h"

namespace oscarkv::engine {

absl::Status QuantKvCache::AppendLayer(int layer, const float* k, const float* v,
                                       int num_tokens) {
  return cache_->Append(layer, k, v, num_tokens);
}

absl::Status QuantKvCache::Attend(int layer, const float* q, int num_q_heads, float scale,
                                  float* out) {
  // The tiers apply their configured scale; a different one would silently change attention.
  if (std::abs(scale - score_scale_) > 1e-6f * score_scale_) {
    return absl::InvalidArgumentError(absl::StrCat("attention scale ", scale,
                                                   " differs from the cache's ", score_scale_));
  }
  return cache_->Attend(layer, q, num_q_heads, out);
}

int64_t QuantKvCache::Length(int layer) const { return cache_->tokens(layer); }

absl::StatusOr<std::unique_ptr<KvCacheFactory>> KvCacheFactory::Create(
    const model::ModelConfig& config, const std::string& codec_name,
    const std::string& calibration_path, uint64_t model_fingerprint) {
  OSCARKV_ASSIGN_OR_RETURN(const quant::CodecSpec* spec, quant::FindCodec(codec_name));
  std::unique_ptr<KvCacheFactory> factory(new KvCacheFactory());
  factory->spec_ = spec;

  quant::Calibration calibration;
  const quant::Calibration* calibration_ptr = nullptr;
  if (spec->needs_calibration) {
    if (calibration_path.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("codec ", std::string(spec->name), " needs a calibration file (--calibration); ",
                       "`oscarkv calibrate` makes one, scripts/setup.sh makes the default"));
    }
    std::ifstream in(calibration_path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", calibration_path));
    std::stringstream bytes;
    bytes << in.rdbuf();
    OSCARKV_ASSIGN_OR_RETURN(calibration, quant::ParseCalibration(bytes.str()));
    if (calibration.head_dim != config.head_dim ||
        static_cast<int>(calibration.layers.size()) != config.num_layers) {
      return absl::InvalidArgumentError(absl::StrCat(
          calibration_path, ": calibration is for ", calibration.layers.size(), " layers x head_dim ",
          calibration.head_dim, ", the model has ", config.num_layers, " x ", config.head_dim));
    }
    if (calibration.model_fingerprint != 0 && model_fingerprint != 0 &&
        calibration.model_fingerprint != model_fingerprint) {
      return absl::FailedPreconditionError(absl::StrCat(
          calibration_path, ": calibration was made for another model (fingerprint ",
          absl::Hex(calibration.model_fingerprint), ", this model ", absl::Hex(model_fingerprint),
          "); run `oscarkv calibrate` for it"));
    }
    factory->calibration_fingerprint_ = quant::CalibrationFingerprint(bytes.str());
    calibration_ptr = &calibration;
  }

  std::vector<std::unique_ptr<quant::Codec>> codecs;
  std::vector<const quant::Codec*> per_layer;
  for (int layer = 0; layer < config.num_layers; ++layer) {
    OSCARKV_ASSIGN_OR_RETURN(auto codec, quant::Codec::Create(*spec, config.head_dim,
                                                              calibration_ptr, layer));
    per_layer.push_back(codec.get());
    codecs.push_back(std::move(codec));
  }
  OSCARKV_ASSIGN_OR_RETURN(factory->tier_config_,
                           quant::ThreeTierCacheConfigFromCodecs(per_layer, config.num_kv_heads));
  factory->tier_config_.sm_scale = 1.0f / std::sqrt(static_cast<float>(config.head_dim));
  // A sequence's decode attention shares its splits out over the forward's CPU pool; inside a
  // batch, whose sequences already share the pool, it finds the pool busy and runs alone.
  factory->tier_config_.run_on_threads = model::RunOnCpuPool;
  return factory;
}

absl::StatusOr<std::unique_ptr<model::KvCache>> KvCacheFactory::NewCache() const {
  OSCARKV_ASSIGN_OR_RETURN(auto tiers, quant::ThreeTierCache::Create(tier_config_));
  return std::make_unique<QuantKvCache>(std::move(tiers), tier_config_.sm_scale);
}

}  // namespace oscarkv::engine

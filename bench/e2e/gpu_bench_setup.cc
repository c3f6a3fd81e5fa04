#include "bench/e2e/gpu_bench_setup.h"

#include <cuda_runtime.h>

#include <utility>
#include <vector>

#include "lib/base/status_macros.h"
#include "lib/engine/quant_kv_cache.h"
#include "lib/engine/serving_engine.h"
#include "lib/quant/codec_spec.h"

namespace oscarkv::bench {

model::ModelConfig Qwen3_8bLike() {
  model::ModelConfig c;
  c.arch_name = "qwen3";
  c.arch = model::Arch::kQwen3;
  c.num_layers = 36;
  c.d_model = 4096;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.d_ff = 12288;
  c.vocab_size = 151936;
  c.context_length = 131072 + 4096;
  c.rope_dim = 128;
  c.rope_theta = 1000000.0;
  c.rope_style = model::RopeStyle::kNeox;
  c.norm_eps = 1e-6;
  c.qk_norm = true;
  return c;
}

absl::StatusOr<GpuBenchSetup> MakeGpuBenchSetup(const std::string& config,
                                                const std::string& codec) {
  GpuBenchSetup s;
  if (config == "default") {
    OSCARKV_ASSIGN_OR_RETURN(std::string path, model::ResolveModelPath("default"));
    OSCARKV_ASSIGN_OR_RETURN(s.real, model::Model::Load(path));
    s.config = s.real->config();
    OSCARKV_ASSIGN_OR_RETURN(
        auto factory, engine::KvCacheFactory::Create(
                          s.config, codec, engine::ResolveCalibrationPath("", "default", codec)));
    s.tiers = factory->tier_config();
    return s;
  }
  if (config != "qwen3-8b-like") return absl::InvalidArgumentError("unknown --config " + config);
  s.config = Qwen3_8bLike();
  OSCARKV_ASSIGN_OR_RETURN(const quant::CodecSpec* spec, quant::FindCodec(codec));
  s.tiers.num_layers = s.config.num_layers;
  s.tiers.num_kv_heads = s.config.num_kv_heads;
  s.tiers.head_dim = s.config.head_dim;
  s.tiers.codec = spec->id;
  if (spec->rotation != quant::RotationKind::kNone) {
    std::vector<float> r(128 * 128, 0.0f);
    for (int i = 0; i < 128; ++i) r[i * 128 + (i * 37) % 128] = (i % 3 == 0) ? -1.0f : 1.0f;
    s.tiers.rotations.k.assign(s.config.num_layers, r);
    s.tiers.rotations.v.assign(s.config.num_layers, r);
  }
  return s;
}

absl::StatusOr<std::unique_ptr<model_gpu::GpuModel>> MakeGpuBenchModel(
    const GpuBenchSetup& s, const model_gpu::GpuModelOptions& o) {
  // Weights go to the model's device.
  if (cudaSetDevice(o.device) != cudaSuccess) {
    return absl::InvalidArgumentError("no CUDA device " + std::to_string(o.device));
  }
  absl::StatusOr<model_gpu::GpuWeights> w =
      s.real ? model_gpu::GpuWeights::Upload(s.config, s.real->weights())
             : model_gpu::GpuWeights::Random(s.config, 1234);
  if (!w.ok()) return w.status();
  return model_gpu::GpuModel::Create(s.config, std::move(*w), s.tiers, o);
}

}  // namespace oscarkv::bench

// What the GPU benchmarks (gpu_e2e_bench, multigpu_bench) build a GpuModel from: the real
// default model, or random bf16 weights of a Qwen3-8B-like shape (speed only: no checkpoint of
// that size is installable here), with a codec's tier configuration.
#ifndef OSCARKV_BENCH_E2E_GPU_BENCH_SETUP_H_
#define OSCARKV_BENCH_E2E_GPU_BENCH_SETUP_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "lib/model/model.h"
#include "lib/model/model_config.h"
#include "lib/model_gpu/gpu_model.h"
#include "lib/quant/three_tier_cache.h"

namespace oscarkv::bench {

// 36 layers, 32/8 heads, head_dim 128, d_ff 12288, vocab 151936, QK-norm, NeoX RoPE.
model::ModelConfig Qwen3_8bLike();

// Everything a GpuModel needs except its options, for one config and codec.
struct GpuBenchSetup {
  model::ModelConfig config;
  std::unique_ptr<model::Model> real;  // config "default" only
  quant::ThreeTierCacheConfig tiers;
};

// `config`: "default" (the installed default model and its default calibration for `codec`)
// or "qwen3-8b-like" (random weights; rotations are signed permutations, which cost what any
// D x D rotation costs). @return kInvalidArgument for an unknown config or codec.
absl::StatusOr<GpuBenchSetup> MakeGpuBenchSetup(const std::string& config,
                                                const std::string& codec);

// Uploads the setup's weights (random ones for qwen3-8b-like, seed 1234) and creates the model
// on options.device.
absl::StatusOr<std::unique_ptr<model_gpu::GpuModel>> MakeGpuBenchModel(
    const GpuBenchSetup& setup, const model_gpu::GpuModelOptions& options);

}  // namespace oscarkv::bench

#endif  // OSCARKV_BENCH_E2E_GPU_BENCH_SETUP_H_

// The GPU prefill device (built where lib/model_gpu is), in one of two modes:
//   * chunked (default): GpuModel::PrefillChunked, ServingEngine's chunked prefill over a stored
//     prefix on the GPU; the blocks (INT2 history quantised on the GPU) carry keys with the GPU's
//     numerics tag, so GPU workers of one kind reuse each other's stored prefixes bit-exactly
//     through the kvstore (and never the CPU workers').
//   * one_pass: GpuModel::AddSequence prefills the whole prompt at once (BF16 causal attention,
//     history demoted into INT2 pages), the pages and the tail's bf16 rows are cut into blocks
//     (model_gpu::BlocksFromPackedKv). Faster on long prompts, but its KV depends on the prompt's
//     length through the GEMM shapes, so it neither reads nor writes the kvstore.
#ifndef OSCARKV_SERVICES_PREFILL_GPU_PREFILL_DEVICE_H_
#define OSCARKV_SERVICES_PREFILL_GPU_PREFILL_DEVICE_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "lib/engine/serving_engine.h"
#include "services/prefill/prefill_device.h"

namespace oscarkv::prefill {

struct GpuPrefillDeviceOptions {
  int device = 0;                              // CUDA ordinal; Default: 0
  bool one_pass = false;                       // one_pass mode (see above); Default: chunked
  int64_t max_prompt_tokens = 32768;           // longest prompt; Default: 32768
  // KV pages of the prompt being prefilled (one_pass mode). Default: 2 GiB.
  int64_t kv_budget_bytes = int64_t{2} << 30;
};

// Uploads `engine`'s model (not owned, must outlive the device) to the GPU.
// @return kUnimplemented for a codec or head_dim without a GPU path; CUDA errors.
absl::StatusOr<std::unique_ptr<PrefillDevice>> NewGpuPrefillDevice(
    const engine::ServingEngine* engine, const GpuPrefillDeviceOptions& options);

}  // namespace oscarkv::prefill

#endif  // OSCARKV_SERVICES_PREFILL_GPU_PREFILL_DEVICE_H_

// The GPU prefill device (built where lib/model_gpu is): GpuModel prefills the whole prompt in
// one pass on one GPU (BF16 causal attention, history quantised into INT2 pages by the fused
// demotion), then the pages and the tail's bf16 rows are cut into the prompt's blocks
// (model_gpu::BlocksFromPackedKv) and the sequence is freed. It does not share the kvstore
// (PrefillDevice::shares_kvstore): its one-pass KV is not the chunked prefill's bit for bit.
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
  int64_t max_prompt_tokens = 32768;           // longest prompt; Default: 32768
  int64_t kv_budget_bytes = int64_t{2} << 30;  // KV pages of the prompt being prefilled; 2 GiB
};

// Uploads `engine`'s model (not owned, must outlive the device) to the GPU.
// @return kUnimplemented for a codec or head_dim without a GPU path; CUDA errors.
absl::StatusOr<std::unique_ptr<PrefillDevice>> NewGpuPrefillDevice(
    const engine::ServingEngine* engine, const GpuPrefillDeviceOptions& options);

}  // namespace oscarkv::prefill

#endif  // OSCARKV_SERVICES_PREFILL_GPU_PREFILL_DEVICE_H_

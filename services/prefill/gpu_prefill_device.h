// The GPU prefill device (built where lib/model_gpu is), in one of two modes:
//   * chunked (default): GpuModel::PrefillChunked, ServingEngine's chunked prefill over a stored
//     prefix on the GPU; the blocks (INT2 history quantised on the GPU) carry keys with the GPU's
//     numerics tag, so GPU workers of one kind reuse each other's stored prefixes bit-exactly
//     through the kvstore (and never the CPU workers'). Scores prompts when asked (every row's
//     logits to the host per chunk, logprobs there, under the device's lock).
//   * one_pass: GpuModel::AddSequence prefills the whole prompt at once (BF16 causal attention,
//     history demoted into INT2 pages), the pages and the tail's bf16 rows are cut into blocks
//     (model_gpu::BlocksFromPackedKv). Faster on long prompts, but its KV depends on the prompt's
//     length through the GEMM shapes, so it neither reads nor writes the kvstore. It does not
//     score prompts (kUnimplemented).
//     With a transfer backend that reaches GPU memory (UCX with cuda_ipc) it can instead hand the
//     prompt's pages over GPU to GPU (offers_packed_kv): packed into an outbox region in this
//     GPU's memory (registered once), checksummed on the GPU, read by the decode GPU.
#ifndef OSCARKV_SERVICES_PREFILL_GPU_PREFILL_DEVICE_H_
#define OSCARKV_SERVICES_PREFILL_GPU_PREFILL_DEVICE_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "lib/engine/serving_engine.h"
#include "lib/transfer/transfer_backend.h"
#include "services/prefill/prefill_device.h"

namespace oscarkv::prefill {

struct GpuPrefillDeviceOptions {
  int device = 0;                              // CUDA ordinal; Default: 0
  bool one_pass = false;                       // one_pass mode (see above); Default: chunked
  int64_t max_prompt_tokens = 32768;           // longest prompt; Default: 32768
  // KV pages of the prompt being prefilled (one_pass mode). Default: 2 GiB.
  int64_t kv_budget_bytes = int64_t{2} << 30;
  // Offer packed GPU-to-GPU handoffs (one_pass mode, and a backend that reaches GPU memory).
  bool packed_handoff = true;
  // The packed outbox in GPU memory (allocated when handoffs are offered): its size and how
  // long a handoff stays readable. Default: 1 GiB, 60 s.
  int64_t outbox_bytes = int64_t{1} << 30;
  double outbox_ttl_seconds = 60;
};

// Uploads `engine`'s model (not owned, must outlive the device) to the GPU. `backend` (not owned,
// must outlive the device) registers the packed outbox.
// @return kUnimplemented for a codec or head_dim without a GPU path; CUDA and registration errors.
absl::StatusOr<std::unique_ptr<PrefillDevice>> NewGpuPrefillDevice(
    const engine::ServingEngine* engine, const GpuPrefillDeviceOptions& options,
    transfer::TransferBackend* backend);

}  // namespace oscarkv::prefill

#endif  // OSCARKV_SERVICES_PREFILL_GPU_PREFILL_DEVICE_H_

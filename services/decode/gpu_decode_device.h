// The GPU decode device (built where lib/model_gpu is, i.e. with CUDA): a decode worker's
// sequences live in the paged three-tier cache of a GpuModel on one GPU and step with the fused
// INT2 decode attention. Blocks become pages with model_gpu::PackedKvFromBlocks (host) and one
// copy to the GPU; no model run. With a transfer backend that reaches GPU memory it also takes a
// prompt's packed KV GPU to GPU (BuildFromPacked): read into a registered receive buffer on this
// GPU, checksummed there, then admitted.
#ifndef OSCARKV_SERVICES_DECODE_GPU_DECODE_DEVICE_H_
#define OSCARKV_SERVICES_DECODE_GPU_DECODE_DEVICE_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "lib/engine/serving_engine.h"
#include "lib/transfer/transfer_backend.h"
#include "services/decode/decode_device.h"

namespace oscarkv::decode {

struct GpuDecodeDeviceOptions {
  int device = 0;                                  // CUDA ordinal; Default: 0
  int max_batch = 32;                              // sequences per step; Default: 32
  int64_t kv_budget_bytes = int64_t{1} << 30;      // KV pages of all sequences; Default: 1 GiB
  bool packed_handoff = true;  // take packed KV GPU to GPU when the backend can; Default: true
};

// Uploads `engine`'s model (not owned, must outlive the device) to the GPU. `backend` (not owned,
// must outlive the device) reads packed KV.
// @return kUnimplemented for a codec or head_dim without a GPU path; CUDA errors.
absl::StatusOr<std::unique_ptr<DecodeDevice>> NewGpuDecodeDevice(
    const engine::ServingEngine* engine, const GpuDecodeDeviceOptions& options,
    transfer::TransferBackend* backend);

}  // namespace oscarkv::decode

#endif  // OSCARKV_SERVICES_DECODE_GPU_DECODE_DEVICE_H_

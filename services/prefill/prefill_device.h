// Where a prefill worker runs the model over a prompt: on the CPU (ServingEngine's chunked
// prefill over the stored prefix) or on a GPU (GpuModel's one-pass prefill, the pages cut into
// blocks by model_gpu::BlocksFromPackedKv). Either way the output is the prompt's kvformat blocks,
// cut as ServingEngine cuts them, and the last position's logits.
#ifndef OSCARKV_SERVICES_PREFILL_PREFILL_DEVICE_H_
#define OSCARKV_SERVICES_PREFILL_PREFILL_DEVICE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/engine/serving_engine.h"
#include "lib/kvformat/block.h"
#include "lib/kvformat/block_key.h"

namespace oscarkv::prefill {

struct DevicePrefillResult {
  std::vector<float> last_logits;             // [vocab]
  std::vector<engine::SequenceBlock> blocks;  // ALL the prompt's blocks
  int64_t reused_tokens = 0;                  // taken from `reused` blocks
  int64_t computed_tokens = 0;                // run through the model
};

// Thread-safe.
class PrefillDevice {
 public:
  virtual ~PrefillDevice() = default;
  // "cpu" or "cuda:N".
  virtual std::string name() const = 0;
  // Whether stored prefix blocks may seed this device's prefill and its blocks may be stored for
  // others (ServingEngine's chunked prefill, on the CPU or the GPU; not the GPU's one-pass mode).
  virtual bool shares_kvstore() const = 0;
  // Keys of the prompt's reusable blocks as this device labels them (the GPU mixes its numerics
  // tag in: its KV matches other GPU workers of its kind bit for bit, not the CPU's).
  virtual std::vector<kvformat::BlockKey> ReusableKeys(std::span<const int32_t> prompt) const = 0;
  // Prefills `prompt`; `reused` as ServingEngine::Prefill takes it (ignored when
  // !shares_kvstore()). @return ServingEngine::Prefill's errors, and device errors.
  virtual absl::StatusOr<DevicePrefillResult> Prefill(
      std::span<const int32_t> prompt, std::span<const kvformat::BlockView> reused) = 0;
};

// The CPU device over `engine` (not owned, must outlive it).
std::unique_ptr<PrefillDevice> NewCpuPrefillDevice(const engine::ServingEngine* engine);

}  // namespace oscarkv::prefill

#endif  // OSCARKV_SERVICES_PREFILL_PREFILL_DEVICE_H_

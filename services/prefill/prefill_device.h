// Where a prefill worker runs the model over a prompt: on the CPU (ServingEngine's chunked
// prefill over the stored prefix) or on a GPU (GpuModel's one-pass prefill, the pages cut into
// blocks by model_gpu::BlocksFromPackedKv). Either way the output is the prompt's kvformat blocks,
// cut as ServingEngine cuts them, and the last position's logits (when asked, and the device
// runs the chunked prefill, the logprobs of the prompt's own tokens too).
#ifndef OSCARKV_SERVICES_PREFILL_PREFILL_DEVICE_H_
#define OSCARKV_SERVICES_PREFILL_PREFILL_DEVICE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/engine/logprobs.h"
#include "lib/engine/serving_engine.h"
#include "lib/kvformat/block.h"
#include "lib/kvformat/block_key.h"

namespace oscarkv::prefill {

// A prompt's KV left in the device's memory in the GPU paged cache's packed form
// (lib/model_gpu PackedKvLayout), registered with the worker's transfer backend so that a decode
// worker on a GPU reads it GPU to GPU (proto PackedKvDescriptor). Readable until the device's
// outbox needs the room or `outbox_ttl` passes.
struct PackedKvHandoff {
  std::string remote_descriptor;  // of the registered outbox region
  uint64_t offset = 0;            // of this prompt's bytes in it
  uint64_t bytes = 0;             // PackedKvLayout(tokens).bytes()
  int64_t tokens = 0;
  uint64_t checksum = 0;          // kernels::ByteChecksum of the bytes
  double pack_seconds = 0;        // packing + checksum on the device
};

struct DevicePrefillOptions {
  // Hand the KV over as a PackedKvHandoff instead of blocks (when offers_packed_kv()).
  bool want_packed = false;
  // >= 0: fill DevicePrefillResult::prompt_logprobs, with this many alternatives (<= 20); every
  // prompt token is then computed (`reused` blocks are not used). -1 = off.
  int prompt_logprobs = -1;
  // Asked before the work starts and between prefill chunks; its error ends the prefill (the
  // caller left or its deadline passed). Empty = never stops.
  engine::PrefillStopCheck stop_check;
};

struct DevicePrefillResult {
  std::vector<float> last_logits;             // [vocab]
  // With DevicePrefillOptions::prompt_logprobs: entry i scores prompt[i + 1] after prompt[0..i]
  // (prompt.size() - 1 entries; the first token has no context).
  std::vector<engine::TokenLogprobs> prompt_logprobs;
  std::vector<engine::SequenceBlock> blocks;  // ALL the prompt's blocks (empty with `packed`)
  std::optional<PackedKvHandoff> packed;      // set when asked for and offered
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
  // The numerics label in those keys ("" for the CPU engine), which the worker registers so that
  // the router computes the same keys.
  virtual std::string kv_numerics() const { return ""; }
  // Whether Prefill(..., want_packed = true) hands the KV over as a PackedKvHandoff (a GPU device
  // whose transfer backend reaches GPU memory, in one-pass mode).
  virtual bool offers_packed_kv() const { return false; }
  // Prefills `prompt`; `reused` as ServingEngine::Prefill takes it (ignored when
  // !shares_kvstore()). With options.want_packed and offers_packed_kv(), the result holds
  // `packed` instead of blocks; options.prompt_logprobs >= 0 scores the prompt (never packed).
  // @return ServingEngine::Prefill's errors, device and transfer errors, options.stop_check's.
  virtual absl::StatusOr<DevicePrefillResult> Prefill(std::span<const int32_t> prompt,
                                                      std::span<const kvformat::BlockView> reused,
                                                      const DevicePrefillOptions& options) = 0;
  // Drops expired packed handoffs; returns how many.
  virtual int Sweep() { return 0; }
};

// The CPU device over `engine` (not owned, must outlive it).
std::unique_ptr<PrefillDevice> NewCpuPrefillDevice(const engine::ServingEngine* engine);

}  // namespace oscarkv::prefill

#endif  // OSCARKV_SERVICES_PREFILL_PREFILL_DEVICE_H_

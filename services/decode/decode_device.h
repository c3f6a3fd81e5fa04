// Where a decode worker keeps its sequences' KV and runs its decode steps: on the CPU (the
// three-tier cache of lib/quant inside a model::Sequence, ServingEngine::DecodeStep) or on a GPU
// (pages of lib/model_gpu's paged cache, GpuModel::DecodeStep with the fused INT2 attention).
// DecodeEngine, TokenPool and DecodeBatcher see only these two interfaces.
#ifndef OSCARKV_SERVICES_DECODE_DECODE_DEVICE_H_
#define OSCARKV_SERVICES_DECODE_DECODE_DEVICE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/engine/serving_engine.h"
#include "lib/kvformat/block.h"

namespace oscarkv::decode {

// One sequence's KV, held by the device that built it. Destroying it frees its memory there.
class HeldSequence {
 public:
  virtual ~HeldSequence() = default;
  // Tokens it holds.
  virtual int64_t length() const = 0;
  // Bytes its KV occupies now (metrics). Safe to call while a step appends to it.
  virtual int64_t kv_bytes() const = 0;
  // Bytes its KV will occupy at the longest it may grow to (its length at admission plus the
  // max_new_tokens it was built with): the pool admits sequences by these, so that generation
  // never takes it past its capacity.
  virtual int64_t reserved_kv_bytes() const = 0;
  // Tokens it may still grow by (the room it was built with, less what it has generated).
  virtual int64_t remaining_tokens() const = 0;
};

// Where a prompt's KV in the GPU paged cache's packed form can be read (proto PackedKvDescriptor).
struct PackedKvSource {
  std::string peer_address;       // TransferBackend::EndpointAddress() of the holder
  std::string remote_descriptor;  // of the holder's registered region
  uint64_t offset = 0;            // of the bytes in that region
  uint64_t bytes = 0;             // PackedKvLayout(tokens).bytes()
  int64_t tokens = 0;
  uint64_t checksum = 0;          // kernels::ByteChecksum of the bytes
  uint32_t codec = 0;             // kvformat::CodecId
  uint64_t model_fingerprint = 0;  // of the model and calibration that made it
  uint64_t calib_fingerprint = 0;
};

// What BuildFromPacked measured.
struct PackedKvArrival {
  double transfer_seconds = 0;  // the data-plane read alone
  double verify_seconds = 0;    // the checksum on this device
};

// Thread-safe: Build may run on any thread while Step runs on the batcher's thread.
class DecodeDevice {
 public:
  virtual ~DecodeDevice() = default;
  // "cpu" or "cuda:N" (logs, metrics labels).
  virtual std::string name() const = 0;
  // Builds a sequence from ALL of a prompt's blocks (parsed, checksum-verified, in order), with
  // room to generate `max_new_tokens` more.
  // @return kFailedPrecondition / kInvalidArgument for blocks that do not fit this worker's
  //   model and codec; kResourceExhausted when the device has no room now.
  virtual absl::StatusOr<std::unique_ptr<HeldSequence>> Build(
      std::span<const kvformat::BlockView> blocks, int64_t max_new_tokens) = 0;
  // Whether BuildFromPacked works here (a GPU device whose transfer backend reaches GPU memory).
  virtual bool takes_packed_kv() const { return false; }
  // Reads a prompt's packed KV from `source` straight into this device's memory, checks its
  // checksum there, and builds the sequence from it (room for `max_new_tokens` more).
  // @return kFailedPrecondition where !takes_packed_kv() or for a codec/size that does not fit
  //   this worker; kDataLoss for a checksum mismatch (the bytes are never used); transfer errors;
  //   kResourceExhausted when the device has no room now.
  virtual absl::StatusOr<std::unique_ptr<HeldSequence>> BuildFromPacked(
      const PackedKvSource& source, int64_t max_new_tokens, PackedKvArrival* arrival);
  // One batched decode step: appends tokens[b] to *seqs[b] (all built here, distinct) and writes
  // logits [B, vocab]. With `argmax` set the caller needs only each row's argmax (every row
  // greedy, nothing else read from the logits): a device that has them where the logits are may
  // write them to *argmax (B ids, lowest on ties, NaN never chosen; unlike engine::Argmax a +inf
  // logit may win there, which only a broken model produces) and leave *logits empty, saving the
  // logits' copy; otherwise it leaves *argmax empty.
  virtual absl::Status Step(std::span<HeldSequence* const> seqs, std::span<const int32_t> tokens,
                            std::vector<float>* logits, std::vector<int32_t>* argmax) = 0;
};

inline absl::StatusOr<std::unique_ptr<HeldSequence>> DecodeDevice::BuildFromPacked(
    const PackedKvSource&, int64_t, PackedKvArrival*) {
  return absl::FailedPreconditionError(
      "this decode worker cannot take packed GPU KV (its device is not a GPU, or its transfer "
      "backend cannot reach GPU memory)");
}

// The CPU device over `engine` (not owned, must outlive it).
std::unique_ptr<DecodeDevice> NewCpuDecodeDevice(const engine::ServingEngine* engine);

}  // namespace oscarkv::decode

#endif  // OSCARKV_SERVICES_DECODE_DECODE_DEVICE_H_

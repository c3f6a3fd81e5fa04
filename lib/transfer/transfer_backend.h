// The data plane's one interface (STYLE habit 9): capability queries, then the phases
// register memory → post → poll. KV bytes move only through a TransferBackend; the control plane
// (gRPC) carries the small byte strings this interface produces: endpoint addresses and remote
// memory descriptors.
//
// One-sided model: a process registers a region once and publishes its RemoteDescriptor; a peer
// that knows the region's owner's EndpointAddress and the descriptor can put bytes into it or get
// bytes out of it without the owner's code running (the owner's backend may still need to make
// progress, which backends do on their own thread). Backends with two-sided semantics (NCCL)
// interpret put as send and get as receive; see their headers.
#ifndef OSCARKV_LIB_TRANSFER_TRANSFER_BACKEND_H_
#define OSCARKV_LIB_TRANSFER_TRANSFER_BACKEND_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/kvformat/block.h"

namespace oscarkv::transfer {

// What a backend can do.
struct Capabilities {
  std::string name;           // "local", "ucx", "nccl", "fake"
  bool host_memory = true;    // can register host (CPU) memory
  bool gpu_memory = false;    // can register CUDA device memory
  bool remote_peers = false;  // can reach other processes / hosts (false: this process only)
  bool one_sided = true;      // put/get into a registered remote region (false: send/recv)
};

// Opaque id of a registered local region, valid until DeregisterMemory or the backend's end.
using MemoryHandle = uint64_t;
// Opaque id of a posted batch, valid until Poll has returned kDone or an error for it.
using TransferId = uint64_t;

// A registered region: the local handle, and the descriptor a peer needs to reach it (bytes that
// travel in protobuf `bytes` fields, e.g. BlockLocation.remote_descriptor).
struct RegisteredMemory {
  MemoryHandle handle = 0;
  std::string remote_descriptor;
};

enum class Direction : uint8_t {
  kPut = 0,  // local region → remote region
  kGet = 1,  // remote region → local region
};

// One contiguous copy. Offsets are relative to the start of the registered regions.
struct TransferOp {
  MemoryHandle local = 0;
  uint64_t local_offset = 0;
  std::string remote_descriptor;  // RegisteredMemory::remote_descriptor of the peer's region
  uint64_t remote_offset = 0;
  uint64_t bytes = 0;
  Direction direction = Direction::kPut;
};

// Copies to or from one peer, completed together.
struct TransferBatch {
  std::string peer_address;  // the peer's EndpointAddress()
  std::vector<TransferOp> ops;
};

// "Not finished" is a state, never an error (STYLE habit 9).
enum class TransferState { kPending, kDone };

// Byte counters since the backend was created ("bytes on the wire").
struct TransferCounters {
  uint64_t bytes_put = 0;        // bytes moved by completed put ops
  uint64_t bytes_got = 0;        // bytes moved by completed get ops
  uint64_t batches_done = 0;     // batches that completed successfully
  uint64_t batches_failed = 0;   // batches whose Poll returned an error
};

// Thread-safety: every method of every backend may be called from any thread concurrently.
class TransferBackend {
 public:
  virtual ~TransferBackend() = default;

  //! What this backend supports.
  virtual Capabilities capabilities() const = 0;
  //! Bytes a peer passes as TransferBatch::peer_address to reach this backend.
  virtual std::string EndpointAddress() const = 0;

  //! Registers `region` (which must stay valid until deregistered) for local and remote access.
  //! @return kInvalidArgument for an empty region; kResourceExhausted / kInternal from the
  //!         native layer.
  virtual absl::StatusOr<RegisteredMemory> RegisterMemory(std::span<std::byte> region) = 0;
  //! Ends a registration. In-flight transfers using it must have completed.
  //! @return kNotFound for an unknown handle.
  virtual absl::Status DeregisterMemory(MemoryHandle handle) = 0;

  //! Starts a batch. Bounds are checked against both regions before anything moves.
  //! @return kInvalidArgument (unknown handle, malformed descriptor, out of bounds),
  //!         kUnavailable (peer unreachable: retry).
  virtual absl::StatusOr<TransferId> Post(const TransferBatch& batch) = 0;
  //! Progresses and reports a batch. After kDone or an error the id is retired.
  //! @return kNotFound (unknown or retired id), kUnavailable / kDataLoss / kInternal when the
  //!         transfer failed (the destination bytes are then undefined).
  virtual absl::StatusOr<TransferState> Poll(TransferId id) = 0;

  //! Counters so far.
  virtual TransferCounters counters() const = 0;

  //! Says that a peer is about to read or write this backend's registered memory (an outbox was
  //! just filled, a slot reserved, a lookup answered). A backend whose own thread serves peers
  //! (UCX's over TCP) keeps that thread quick for a while instead of backing off.
  virtual void ExpectPeerTraffic() {}
};

// Polls `id` until kDone, an error, or `timeout` (then kDeadlineExceeded; the id stays live).
absl::Status WaitForTransfer(TransferBackend& backend, TransferId id,
                             std::chrono::milliseconds timeout = std::chrono::seconds(30));

// Post + WaitForTransfer.
absl::Status TransferAndWait(TransferBackend& backend, const TransferBatch& batch,
                             std::chrono::milliseconds timeout = std::chrono::seconds(30));

// Receiver-side arrival check for a serialised block (128-byte header + payload) that has just
// landed at the start of `bytes` (which may be longer: a reserved slot). Parses the header, then
// checks the payload checksum over exactly header.payload_bytes (lib/kvformat ParseBlock).
// @return the header; kDataLoss for a corrupted or truncated block, kInvalidArgument for a
//         malformed one, kFailedPrecondition when `expect` does not match.
absl::StatusOr<kvformat::BlockHeader> VerifyBlockOnArrival(
    std::span<const std::byte> bytes, const kvformat::BlockExpectations& expect = {});

}  // namespace oscarkv::transfer

#endif  // OSCARKV_LIB_TRANSFER_TRANSFER_BACKEND_H_

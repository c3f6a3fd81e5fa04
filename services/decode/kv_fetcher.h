// Pulls a sequence's blocks into this worker's memory through lib/transfer: one registered
// buffer per fetch, one batch of gets per peer, then every block is checked on arrival
// (header, payload checksum, the descriptor's key/checksum, model and calibration fingerprints).
#ifndef OSCARKV_SERVICES_DECODE_KV_FETCHER_H_
#define OSCARKV_SERVICES_DECODE_KV_FETCHER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/kvformat/block.h"
#include "lib/transfer/transfer_backend.h"

namespace oscarkv::decode {

// Where one serialised block (128-byte header + payload) can be read.
struct BlockSource {
  std::string peer_address;       // TransferBackend::EndpointAddress() of the holder
  std::string remote_descriptor;  // RegisteredMemory::remote_descriptor of the holder's region
  uint64_t offset = 0;            // block start inside that region
  uint64_t bytes = 0;             // serialised size: kBlockHeaderBytes + payload_bytes
  kvformat::BlockKey key{};       // expected key (zero for tail blocks)
  uint64_t payload_checksum = 0;  // expected BlockHeader.payload_checksum
};

// Fetched blocks: `views` point into `buffer` (keep them together; moving the struct keeps the
// views valid because the vector's heap storage does not move).
struct FetchedBlocks {
  std::vector<std::byte> buffer;
  std::vector<kvformat::BlockView> views;
  uint64_t bytes = 0;  // bytes moved
};

// Thread-safe (the backend is).
class KvFetcher {
 public:
  // `backend` is not owned and must outlive the fetcher.
  explicit KvFetcher(transfer::TransferBackend* backend,
                     std::chrono::milliseconds timeout = std::chrono::seconds(30))
      : backend_(backend), timeout_(timeout) {}

  // Gets every block of `sources` (in order) and validates it against `expect` plus the
  // source's key and checksum.
  // @return kInvalidArgument for an empty or malformed source list; transfer errors
  //   (kUnavailable, kDeadlineExceeded); kDataLoss for a block that fails its checksum;
  //   kFailedPrecondition for a block whose key or fingerprints do not match.
  absl::StatusOr<FetchedBlocks> Fetch(std::span<const BlockSource> sources,
                                      const kvformat::BlockExpectations& expect) const;

 private:
  transfer::TransferBackend* backend_;
  std::chrono::milliseconds timeout_;
};

}  // namespace oscarkv::decode

#endif  // OSCARKV_SERVICES_DECODE_KV_FETCHER_H_

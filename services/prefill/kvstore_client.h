// The prefill worker's client of oscarkv.kvstore.v1 (an adapter: proto in here, domain types
// out): prefix lookup, reserve → commit/abort, lease release.
#ifndef OSCARKV_SERVICES_PREFILL_KVSTORE_CLIENT_H_
#define OSCARKV_SERVICES_PREFILL_KVSTORE_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/kvformat/int2_block.h"

namespace oscarkv::prefill {

// Where a block's bytes are (any holder: kvstore pool, a prefill outbox).
struct RemoteLocation {
  std::string peer_address;       // TransferBackend::EndpointAddress() of the holder
  std::string backend;            // "ucx", "local"
  std::string remote_descriptor;  // the holder's RegisteredMemory::remote_descriptor
  uint64_t offset = 0;
  uint64_t length = 0;            // bytes reserved / held at offset
  std::string worker_id;
};

// Metadata of one serialised block (lib/kvformat BlockHeader fields) and where it is.
struct BlockInfo {
  kvformat::BlockKey key{};
  kvformat::BlockKey prev_key{};
  uint32_t codec = 0;
  uint32_t block_kind = 0;
  uint32_t first_position = 0;
  uint32_t token_count = 0;
  uint64_t payload_bytes = 0;
  uint64_t payload_checksum = 0;
  RemoteLocation location;  // empty peer_address when not placed
};

struct LookupResult {
  std::vector<BlockInfo> blocks;  // the matched leading blocks, with locations
  uint64_t lease_id = 0;
};

struct Reservation {
  bool already_stored = false;
  bool in_flight = false;
  RemoteLocation location;  // where to put (valid unless in_flight)
};

// Thread-safe (gRPC stubs are).
class KvStoreClient {
 public:
  // Connects lazily to `address` ("host:port").
  static std::unique_ptr<KvStoreClient> Create(const std::string& address,
                                               std::chrono::milliseconds call_timeout);
  ~KvStoreClient();

  // @return the longest stored prefix of `keys`; transport errors (kUnavailable, ...).
  absl::StatusOr<LookupResult> LookupPrefix(std::span<const kvformat::BlockKey> keys,
                                            const std::string& session_id);
  // One reservation per block, same order.
  absl::StatusOr<std::vector<Reservation>> Reserve(std::span<const BlockInfo> blocks,
                                                   const std::string& writer_id);
  absl::StatusOr<uint32_t> Commit(std::span<const kvformat::BlockKey> keys);
  absl::Status Abort(std::span<const kvformat::BlockKey> keys);
  absl::Status ReleaseLease(uint64_t lease_id);
  // Asks the store to verify blocks this worker found damaged; @return how many it dropped.
  absl::StatusOr<uint32_t> Recheck(std::span<const kvformat::BlockKey> keys);

 private:
  struct Impl;
  explicit KvStoreClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace oscarkv::prefill

#endif  // OSCARKV_SERVICES_PREFILL_KVSTORE_CLIENT_H_

// The kvstore's domain core: reservations, commits with verification, prefix lookups with read
// leases, session pins and LRU eviction over one host pool. It composes BlockIndex, BlockPool,
// LeaseTable and EvictionPolicy and is the only thing kvstore_service calls. No proto types here.
//
// Thread-safety: all methods are thread-safe; one mutex (mu_) guards every member (lock order:
// mu_ only; the transfer backend's own locks are never taken while holding it, except through
// BlockPool's destructor).
#ifndef OSCARKV_SERVICES_KVSTORE_BLOCK_STORE_H_
#define OSCARKV_SERVICES_KVSTORE_BLOCK_STORE_H_

#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/kvstore/block_index.h"
#include "services/kvstore/block_pool.h"
#include "services/kvstore/clock.h"
#include "services/kvstore/eviction_policy.h"
#include "services/kvstore/kvstore_metrics.h"
#include "services/kvstore/lease_table.h"

namespace oscarkv::kvstore {

struct BlockStoreOptions {
  absl::Duration default_read_lease = absl::Seconds(10);   // Default: 10 s (as Mooncake)
  absl::Duration default_reservation = absl::Seconds(30);  // Default: 30 s
  absl::Duration max_pin = absl::Hours(24);                // Default: 24 h
  // Check header and payload checksum in the store's memory before a block becomes visible.
  bool verify_on_commit = true;  // Default: true
};

// A committed block and where its bytes are in the pool.
struct StoredBlock {
  BlockMeta meta;
  Slot slot;
};

struct ReserveResult {
  kvformat::BlockKey key{};
  // Committed already: skip the write; `slot` is where it is.
  bool already_stored = false;
  // Another writer holds a live reservation: skip the write; no slot.
  bool in_flight = false;
  // Where to write (when neither flag is set).
  Slot slot;
};

struct LookupResult {
  size_t matched = 0;               // LookupPrefix: leading keys committed
  std::vector<StoredBlock> blocks;  // in request order
  uint64_t lease_id = 0;            // 0 when `blocks` is empty
};

struct StoreStats {
  uint64_t blocks = 0;
  uint64_t reserved_blocks = 0;
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;
  struct Codec {
    kvformat::CodecId codec;
    uint64_t blocks, stored_bytes, bf16_equivalent_bytes;
  };
  std::vector<Codec> by_codec;  // codecs with at least one block
  uint64_t bytes_saved_vs_bf16 = 0;
  uint64_t lookup_block_hits = 0;
  uint64_t lookup_block_misses = 0;
  double hit_rate = 0;
  uint64_t evicted_blocks = 0;
  uint64_t expired_reservations = 0;
  uint64_t pinned_blocks = 0;
  uint64_t active_read_leases = 0;
};

class BlockStore {
 public:
  // `pool` and `policy` must not be null; `clock` and `metrics` are not owned and must outlive the
  // store (`metrics` may be null).
  BlockStore(const BlockStoreOptions& options, std::unique_ptr<BlockPool> pool,
             std::unique_ptr<EvictionPolicy> policy, const Clock* clock, KvStoreMetrics* metrics);

  // Space for each block, evicting unprotected committed blocks (LRU) when needed. All-or-nothing:
  // on failure no reservation of this call remains. `ttl` <= 0 means the default.
  // @return kInvalidArgument (zero payload or duplicate key in the call), kResourceExhausted.
  absl::StatusOr<std::vector<ReserveResult>> Reserve(std::span<const BlockMeta> blocks,
                                                     absl::Duration ttl);
  // Verifies and publishes reserved blocks. Keys are handled one by one; a block that fails
  // verification is dropped (its writer must reserve again).
  // @return the number committed; else the first error: kFailedPrecondition (not reserved or
  //         expired), kDataLoss (checksum/header mismatch), with the count in the message.
  absl::StatusOr<size_t> Commit(std::span<const kvformat::BlockKey> keys);
  // Drops reservations (committed blocks are untouched). Returns how many were dropped.
  size_t Abort(std::span<const kvformat::BlockKey> keys);

  struct RecheckResult {
    size_t dropped = 0;  // stored bytes failed verification: removed
    size_t intact = 0;   // verified: kept
  };
  // Verifies the stored bytes of the committed blocks among `keys` (payload checksum included,
  // whatever verify_on_commit says) and removes those that fail: a block damaged in memory after
  // its commit, which every reader would refuse until it was evicted.
  RecheckResult Recheck(std::span<const kvformat::BlockKey> keys);

  // Longest committed prefix of `chain`, leased for `lease` (<= 0: default) to `session`.
  // @return kInvalidArgument for an empty chain.
  absl::StatusOr<LookupResult> LookupPrefix(std::span<const kvformat::BlockKey> chain,
                                            absl::Duration lease);
  // The committed blocks among `keys`, leased as above.
  LookupResult GetLocations(std::span<const kvformat::BlockKey> keys, absl::Duration lease);

  struct PinResult {
    size_t pinned = 0;
    size_t missing = 0;
  };
  // @return kInvalidArgument for an empty session or ttl outside (0, max_pin].
  absl::StatusOr<PinResult> Pin(const std::string& session,
                                std::span<const kvformat::BlockKey> keys, absl::Duration ttl);
  struct ReleaseResult {
    size_t pins = 0;
    size_t leases = 0;
  };
  ReleaseResult Release(const std::string& session, std::span<const kvformat::BlockKey> keys,
                        std::span<const uint64_t> lease_ids);

  // Drops expired reservations, pins and leases. Called by every mutating call and periodically
  // by the server.
  void Sweep();

  StoreStats Stats() const;
  // Keys of the committed blocks (what the kvstore reports to the router's prefix index in its
  // heartbeats, so evictions reach placement). O(blocks) under the lock.
  std::vector<kvformat::BlockKey> CommittedKeys() const;
  // Where remote peers reach the pool (for BlockLocation).
  const transfer::RegisteredMemory& registration() const { return pool_->registration(); }

 private:
  void SweepLocked(absl::Time now);
  // Evicts until a slot of `bytes` fits. @return kResourceExhausted when it cannot.
  absl::Status MakeRoomLocked(uint64_t bytes, absl::Time now);
  void RemoveLocked(const kvformat::BlockKey& key);
  // `check_payload`: the payload checksum too, not only the header.
  absl::Status VerifyLocked(const IndexEntry& entry, bool check_payload,
                            uint64_t* bf16_equivalent_bytes);
  LookupResult LeaseLocked(std::vector<StoredBlock> blocks, absl::Duration lease, absl::Time now);

  const BlockStoreOptions options_;
  const Clock* const clock_;
  KvStoreMetrics* const metrics_;

  mutable std::mutex mu_;
  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<EvictionPolicy> policy_;
  BlockIndex index_;
  LeaseTable leases_;
  uint64_t hits_ = 0, misses_ = 0, evicted_ = 0, expired_ = 0;
};

}  // namespace oscarkv::kvstore

#endif  // OSCARKV_SERVICES_KVSTORE_BLOCK_STORE_H_

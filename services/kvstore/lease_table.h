// Protection from eviction, with expiry:
//  - session pins: (session, key) → until; a session pins the KV of a turn that ended in a tool
//    call for a TTL (Continuum); Pin again extends, Release ends early.
//  - read leases: id → (keys, until); granted with every lookup so that a reader's get cannot
//    race an eviction; released by the reader or expiring by themselves.
// A key is protected at `now` while any of its pins or leases ends after `now`.
// Not thread-safe: BlockStore serialises access.
#ifndef OSCARKV_SERVICES_KVSTORE_LEASE_TABLE_H_
#define OSCARKV_SERVICES_KVSTORE_LEASE_TABLE_H_

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/time/time.h"
#include "services/kvstore/block_index.h"

namespace oscarkv::kvstore {

class LeaseTable {
 public:
  // Pins `keys` for `session` until now + ttl (keeps the later end if already pinned).
  void Pin(const std::string& session, std::span<const kvformat::BlockKey> keys,
           absl::Duration ttl, absl::Time now);
  // Ends `session`'s pins on `keys` (all of its pins when empty). Returns the pins removed.
  size_t ReleasePins(const std::string& session, std::span<const kvformat::BlockKey> keys);
  // A read lease on `keys` until now + ttl; returns its id (> 0).
  uint64_t AddReadLease(std::span<const kvformat::BlockKey> keys, absl::Duration ttl,
                        absl::Time now);
  // Ends a read lease early. Returns false for an unknown or expired id.
  bool ReleaseReadLease(uint64_t lease_id);

  // Whether a pin or lease on `key` is live at `now`.
  bool IsProtected(const kvformat::BlockKey& key, absl::Time now) const;
  // Drops pins and leases that ended at or before `now`.
  void ExpireUntil(absl::Time now);
  // Forgets every pin and lease on `key` (the block left the store).
  void ForgetKey(const kvformat::BlockKey& key);

  size_t pin_count() const;          // live (session, key) pins, including expired not swept
  size_t read_lease_count() const { return leases_.size(); }

 private:
  struct Protection {
    std::map<std::string, absl::Time> pins;  // session → until
    std::map<uint64_t, absl::Time> leases;   // lease id → until
  };
  struct Lease {
    std::vector<kvformat::BlockKey> keys;
    absl::Time until;
  };
  std::unordered_map<kvformat::BlockKey, Protection, BlockKeyHash> by_key_;
  std::unordered_map<std::string, std::vector<kvformat::BlockKey>> by_session_;
  std::unordered_map<uint64_t, Lease> leases_;
  uint64_t next_lease_ = 1;
};

}  // namespace oscarkv::kvstore

#endif  // OSCARKV_SERVICES_KVSTORE_LEASE_TABLE_H_

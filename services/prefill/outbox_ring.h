// Placement of variable-sized entries in one fixed region used as a ring (the GPU prefill
// device's packed-KV outbox: one registered region, so a reader maps it once). A new entry goes
// right after the newest one, or at offset 0 when it does not fit before the end; the oldest
// entries are dropped until none overlaps it. Entries also expire. Not thread-safe.
#ifndef OSCARKV_SERVICES_PREFILL_OUTBOX_RING_H_
#define OSCARKV_SERVICES_PREFILL_OUTBOX_RING_H_

#include <cstdint>
#include <deque>
#include <optional>

#include "absl/time/time.h"

namespace oscarkv::prefill {

class OutboxRing {
 public:
  // `alignment`: every offset is a multiple of it (a power of two).
  explicit OutboxRing(uint64_t capacity, uint64_t alignment = 256)
      : capacity_(capacity), alignment_(alignment) {}

  // Places `bytes` (> 0) for entry `id`, readable until `expires`. @return the offset, or nullopt
  // when `bytes` exceeds the capacity.
  std::optional<uint64_t> Place(uint64_t id, uint64_t bytes, absl::Time expires) {
    if (bytes == 0 || bytes > capacity_) return std::nullopt;
    uint64_t at = (head_ + alignment_ - 1) & ~(alignment_ - 1);
    if (at + bytes > capacity_) at = 0;
    while (Overlaps(at, bytes)) entries_.pop_front();
    entries_.push_back({id, at, bytes, expires});
    head_ = at + bytes;
    return at;
  }
  // Drops entries expired at `now`; returns how many.
  int DropExpired(absl::Time now) {
    int dropped = 0;
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->expires <= now) {
        it = entries_.erase(it);
        ++dropped;
      } else {
        ++it;
      }
    }
    return dropped;
  }
  bool Contains(uint64_t id) const {
    for (const Entry& e : entries_) {
      if (e.id == id) return true;
    }
    return false;
  }
  uint64_t used_bytes() const {
    uint64_t n = 0;
    for (const Entry& e : entries_) n += e.bytes;
    return n;
  }
  size_t entries() const { return entries_.size(); }

 private:
  struct Entry {
    uint64_t id, offset, bytes;
    absl::Time expires;
  };
  bool Overlaps(uint64_t at, uint64_t bytes) const {
    for (const Entry& e : entries_) {
      if (at < e.offset + e.bytes && e.offset < at + bytes) return true;
    }
    return false;
  }

  const uint64_t capacity_, alignment_;
  std::deque<Entry> entries_;  // oldest first
  uint64_t head_ = 0;          // end of the newest entry
};

}  // namespace oscarkv::prefill

#endif  // OSCARKV_SERVICES_PREFILL_OUTBOX_RING_H_

// Which committed block to evict next. The policy only orders keys; BlockStore asks for victims
// with a predicate that skips protected blocks (pins, read leases), so policies never see TTLs.
// Not thread-safe: BlockStore serialises access.
#ifndef OSCARKV_SERVICES_KVSTORE_EVICTION_POLICY_H_
#define OSCARKV_SERVICES_KVSTORE_EVICTION_POLICY_H_

#include <functional>
#include <list>
#include <optional>
#include <unordered_map>

#include "services/kvstore/block_index.h"

namespace oscarkv::kvstore {

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  //! A block became evictable (committed).
  virtual void OnInsert(const kvformat::BlockKey& key) = 0;
  //! A block was read or re-announced.
  virtual void OnAccess(const kvformat::BlockKey& key) = 0;
  //! A block left the store (evicted or removed); unknown keys are ignored.
  virtual void OnRemove(const kvformat::BlockKey& key) = 0;
  //! The first key in eviction order for which `evictable` is true, or nullopt. Does not remove.
  virtual std::optional<kvformat::BlockKey> NextVictim(
      const std::function<bool(const kvformat::BlockKey&)>& evictable) const = 0;
  //! Keys tracked.
  virtual size_t size() const = 0;
};

// Least recently inserted-or-accessed first.
class LruEvictionPolicy final : public EvictionPolicy {
 public:
  void OnInsert(const kvformat::BlockKey& key) override;
  void OnAccess(const kvformat::BlockKey& key) override;
  void OnRemove(const kvformat::BlockKey& key) override;
  std::optional<kvformat::BlockKey> NextVictim(
      const std::function<bool(const kvformat::BlockKey&)>& evictable) const override;
  size_t size() const override { return order_.size(); }

 private:
  std::list<kvformat::BlockKey> order_;  // front = least recent
  std::unordered_map<kvformat::BlockKey, std::list<kvformat::BlockKey>::iterator, BlockKeyHash>
      where_;
};

}  // namespace oscarkv::kvstore

#endif  // OSCARKV_SERVICES_KVSTORE_EVICTION_POLICY_H_

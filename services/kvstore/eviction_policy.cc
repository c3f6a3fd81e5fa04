#include "services/kvstore/eviction_policy.h"

namespace oscarkv::kvstore {

void LruEvictionPolicy::OnInsert(const kvformat::BlockKey& key) {
  auto it = where_.find(key);
  if (it != where_.end()) {
    order_.splice(order_.end(), order_, it->second);
    return;
  }
  where_[key] = order_.insert(order_.end(), key);
}

void LruEvictionPolicy::OnAccess(const kvformat::BlockKey& key) {
  auto it = where_.find(key);
  if (it != where_.end()) order_.splice(order_.end(), order_, it->second);
}

void LruEvictionPolicy::OnRemove(const kvformat::BlockKey& key) {
  auto it = where_.find(key);
  if (it == where_.end()) return;
  order_.erase(it->second);
  where_.erase(it);
}

std::optional<kvformat::BlockKey> LruEvictionPolicy::NextVictim(
    const std::function<bool(const kvformat::BlockKey&)>& evictable) const {
  for (const kvformat::BlockKey& key : order_) {
    if (evictable(key)) return key;
  }
  return std::nullopt;
}

}  // namespace oscarkv::kvstore

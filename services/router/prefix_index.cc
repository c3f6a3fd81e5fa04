#include "services/router/prefix_index.h"

#include "lib/base/log.h"

namespace oscarkv::router {

PrefixIndex::PrefixIndex(size_t max_keys_per_holder) : max_keys_per_holder_(max_keys_per_holder) {
  CHECK(max_keys_per_holder_ >= 1);
}

void PrefixIndex::Add(const std::string& holder, std::span<const kvformat::BlockKey> keys) {
  absl::MutexLock lock(&mu_);
  Holder& h = holders_[holder];
  for (const kvformat::BlockKey& k : keys) {
    if (!h.keys.insert(k).second) continue;
    h.order.push_back(k);
    // Drop the oldest reported keys beyond the bound; `order` may hold keys already removed,
    // which erase() skips harmlessly.
    while (h.keys.size() > max_keys_per_holder_ && !h.order.empty()) {
      h.keys.erase(h.order.front());
      h.order.pop_front();
    }
  }
  // Keep `order` from growing without bound through Add/Remove churn.
  if (h.order.size() > 2 * max_keys_per_holder_ + 16) {
    std::deque<kvformat::BlockKey> live;
    for (const kvformat::BlockKey& k : h.order) {
      if (h.keys.contains(k)) live.push_back(k);
    }
    h.order.swap(live);
  }
}

void PrefixIndex::Remove(const std::string& holder, std::span<const kvformat::BlockKey> keys) {
  absl::MutexLock lock(&mu_);
  auto it = holders_.find(holder);
  if (it == holders_.end()) return;
  for (const kvformat::BlockKey& k : keys) it->second.keys.erase(k);
}

void PrefixIndex::Clear(const std::string& holder) {
  absl::MutexLock lock(&mu_);
  holders_.erase(holder);
}

int PrefixIndex::Match(const Holder& h, std::span<const kvformat::BlockKey> keys) {
  int n = 0;
  for (const kvformat::BlockKey& k : keys) {
    if (!h.keys.contains(k)) break;
    ++n;
  }
  return n;
}

int PrefixIndex::MatchedBlocks(const std::string& holder,
                               std::span<const kvformat::BlockKey> keys) const {
  absl::MutexLock lock(&mu_);
  auto it = holders_.find(holder);
  return it == holders_.end() ? 0 : Match(it->second, keys);
}

std::map<std::string, int> PrefixIndex::MatchAll(std::span<const kvformat::BlockKey> keys) const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, int> out;
  for (const auto& [id, h] : holders_) {
    const int n = Match(h, keys);
    if (n > 0) out[id] = n;
  }
  return out;
}

size_t PrefixIndex::HolderSize(const std::string& holder) const {
  absl::MutexLock lock(&mu_);
  auto it = holders_.find(holder);
  return it == holders_.end() ? 0 : it->second.keys.size();
}

}  // namespace oscarkv::router

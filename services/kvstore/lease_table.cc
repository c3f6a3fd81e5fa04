#include "services/kvstore/lease_table.h"

#include <algorithm>

namespace oscarkv::kvstore {

void LeaseTable::Pin(const std::string& session, std::span<const kvformat::BlockKey> keys,
                     absl::Duration ttl, absl::Time now) {
  const absl::Time until = now + ttl;
  std::vector<kvformat::BlockKey>& session_keys = by_session_[session];
  for (const kvformat::BlockKey& key : keys) {
    auto [it, inserted] = by_key_[key].pins.try_emplace(session, until);
    if (inserted) {
      session_keys.push_back(key);
    } else {
      it->second = std::max(it->second, until);
    }
  }
}

size_t LeaseTable::ReleasePins(const std::string& session,
                               std::span<const kvformat::BlockKey> keys) {
  auto s = by_session_.find(session);
  if (s == by_session_.end()) return 0;
  size_t released = 0;
  auto release_one = [&](const kvformat::BlockKey& key) {
    auto p = by_key_.find(key);
    if (p == by_key_.end() || p->second.pins.erase(session) == 0) return false;
    ++released;
    if (p->second.pins.empty() && p->second.leases.empty()) by_key_.erase(p);
    return true;
  };
  if (keys.empty()) {
    for (const kvformat::BlockKey& key : s->second) release_one(key);
    by_session_.erase(s);
    return released;
  }
  for (const kvformat::BlockKey& key : keys) {
    if (release_one(key)) {
      auto& v = s->second;
      v.erase(std::remove(v.begin(), v.end(), key), v.end());
    }
  }
  if (s->second.empty()) by_session_.erase(s);
  return released;
}

uint64_t LeaseTable::AddReadLease(std::span<const kvformat::BlockKey> keys, absl::Duration ttl,
                                  absl::Time now) {
  const uint64_t id = next_lease_++;
  const absl::Time until = now + ttl;
  for (const kvformat::BlockKey& key : keys) by_key_[key].leases[id] = until;
  leases_[id] = Lease{{keys.begin(), keys.end()}, until};
  return id;
}

bool LeaseTable::ReleaseReadLease(uint64_t lease_id) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return false;
  for (const kvformat::BlockKey& key : it->second.keys) {
    auto p = by_key_.find(key);
    if (p == by_key_.end()) continue;
    p->second.leases.erase(lease_id);
    if (p->second.pins.empty() && p->second.leases.empty()) by_key_.erase(p);
  }
  leases_.erase(it);
  return true;
}

bool LeaseTable::IsProtected(const kvformat::BlockKey& key, absl::Time now) const {
  auto p = by_key_.find(key);
  if (p == by_key_.end()) return false;
  for (const auto& [session, until] : p->second.pins) {
    if (until > now) return true;
  }
  for (const auto& [id, until] : p->second.leases) {
    if (until > now) return true;
  }
  return false;
}

void LeaseTable::ExpireUntil(absl::Time now) {
  std::vector<uint64_t> expired_leases;
  for (const auto& [id, lease] : leases_) {
    if (lease.until <= now) expired_leases.push_back(id);
  }
  for (uint64_t id : expired_leases) ReleaseReadLease(id);
  for (auto s = by_session_.begin(); s != by_session_.end();) {
    auto& keys = s->second;
    keys.erase(std::remove_if(keys.begin(), keys.end(),
                              [&](const kvformat::BlockKey& key) {
                                auto p = by_key_.find(key);
                                if (p == by_key_.end()) return true;
                                auto pin = p->second.pins.find(s->first);
                                if (pin == p->second.pins.end()) return true;
                                if (pin->second > now) return false;
                                p->second.pins.erase(pin);
                                if (p->second.pins.empty() && p->second.leases.empty()) {
                                  by_key_.erase(p);
                                }
                                return true;
                              }),
               keys.end());
    s = keys.empty() ? by_session_.erase(s) : std::next(s);
  }
}

void LeaseTable::ForgetKey(const kvformat::BlockKey& key) {
  auto p = by_key_.find(key);
  if (p == by_key_.end()) return;
  for (const auto& [session, until] : p->second.pins) {
    auto s = by_session_.find(session);
    if (s == by_session_.end()) continue;
    auto& v = s->second;
    v.erase(std::remove(v.begin(), v.end(), key), v.end());
    if (v.empty()) by_session_.erase(s);
  }
  for (const auto& [id, until] : p->second.leases) {
    auto l = leases_.find(id);
    if (l == leases_.end()) continue;
    auto& v = l->second.keys;
    v.erase(std::remove(v.begin(), v.end(), key), v.end());
  }
  by_key_.erase(p);
}

size_t LeaseTable::pin_count() const {
  size_t n = 0;
  for (const auto& [session, keys] : by_session_) n += keys.size();
  return n;
}

}  // namespace oscarkv::kvstore

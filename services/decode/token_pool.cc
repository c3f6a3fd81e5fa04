#include "services/decode/token_pool.h"

#include "absl/strings/str_cat.h"

namespace oscarkv::decode {

absl::StatusOr<uint64_t> TokenPool::Insert(std::unique_ptr<PooledSequence> entry, absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t reserved = entry->sequence->reserved_kv_bytes();
  if (reserved_bytes_ + reserved > capacity_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("decode KV pool full: the sequences held may grow to ", reserved_bytes_,
                     " bytes and this one (its prompt and max_new_tokens) to ", reserved,
                     ", more than the ", capacity_bytes_, " of --kv_capacity_bytes"));
  }
  const uint64_t id = entry->id != 0 ? entry->id : next_id_++;
  if (entries_.count(id) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("sequence ", id, " exists"));
  }
  entry->id = id;
  entry->expires = now + idle_ttl_;
  reserved_bytes_ += reserved;
  entries_[id] = std::move(entry);
  return id;
}

uint64_t TokenPool::ReserveId() {
  std::lock_guard<std::mutex> lock(mu_);
  return next_id_++;
}

absl::StatusOr<HeldSequence*> TokenPool::BeginGenerate(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  if (it->second->generating) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", id, " is already generating"));
  }
  it->second->generating = true;
  it->second->kept = false;
  it->second->expires = absl::InfiniteFuture();
  return it->second->sequence.get();
}

void TokenPool::FinishGenerate(uint64_t id, absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  PooledSequence& e = *it->second;
  if (e.release_when_done) {
    reserved_bytes_ -= e.sequence->reserved_kv_bytes();
    entries_.erase(it);
    return;
  }
  e.generating = false;
  e.expires = now + idle_ttl_;
}

absl::StatusOr<int64_t> TokenPool::Keep(uint64_t id, absl::Duration ttl, absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  it->second->kept = true;
  it->second->release_when_done = false;  // the later call wins
  it->second->expires = now + ttl;
  return it->second->sequence->kv_bytes();
}

absl::StatusOr<int64_t> TokenPool::Release(uint64_t id, bool* deferred) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second->release_when_done) {
    return absl::NotFoundError(absl::StrCat("no sequence ", id));
  }
  const int64_t bytes = it->second->sequence->kv_bytes();
  if (deferred != nullptr) *deferred = it->second->generating;
  if (it->second->generating) {
    it->second->release_when_done = true;
    return bytes;
  }
  reserved_bytes_ -= it->second->sequence->reserved_kv_bytes();
  entries_.erase(it);
  return bytes;
}

int TokenPool::Sweep(absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  int dropped = 0;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (!it->second->generating && it->second->expires <= now) {
      reserved_bytes_ -= it->second->sequence->reserved_kv_bytes();
      it = entries_.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  return dropped;
}

PoolUsage TokenPool::Usage() const {
  std::lock_guard<std::mutex> lock(mu_);
  PoolUsage u;
  u.sequences = static_cast<int64_t>(entries_.size());
  for (const auto& [id, e] : entries_) {
    u.kv_bytes += e->sequence->kv_bytes();
    u.bf16_equivalent_bytes += e->sequence->length() * bf16_bytes_per_token_;
  }
  u.reserved_bytes = reserved_bytes_;
  u.capacity_bytes = capacity_bytes_;
  return u;
}

}  // namespace oscarkv::decode

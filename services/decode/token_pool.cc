#include "services/decode/token_pool.h"

#include "absl/strings/str_cat.h"

namespace oscarkv::decode {

absl::StatusOr<uint64_t> TokenPool::Insert(std::unique_ptr<PooledSequence> entry, absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (kv_bytes_ + entry->kv_bytes > capacity_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "decode KV pool full: ", kv_bytes_, " + ", entry->kv_bytes, " > ", capacity_bytes_,
        " bytes"));
  }
  const uint64_t id = entry->id != 0 ? entry->id : next_id_++;
  if (entries_.count(id) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("sequence ", id, " exists"));
  }
  entry->id = id;
  entry->expires = now + idle_ttl_;
  kv_bytes_ += entry->kv_bytes;
  bf16_bytes_ += entry->bf16_equivalent_bytes;
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

void TokenPool::FinishGenerate(uint64_t id, int64_t kv_bytes, int64_t bf16_equivalent_bytes,
                               absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  PooledSequence& e = *it->second;
  kv_bytes_ += kv_bytes - e.kv_bytes;
  bf16_bytes_ += bf16_equivalent_bytes - e.bf16_equivalent_bytes;
  e.kv_bytes = kv_bytes;
  e.bf16_equivalent_bytes = bf16_equivalent_bytes;
  e.generating = false;
  e.expires = now + idle_ttl_;
}

absl::StatusOr<int64_t> TokenPool::Keep(uint64_t id, absl::Duration ttl, absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  it->second->kept = true;
  it->second->expires = now + ttl;
  return it->second->kv_bytes;
}

absl::StatusOr<int64_t> TokenPool::Release(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  if (it->second->generating) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", id, " is generating"));
  }
  const int64_t bytes = it->second->kv_bytes;
  kv_bytes_ -= bytes;
  bf16_bytes_ -= it->second->bf16_equivalent_bytes;
  entries_.erase(it);
  return bytes;
}

int TokenPool::Sweep(absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  int dropped = 0;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (!it->second->generating && it->second->expires <= now) {
      kv_bytes_ -= it->second->kv_bytes;
      bf16_bytes_ -= it->second->bf16_equivalent_bytes;
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
  return {static_cast<int64_t>(entries_.size()), kv_bytes_, bf16_bytes_, capacity_bytes_};
}

}  // namespace oscarkv::decode

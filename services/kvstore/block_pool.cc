#include "services/kvstore/block_pool.h"

#include <sys/mman.h>

#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"

namespace oscarkv::kvstore {
namespace {
// nullopt when rounding up would wrap past 2^64 (e.g. a "-1" capacity read as 2^64-1).
std::optional<uint64_t> AlignUp(uint64_t n) {
  if (n > std::numeric_limits<uint64_t>::max() - (kSlotAlignment - 1)) return std::nullopt;
  return (n + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment;
}
}  // namespace

absl::StatusOr<std::unique_ptr<BlockPool>> BlockPool::Create(uint64_t capacity_bytes,
                                                             transfer::TransferBackend* backend) {
  if (capacity_bytes == 0) return absl::InvalidArgumentError("pool capacity must be > 0");
  const std::optional<uint64_t> aligned = AlignUp(capacity_bytes);
  if (!aligned) {
    return absl::InvalidArgumentError(
        absl::StrCat("pool capacity ", capacity_bytes, " is too large"));
  }
  const uint64_t capacity = *aligned;
  // Anonymous mapping: pages are committed on first touch, so a large pool costs nothing idle.
  void* base = mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("mmap of ", capacity, " bytes failed"));
  }
  std::unique_ptr<BlockPool> pool(new BlockPool(static_cast<std::byte*>(base), capacity, backend));
  if (backend != nullptr) {
    absl::StatusOr<transfer::RegisteredMemory> registration =
        backend->RegisterMemory(std::span(pool->base_, capacity));
    if (!registration.ok()) {
      pool->backend_ = nullptr;
      return registration.status();
    }
    pool->registration_ = *std::move(registration);
  }
  LOG(INFO) << "kvstore pool: " << capacity << " bytes of host memory"
            << (backend ? absl::StrCat(", registered with ", backend->capabilities().name) : "");
  return pool;
}

BlockPool::BlockPool(std::byte* base, uint64_t capacity, transfer::TransferBackend* backend)
    : base_(base), capacity_(capacity), backend_(backend) {
  free_[0] = capacity;
}

BlockPool::~BlockPool() {
  if (backend_ != nullptr) {
    backend_->DeregisterMemory(registration_.handle)
        .IgnoreError();  // IgnoreError: shutting down; the backend logs its own failures
  }
  munmap(base_, capacity_);
}

absl::StatusOr<Slot> BlockPool::Allocate(uint64_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("cannot allocate 0 bytes");
  const std::optional<uint64_t> aligned = AlignUp(bytes);
  if (!aligned) {
    return absl::ResourceExhaustedError(absl::StrCat("no free slot of ", bytes, " bytes"));
  }
  const uint64_t need = *aligned;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    const uint64_t offset = it->first;
    const uint64_t remaining = it->second - need;
    free_.erase(it);
    if (remaining > 0) free_[offset + need] = remaining;
    allocated_[offset] = need;
    used_ += need;
    return Slot{offset, need};
  }
  return absl::ResourceExhaustedError(absl::StrCat("no free slot of ", need, " bytes (", used_,
                                                   " of ", capacity_, " used)"));
}

void BlockPool::Free(const Slot& slot) {
  auto a = allocated_.find(slot.offset);
  CHECK(a != allocated_.end() && a->second == slot.length) << "freeing an unallocated slot";
  allocated_.erase(a);
  used_ -= slot.length;
  auto [it, inserted] = free_.emplace(slot.offset, slot.length);
  CHECK(inserted);
  // Coalesce with the next and the previous free range.
  auto next = std::next(it);
  if (next != free_.end() && it->first + it->second == next->first) {
    it->second += next->second;
    free_.erase(next);
  }
  if (it != free_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      free_.erase(it);
    }
  }
}

std::span<std::byte> BlockPool::Bytes(const Slot& slot) {
  return std::span(base_ + slot.offset, slot.length);
}

uint64_t BlockPool::largest_free_bytes() const {
  uint64_t best = 0;
  for (const auto& [offset, length] : free_) best = std::max(best, length);
  return best;
}

}  // namespace oscarkv::kvstore

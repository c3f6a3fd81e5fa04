#include "lib/transfer/local/local_backend.h"

#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"

namespace oscarkv::transfer {
namespace {

constexpr uint32_t kDescriptorMagic = 0x4c4b564fu;  // "OVKL"

// The process-wide region registry: region id → span. Region ids are unique across all
// LocalBackends of the process, so a descriptor names a region without naming its backend.
struct Registry {
  std::mutex mu;
  std::unordered_map<uint64_t, std::span<std::byte>> regions;
  uint64_t next_region = 1;
};
Registry& GlobalRegistry() {
  static Registry* registry = new Registry();  // never destroyed: used from destructors
  return *registry;
}

struct Descriptor {
  uint32_t magic;
  uint32_t pid;
  uint64_t region;
};

std::string EncodeDescriptor(uint64_t region) {
  const Descriptor d{kDescriptorMagic, static_cast<uint32_t>(getpid()), region};
  return std::string(reinterpret_cast<const char*>(&d), sizeof(d));
}

absl::StatusOr<uint64_t> DecodeDescriptor(const std::string& bytes) {
  Descriptor d;
  if (bytes.size() != sizeof(d)) {
    return absl::InvalidArgumentError("local remote descriptor has the wrong size");
  }
  std::memcpy(&d, bytes.data(), sizeof(d));
  if (d.magic != kDescriptorMagic) return absl::InvalidArgumentError("not a local descriptor");
  if (d.pid != static_cast<uint32_t>(getpid())) {
    return absl::InvalidArgumentError("local descriptor of another process");
  }
  return d.region;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalBackend>> LocalBackend::Create() {
  return std::unique_ptr<LocalBackend>(new LocalBackend());
}

LocalBackend::~LocalBackend() {
  Registry& registry = GlobalRegistry();
  std::lock_guard<std::mutex> lock(registry.mu);
  for (const auto& [handle, region] : local_regions_) registry.regions.erase(handle);
}

Capabilities LocalBackend::capabilities() const {
  return {.name = "local", .host_memory = true, .gpu_memory = false, .remote_peers = false,
          .one_sided = true};
}

std::string LocalBackend::EndpointAddress() const { return absl::StrCat("local:", getpid()); }

absl::StatusOr<RegisteredMemory> LocalBackend::RegisterMemory(std::span<std::byte> region) {
  if (region.empty()) return absl::InvalidArgumentError("cannot register an empty region");
  Registry& registry = GlobalRegistry();
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(registry.mu);
    id = registry.next_region++;
    registry.regions[id] = region;
  }
  std::lock_guard<std::mutex> lock(mu_);
  local_regions_[id] = region;
  return RegisteredMemory{.handle = id, .remote_descriptor = EncodeDescriptor(id)};
}

absl::Status LocalBackend::DeregisterMemory(MemoryHandle handle) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (local_regions_.erase(handle) == 0) {
      return absl::NotFoundError(absl::StrCat("unknown memory handle ", handle));
    }
  }
  Registry& registry = GlobalRegistry();
  std::lock_guard<std::mutex> lock(registry.mu);
  registry.regions.erase(handle);
  return absl::OkStatus();
}

absl::StatusOr<TransferId> LocalBackend::Post(const TransferBatch& batch) {
  if (batch.peer_address != EndpointAddress()) {
    return absl::UnavailableError(
        absl::StrCat("local backend cannot reach peer '", batch.peer_address, "'"));
  }
  // Resolve and bounds-check everything before copying anything.
  struct Copy {
    std::byte* dst;
    const std::byte* src;
    uint64_t bytes;
    Direction direction;
  };
  std::vector<Copy> copies;
  copies.reserve(batch.ops.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    Registry& registry = GlobalRegistry();
    std::lock_guard<std::mutex> registry_lock(registry.mu);
    for (const TransferOp& op : batch.ops) {
      auto local = local_regions_.find(op.local);
      if (local == local_regions_.end()) {
        return absl::InvalidArgumentError(absl::StrCat("unknown local handle ", op.local));
      }
      absl::StatusOr<uint64_t> region_id = DecodeDescriptor(op.remote_descriptor);
      if (!region_id.ok()) return region_id.status();
      auto remote = registry.regions.find(*region_id);
      if (remote == registry.regions.end()) {
        return absl::InvalidArgumentError("remote region is not registered");
      }
      if (op.local_offset + op.bytes > local->second.size() ||
          op.remote_offset + op.bytes > remote->second.size() ||
          op.local_offset + op.bytes < op.local_offset ||
          op.remote_offset + op.bytes < op.remote_offset) {
        return absl::InvalidArgumentError("transfer op out of the registered bounds");
      }
      std::byte* l = local->second.data() + op.local_offset;
      std::byte* r = remote->second.data() + op.remote_offset;
      copies.push_back(op.direction == Direction::kPut ? Copy{r, l, op.bytes, op.direction}
                                                       : Copy{l, r, op.bytes, op.direction});
    }
  }
  for (const Copy& c : copies) {
    std::memmove(c.dst, c.src, c.bytes);
    (c.direction == Direction::kPut ? bytes_put_ : bytes_got_).fetch_add(c.bytes);
  }
  batches_done_.fetch_add(1);
  std::lock_guard<std::mutex> lock(mu_);
  const TransferId id = next_id_++;
  finished_.emplace(id, absl::OkStatus());
  return id;
}

absl::StatusOr<TransferState> LocalBackend::Poll(TransferId id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = finished_.find(id);
  if (it == finished_.end()) return absl::NotFoundError(absl::StrCat("unknown transfer ", id));
  absl::Status status = it->second;
  finished_.erase(it);
  if (!status.ok()) return status;
  return TransferState::kDone;
}

TransferCounters LocalBackend::counters() const {
  return {bytes_put_.load(), bytes_got_.load(), batches_done_.load(), batches_failed_.load()};
}

}  // namespace oscarkv::transfer

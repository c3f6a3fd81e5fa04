#include "services/prefill/kv_publisher.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"
#include "lib/base/status_macros.h"
#include "lib/kvformat/block.h"

namespace oscarkv::prefill {

KvPublisher::KvPublisher(transfer::TransferBackend* backend, KvStoreClient* store,
                         std::string worker_id, absl::Duration outbox_ttl,
                         uint64_t outbox_capacity_bytes)
    : backend_(backend),
      store_(store),
      worker_id_(std::move(worker_id)),
      ttl_(outbox_ttl),
      capacity_(outbox_capacity_bytes) {}

KvPublisher::~KvPublisher() { Close(); }

void KvPublisher::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  while (!outbox_.empty()) DropLocked(outbox_.begin());
  closed_ = true;
}

void KvPublisher::DropLocked(std::map<uint64_t, Entry>::iterator it) {
  if (absl::Status s = backend_->DeregisterMemory(it->second.handle); !s.ok()) {
    LOG(WARNING) << "outbox deregistration failed: " << s;
  }
  bytes_ -= it->second.buffer.size();
  retired_bytes_ += it->second.buffer.size();
  retired_.push_back({std::move(it->second.buffer), absl::Now() + kRetiredFor});
  outbox_.erase(it);
  // Retired memory is bounded by the outbox capacity (the oldest goes first).
  while (retired_bytes_ > capacity_ && !retired_.empty()) {
    retired_bytes_ -= retired_.front().buffer.size();
    retired_.pop_front();
  }
}

absl::StatusOr<StagedBlocks> KvPublisher::Stage(std::span<const engine::SequenceBlock> blocks) {
  if (blocks.empty()) return absl::InvalidArgumentError("no blocks to stage");
  uint64_t total = 0;
  for (const auto& b : blocks) total += b.bytes.size();
  if (total > capacity_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("prompt blocks (", total, " bytes) exceed the outbox (", capacity_, ")"));
  }
  Entry e;
  e.buffer.resize(total);
  StagedBlocks staged;
  uint64_t off = 0;
  for (const auto& b : blocks) {
    OSCARKV_ASSIGN_OR_RETURN(kvformat::BlockHeader h, kvformat::ParseBlockHeader(b.bytes));
    std::memcpy(e.buffer.data() + off, b.bytes.data(), b.bytes.size());
    BlockInfo info;
    info.key = h.key;
    info.prev_key = h.prev_key;
    info.codec = h.codec;
    info.block_kind = h.block_kind;
    info.first_position = h.first_position;
    info.token_count = h.token_count;
    info.payload_bytes = h.payload_bytes;
    info.payload_checksum = h.payload_checksum;
    info.location.offset = off;
    info.location.length = b.bytes.size();
    staged.blocks.push_back(info);
    staged.reusable.push_back(b.reusable);
    off += b.bytes.size();
  }
  OSCARKV_ASSIGN_OR_RETURN(transfer::RegisteredMemory reg,
                           backend_->RegisterMemory(std::span<std::byte>(e.buffer)));
  e.handle = reg.handle;
  e.expires = absl::Now() + ttl_;
  const std::string address = backend_->EndpointAddress();
  const std::string name = backend_->capabilities().name;
  for (BlockInfo& info : staged.blocks) {
    info.location.peer_address = address;
    info.location.backend = name;
    info.location.remote_descriptor = reg.remote_descriptor;
    info.location.worker_id = worker_id_;
  }
  staged.handle = reg.handle;
  staged.bytes = total;
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) {
    backend_->DeregisterMemory(reg.handle).IgnoreError();
    return absl::FailedPreconditionError("the prefill worker is shutting down");
  }
  while (!outbox_.empty() && bytes_ + total > capacity_) {
    LOG(WARNING) << "prefill outbox full: dropping entry " << outbox_.begin()->first
                 << " before its TTL";
    DropLocked(outbox_.begin());
  }
  staged.outbox_id = next_id_++;
  bytes_ += total;
  outbox_.emplace(staged.outbox_id, std::move(e));
  backend_->ExpectPeerTraffic();  // the decode worker pulls them next
  return staged;
}

absl::StatusOr<StorePublishStats> KvPublisher::PublishToStore(const StagedBlocks& staged) {
  if (store_ == nullptr) return absl::FailedPreconditionError("no kvstore configured");
  std::vector<BlockInfo> reusable;
  for (size_t i = 0; i < staged.blocks.size(); ++i) {
    if (staged.reusable[i]) reusable.push_back(staged.blocks[i]);
  }
  StorePublishStats stats;
  if (reusable.empty()) return stats;
  OSCARKV_ASSIGN_OR_RETURN(std::vector<Reservation> reservations,
                           store_->Reserve(reusable, worker_id_));
  std::map<std::string, transfer::TransferBatch> batches;
  std::vector<kvformat::BlockKey> keys;
  for (size_t i = 0; i < reusable.size(); ++i) {
    const Reservation& r = reservations[i];
    if (r.already_stored || r.in_flight) {
      ++stats.already_stored;
      continue;
    }
    const BlockInfo& b = reusable[i];
    const uint64_t bytes = kvformat::kBlockHeaderBytes + b.payload_bytes;
    transfer::TransferBatch& batch = batches[r.location.peer_address];
    batch.peer_address = r.location.peer_address;
    batch.ops.push_back({staged.handle, b.location.offset, r.location.remote_descriptor,
                         r.location.offset, bytes, transfer::Direction::kPut});
    keys.push_back(b.key);
    stats.written_bytes += bytes;
  }
  if (keys.empty()) return stats;
  absl::Status put;
  for (auto& [peer, batch] : batches) {
    put = transfer::TransferAndWait(*backend_, batch);
    if (!put.ok()) break;
  }
  if (!put.ok()) {
    if (absl::Status a = store_->Abort(keys); !a.ok()) LOG(WARNING) << "kvstore abort: " << a;
    return Annotate(put, "putting blocks to the kvstore");
  }
  OSCARKV_ASSIGN_OR_RETURN(uint32_t committed, store_->Commit(keys));
  stats.written_blocks = static_cast<int>(committed);
  return stats;
}

int KvPublisher::Sweep() {
  const absl::Time now = absl::Now();
  std::lock_guard<std::mutex> lock(mu_);
  int dropped = 0;
  for (auto it = outbox_.begin(); it != outbox_.end();) {
    auto next = std::next(it);
    if (it->second.expires <= now) {
      DropLocked(it);
      ++dropped;
    }
    it = next;
  }
  while (!retired_.empty() && retired_.front().free_at <= now) {
    retired_bytes_ -= retired_.front().buffer.size();
    retired_.pop_front();
  }
  return dropped;
}

uint64_t KvPublisher::outbox_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace oscarkv::prefill

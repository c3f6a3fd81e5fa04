// An in-memory TransferBackend for tests (STYLE habit 9): copies between regions of this process,
// and on cue stalls, fails or corrupts transfers. All FakeTransferBackends of a process share one
// region registry, so a "client" fake can put into a "server" fake's regions.
// Copies happen when a batch completes (the first Poll while not stalled), so a stalled batch has
// moved nothing. Header-only; thread-safe.
#ifndef OSCARKV_TESTS_TESTING_FAKE_TRANSFER_BACKEND_H_
#define OSCARKV_TESTS_TESTING_FAKE_TRANSFER_BACKEND_H_

#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/transfer/transfer_backend.h"

namespace oscarkv::testing {

class FakeTransferBackend final : public transfer::TransferBackend {
 public:
  FakeTransferBackend() = default;
  ~FakeTransferBackend() override {
    std::lock_guard<std::mutex> lock(Global().mu);
    for (const auto& [handle, region] : mine_) Global().regions.erase(handle);
  }

  // ---- Cues ----
  // While stalled, Poll reports kPending and copies nothing.
  void SetStalled(bool stalled) {
    std::lock_guard<std::mutex> lock(mu_);
    stalled_ = stalled;
  }
  // The next `n` Post calls fail with `status`.
  void FailNextPosts(int n, absl::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_posts_ = n;
    post_error_ = std::move(status);
  }
  // The next `n` batches to complete fail with `status` (nothing copied).
  void FailNextTransfers(int n, absl::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_transfers_ = n;
    transfer_error_ = std::move(status);
  }
  // The next `n` batches to complete flip one bit in the middle of each op's destination and
  // still report kDone (a corrupting wire).
  void CorruptNextTransfers(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    corrupt_transfers_ = n;
  }
  int posted() const {
    std::lock_guard<std::mutex> lock(mu_);
    return posted_;
  }

  // ---- TransferBackend ----
  transfer::Capabilities capabilities() const override {
    return {.name = "fake", .host_memory = true, .remote_peers = false, .one_sided = true};
  }
  std::string EndpointAddress() const override { return "fake"; }

  absl::StatusOr<transfer::RegisteredMemory> RegisterMemory(std::span<std::byte> region) override {
    if (region.empty()) return absl::InvalidArgumentError("empty region");
    std::lock_guard<std::mutex> lock(Global().mu);
    const uint64_t id = Global().next++;
    Global().regions[id] = region;
    std::lock_guard<std::mutex> own(mu_);
    mine_[id] = region;
    return transfer::RegisteredMemory{id, absl::StrCat("fake:", id)};
  }
  absl::Status DeregisterMemory(transfer::MemoryHandle handle) override {
    std::lock_guard<std::mutex> lock(Global().mu);
    std::lock_guard<std::mutex> own(mu_);
    if (mine_.erase(handle) == 0) return absl::NotFoundError("unknown handle");
    Global().regions.erase(handle);
    return absl::OkStatus();
  }

  absl::StatusOr<transfer::TransferId> Post(const transfer::TransferBatch& batch) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (fail_posts_ > 0) {
      --fail_posts_;
      return post_error_;
    }
    if (batch.peer_address != "fake") return absl::UnavailableError("fake cannot reach peer");
    const transfer::TransferId id = next_id_++;
    pending_[id] = batch;
    ++posted_;
    return id;
  }

  absl::StatusOr<transfer::TransferState> Poll(transfer::TransferId id) override {
    std::scoped_lock lock(Global().mu, mu_);
    auto it = pending_.find(id);
    if (it == pending_.end()) return absl::NotFoundError("unknown transfer");
    if (stalled_) return transfer::TransferState::kPending;
    const transfer::TransferBatch batch = std::move(it->second);
    pending_.erase(it);
    if (fail_transfers_ > 0) {
      --fail_transfers_;
      ++counters_.batches_failed;
      return transfer_error_;
    }
    const bool corrupt = corrupt_transfers_ > 0;
    if (corrupt) --corrupt_transfers_;
    for (const transfer::TransferOp& op : batch.ops) {
      auto local = mine_.find(op.local);
      uint64_t remote_id = 0;
      const std::string& d = op.remote_descriptor;
      auto remote = Global().regions.end();
      if (d.rfind("fake:", 0) == 0 && absl::SimpleAtoi(d.substr(5), &remote_id)) {
        remote = Global().regions.find(remote_id);
      }
      if (local == mine_.end() || remote == Global().regions.end() ||
          op.local_offset + op.bytes > local->second.size() ||
          op.remote_offset + op.bytes > remote->second.size()) {
        ++counters_.batches_failed;
        return absl::InvalidArgumentError("bad fake transfer op");
      }
      std::byte* l = local->second.data() + op.local_offset;
      std::byte* r = remote->second.data() + op.remote_offset;
      std::byte* dst = op.direction == transfer::Direction::kPut ? r : l;
      std::memmove(dst, op.direction == transfer::Direction::kPut ? l : r, op.bytes);
      if (corrupt && op.bytes > 0) dst[op.bytes / 2] ^= std::byte{0x10};
      (op.direction == transfer::Direction::kPut ? counters_.bytes_put : counters_.bytes_got) +=
          op.bytes;
    }
    ++counters_.batches_done;
    return transfer::TransferState::kDone;
  }

  transfer::TransferCounters counters() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return counters_;
  }

 private:
  struct Registry {
    std::mutex mu;
    std::map<uint64_t, std::span<std::byte>> regions;
    uint64_t next = 1;
  };
  static Registry& Global() {
    static Registry* registry = new Registry();  // never destroyed: used from destructors
    return *registry;
  }

  // Lock order: Global().mu before mu_.
  mutable std::mutex mu_;
  std::map<uint64_t, std::span<std::byte>> mine_;
  std::map<transfer::TransferId, transfer::TransferBatch> pending_;
  transfer::TransferId next_id_ = 1;
  bool stalled_ = false;
  int fail_posts_ = 0, fail_transfers_ = 0, corrupt_transfers_ = 0, posted_ = 0;
  absl::Status post_error_, transfer_error_;
  transfer::TransferCounters counters_;
};

}  // namespace oscarkv::testing

#endif  // OSCARKV_TESTS_TESTING_FAKE_TRANSFER_BACKEND_H_

#include "lib/transfer/ucx/ucx_backend.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"
#include "lib/base/status_macros.h"
#include "lib/transfer/ucx/ucx_context.h"
#include "lib/transfer/ucx/ucx_endpoint.h"
#include "lib/transfer/ucx/ucx_memory.h"
#include "lib/transfer/ucx/ucx_status.h"
#include "lib/transfer/ucx/ucx_worker.h"

namespace oscarkv::transfer {

// One connected peer. Members are destroyed in reverse order: rkeys before the endpoint.
struct UcxBackend::Peer {
  std::unique_ptr<ucx::UcxEndpoint> endpoint;
  std::unordered_map<std::string, std::unique_ptr<ucx::UcxRkey>> rkeys;  // by packed rkey
};

// A posted batch: UCX requests still to complete (a null request completed at once).
struct UcxBackend::Pending {
  std::vector<void*> requests;
  uint64_t bytes_put = 0;
  uint64_t bytes_got = 0;
  absl::Status error;  // a post that failed after earlier ops were in flight
};

UcxBackend::UcxBackend(const UcxOptions& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<UcxBackend>> UcxBackend::Create(const UcxOptions& options) {
  std::unique_ptr<UcxBackend> backend(new UcxBackend(options));
  std::vector<std::pair<std::string, std::string>> config = {{"TLS", options.transports}};
  config.insert(config.end(), options.extra_config.begin(), options.extra_config.end());
  OSCARKV_ASSIGN_OR_RETURN(backend->context_, ucx::UcxContext::Create(config));
  OSCARKV_ASSIGN_OR_RETURN(backend->worker_, ucx::UcxWorker::Create(backend->context_->get()));
  backend->address_ = backend->worker_->address();
  if (options.progress_thread) {
    backend->progress_thread_ = std::thread([b = backend.get()] { b->ProgressLoop(); });
  }
  VLOG(1) << "UCX backend up, transports " << options.transports << ", worker address "
          << backend->address_.size() << " bytes";
  return backend;
}

UcxBackend::~UcxBackend() {
  stop_.store(true);
  if (progress_thread_.joinable()) progress_thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  // Let in-flight requests finish (bounded), then free them: UCX requires every request freed
  // before the worker goes.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (auto& [id, pending] : pending_) {
    for (void* request : pending->requests) {
      while (ucp_request_check_status(request) == UCS_INPROGRESS &&
             std::chrono::steady_clock::now() < deadline) {
        worker_->Progress();
      }
      if (ucp_request_check_status(request) == UCS_INPROGRESS) {
        ucp_request_cancel(worker_->get(), request);
      }
      ucp_request_free(request);
    }
  }
  pending_.clear();
  peers_.clear();
  memories_.clear();
  worker_.reset();
  context_.reset();
}

namespace {
int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void UcxBackend::ExpectPeerTraffic() {
  quick_until_ns_.store(SteadyNowNs() + std::chrono::nanoseconds(std::chrono::seconds(2)).count());
}

void UcxBackend::ProgressLoop() {
  // Busy while there is traffic. Idle, it backs off: 100 us sleeps, then, once nothing has
  // happened for 50 ms and no peer traffic is expected (ExpectPeerTraffic, 2 s), 2 ms ones. A
  // transfer's own Poll progresses the worker, so only what needs this side's progress (a peer's
  // RMA over TCP, which UCX emulates with messages; wireup) can start up to 2 ms late, and only
  // when it came unannounced after a quiet spell. An idle kvstore then costs about 1.5% of a
  // core instead of about 13% (bench/transfer/idle_cpu.sh).
  constexpr int64_t kLongIdleNs = 50'000'000;
  int idle = 0;
  int64_t idle_since = 0;
  while (!stop_.load(std::memory_order_relaxed)) {
    unsigned events;
    {
      std::lock_guard<std::mutex> lock(mu_);
      events = worker_->Progress();
    }
    if (events > 0) {
      idle = 0;
    } else if (++idle == 1) {
      idle_since = SteadyNowNs();
    } else if (idle <= 256) {
      std::this_thread::yield();
    } else if (const int64_t now = SteadyNowNs();
               now - idle_since < kLongIdleNs || now < quick_until_ns_.load()) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
}

Capabilities UcxBackend::capabilities() const {
  // A CUDA-enabled UCX reports CUDA memory even when UCX_TLS leaves its CUDA transports out;
  // device memory then has no zero-copy path, so it only counts when they were asked for.
  const bool cuda_transports = options_.transports == "all" ||
                               options_.transports.find("cuda") != std::string::npos;
  return {.name = "ucx", .host_memory = true,
          .gpu_memory = cuda_transports && context_->supports_cuda_memory(),
          .remote_peers = true,
          .one_sided = true};
}

std::string UcxBackend::EndpointAddress() const { return address_; }

absl::StatusOr<RegisteredMemory> UcxBackend::RegisterMemory(std::span<std::byte> region) {
  std::lock_guard<std::mutex> lock(mu_);
  OSCARKV_ASSIGN_OR_RETURN(std::unique_ptr<ucx::UcxMemory> memory,
                           ucx::UcxMemory::Create(context_->get(), region));
  const MemoryHandle handle = next_handle_++;
  RegisteredMemory out{.handle = handle, .remote_descriptor = memory->remote_descriptor()};
  memories_.emplace(handle, std::move(memory));
  VLOG(1) << "UCX registered " << region.size() << " bytes as handle " << handle;
  return out;
}

absl::Status UcxBackend::DeregisterMemory(MemoryHandle handle) {
  std::lock_guard<std::mutex> lock(mu_);
  if (memories_.erase(handle) == 0) {
    return absl::NotFoundError(absl::StrCat("unknown memory handle ", handle));
  }
  return absl::OkStatus();
}

absl::StatusOr<UcxBackend::Peer*> UcxBackend::GetPeerLocked(const std::string& address) {
  auto it = peers_.find(address);
  if (it != peers_.end()) {
    if (!it->second->endpoint->failed()) return it->second.get();
    // The peer failed (restarted or gone): drop the endpoint and its rkeys and connect anew.
    // Pending batches on it have already completed with errors.
    LOG(INFO) << "UCX reconnecting to a failed peer";
    peers_.erase(it);
  }
  absl::StatusOr<std::unique_ptr<ucx::UcxEndpoint>> endpoint =
      ucx::UcxEndpoint::Create(worker_.get(), address, options_.peer_failure_detection);
  if (!endpoint.ok()) return Annotate(endpoint.status(), "connecting to UCX peer");
  auto peer = std::make_unique<Peer>();
  peer->endpoint = std::move(*endpoint);
  Peer* raw = peer.get();
  peers_.emplace(address, std::move(peer));
  LOG(INFO) << "UCX connected to a peer (" << peers_.size() << " peers)";
  return raw;
}

absl::StatusOr<ucx::UcxRkey*> UcxBackend::GetRkeyLocked(Peer& peer, const std::string& packed) {
  auto it = peer.rkeys.find(packed);
  if (it != peer.rkeys.end()) return it->second.get();
  OSCARKV_ASSIGN_OR_RETURN(std::unique_ptr<ucx::UcxRkey> rkey,
                           ucx::UcxRkey::Create(peer.endpoint->get(), packed));
  ucx::UcxRkey* raw = rkey.get();
  peer.rkeys.emplace(packed, std::move(rkey));
  return raw;
}

absl::StatusOr<TransferId> UcxBackend::Post(const TransferBatch& batch) {
  std::lock_guard<std::mutex> lock(mu_);
  OSCARKV_ASSIGN_OR_RETURN(Peer * peer, GetPeerLocked(batch.peer_address));

  // Resolve and bounds-check every op before posting any.
  struct Resolved {
    std::byte* local;
    uint64_t remote_address;
    ucp_rkey_h rkey;
    uint64_t bytes;
    Direction direction;
  };
  std::vector<Resolved> resolved;
  resolved.reserve(batch.ops.size());
  for (const TransferOp& op : batch.ops) {
    auto memory = memories_.find(op.local);
    if (memory == memories_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown local handle ", op.local));
    }
    OSCARKV_ASSIGN_OR_RETURN(ucx::UcxRemoteRegion remote,
                             ucx::DecodeRemoteRegion(op.remote_descriptor));
    const std::span<std::byte> local = memory->second->region();
    if (op.bytes == 0 || op.local_offset + op.bytes > local.size() ||
        op.remote_offset + op.bytes > remote.length ||
        op.local_offset + op.bytes < op.local_offset ||
        op.remote_offset + op.bytes < op.remote_offset) {
      return absl::InvalidArgumentError("transfer op empty or out of the registered bounds");
    }
    OSCARKV_ASSIGN_OR_RETURN(ucx::UcxRkey * rkey, GetRkeyLocked(*peer, remote.rkey));
    resolved.push_back({local.data() + op.local_offset, remote.base + op.remote_offset,
                        rkey->get(), op.bytes, op.direction});
  }

  auto pending = std::make_unique<Pending>();
  ucp_request_param_t params = {};  // no callback: completion is checked in Poll
  for (const Resolved& r : resolved) {
    ucs_status_ptr_t request =
        r.direction == Direction::kPut
            ? ucp_put_nbx(peer->endpoint->get(), r.local, r.bytes, r.remote_address, r.rkey,
                          &params)
            : ucp_get_nbx(peer->endpoint->get(), r.local, r.bytes, r.remote_address, r.rkey,
                          &params);
    if (UCS_PTR_IS_ERR(request)) {
      pending->error = ucx::UcsToStatus(UCS_PTR_STATUS(request), "ucp_put/get_nbx");
      break;
    }
    if (request != nullptr) pending->requests.push_back(request);
    (r.direction == Direction::kPut ? pending->bytes_put : pending->bytes_got) += r.bytes;
  }
  // A put's completion only means the source may be reused; the flush completes when the bytes
  // are visible at the target, which is what "kDone" promises.
  ucs_status_ptr_t flush = ucp_ep_flush_nbx(peer->endpoint->get(), &params);
  if (UCS_PTR_IS_ERR(flush)) {
    if (pending->error.ok()) pending->error = ucx::UcsToStatus(UCS_PTR_STATUS(flush), "flush");
  } else if (flush != nullptr) {
    pending->requests.push_back(flush);
  }
  const TransferId id = next_id_++;
  VLOG(2) << "UCX transfer " << id << ": " << batch.ops.size() << " ops posted";
  pending_.emplace(id, std::move(pending));
  return id;
}

absl::StatusOr<TransferState> UcxBackend::Poll(TransferId id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(id);
  if (it == pending_.end()) return absl::NotFoundError(absl::StrCat("unknown transfer ", id));
  Pending& pending = *it->second;
  for (void* request : pending.requests) {
    if (ucp_request_check_status(request) == UCS_INPROGRESS) {
      worker_->Progress();
      if (ucp_request_check_status(request) == UCS_INPROGRESS) return TransferState::kPending;
    }
  }
  absl::Status status = pending.error;
  for (void* request : pending.requests) {
    const ucs_status_t s = ucp_request_check_status(request);
    if (status.ok() && s != UCS_OK) status = ucx::UcsToStatus(s, "UCX transfer");
    ucp_request_free(request);
  }
  const uint64_t put = pending.bytes_put, got = pending.bytes_got;
  pending_.erase(it);
  if (!status.ok()) {
    batches_failed_.fetch_add(1);
    return status;
  }
  bytes_put_.fetch_add(put);
  bytes_got_.fetch_add(got);
  batches_done_.fetch_add(1);
  return TransferState::kDone;
}

TransferCounters UcxBackend::counters() const {
  return {bytes_put_.load(), bytes_got_.load(), batches_done_.load(), batches_failed_.load()};
}

}  // namespace oscarkv::transfer

#include "lib/transfer/nccl/nccl_backend.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/base/log.h"
#include "lib/base/status_macros.h"

namespace oscarkv::transfer {
namespace {

absl::Status NcclToStatus(ncclResult_t result, absl::string_view what) {
  if (result == ncclSuccess) return absl::OkStatus();
  const std::string message = absl::StrCat(what, ": ", ncclGetErrorString(result));
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(message);
    case ncclRemoteError:
    case ncclSystemError:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status CudaToStatus(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(error)));
}

}  // namespace

absl::StatusOr<int> ParseNcclAddress(const std::string& address) {
  int rank = -1;
  if (!absl::StartsWith(address, "nccl:") || !absl::SimpleAtoi(address.substr(5), &rank) ||
      rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat("not an NCCL address: '", address, "'"));
  }
  return rank;
}

struct NcclBackend::State {
  NcclOptions options;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  std::mutex mu;
  std::unordered_map<MemoryHandle, std::span<std::byte>> regions;  // guarded by mu
  struct Pending {
    cudaEvent_t done;
    uint64_t bytes_put;
    uint64_t bytes_got;
  };
  std::unordered_map<TransferId, Pending> pending;  // guarded by mu
  uint64_t next_handle = 1;
  TransferId next_id = 1;
};

absl::StatusOr<std::string> NcclBackend::NewUniqueId() {
  ncclUniqueId id;
  OSCARKV_RETURN_IF_ERROR(NcclToStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"));
  return std::string(reinterpret_cast<const char*>(&id), sizeof(id));
}

absl::StatusOr<std::unique_ptr<NcclBackend>> NcclBackend::Create(const NcclOptions& options) {
  if (options.unique_id.size() != sizeof(ncclUniqueId)) {
    return absl::InvalidArgumentError("NCCL unique id has the wrong size");
  }
  if (options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError("NCCL rank out of range");
  }
  auto state = std::make_unique<State>();
  state->options = options;
  OSCARKV_RETURN_IF_ERROR(CudaToStatus(cudaSetDevice(options.cuda_device), "cudaSetDevice"));
  OSCARKV_RETURN_IF_ERROR(CudaToStatus(
      cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  ncclUniqueId id;
  std::memcpy(&id, options.unique_id.data(), sizeof(id));
  const absl::Status status = NcclToStatus(
      ncclCommInitRank(&state->comm, options.world_size, id, options.rank), "ncclCommInitRank");
  if (!status.ok()) {
    cudaStreamDestroy(state->stream);
    return status;
  }
  LOG(INFO) << "NCCL backend rank " << options.rank << "/" << options.world_size << " up";
  return std::unique_ptr<NcclBackend>(new NcclBackend(std::move(state)));
}

NcclBackend::NcclBackend(std::unique_ptr<State> state) : state_(std::move(state)) {}

NcclBackend::~NcclBackend() {
  cudaStreamSynchronize(state_->stream);
  for (auto& [id, pending] : state_->pending) cudaEventDestroy(pending.done);
  ncclCommDestroy(state_->comm);
  cudaStreamDestroy(state_->stream);
}

Capabilities NcclBackend::capabilities() const {
  return {.name = "nccl", .host_memory = false, .gpu_memory = true, .remote_peers = true,
          .one_sided = false};
}

std::string NcclBackend::EndpointAddress() const {
  return absl::StrCat("nccl:", state_->options.rank);
}

absl::StatusOr<RegisteredMemory> NcclBackend::RegisterMemory(std::span<std::byte> region) {
  if (region.empty()) return absl::InvalidArgumentError("cannot register an empty region");
  std::lock_guard<std::mutex> lock(state_->mu);
  const MemoryHandle handle = state_->next_handle++;
  state_->regions[handle] = region;
  return RegisteredMemory{.handle = handle, .remote_descriptor = EndpointAddress()};
}

absl::Status NcclBackend::DeregisterMemory(MemoryHandle handle) {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->regions.erase(handle) == 0) return absl::NotFoundError("unknown memory handle");
  return absl::OkStatus();
}

absl::StatusOr<TransferId> NcclBackend::Post(const TransferBatch& batch) {
  OSCARKV_ASSIGN_OR_RETURN(int peer, ParseNcclAddress(batch.peer_address));
  std::lock_guard<std::mutex> lock(state_->mu);
  for (const TransferOp& op : batch.ops) {
    auto it = state_->regions.find(op.local);
    if (it == state_->regions.end()) return absl::InvalidArgumentError("unknown local handle");
    if (op.local_offset + op.bytes > it->second.size()) {
      return absl::InvalidArgumentError("transfer op out of the registered bounds");
    }
  }
  State::Pending pending{nullptr, 0, 0};
  OSCARKV_RETURN_IF_ERROR(NcclToStatus(ncclGroupStart(), "ncclGroupStart"));
  for (const TransferOp& op : batch.ops) {
    std::byte* local = state_->regions[op.local].data() + op.local_offset;
    const ncclResult_t r =
        op.direction == Direction::kPut
            ? ncclSend(local, op.bytes, ncclUint8, peer, state_->comm, state_->stream)
            : ncclRecv(local, op.bytes, ncclUint8, peer, state_->comm, state_->stream);
    if (r != ncclSuccess) {
      ncclGroupEnd();  // the group must be closed even on error; its status adds nothing
      return NcclToStatus(r, "ncclSend/Recv");
    }
    (op.direction == Direction::kPut ? pending.bytes_put : pending.bytes_got) += op.bytes;
  }
  OSCARKV_RETURN_IF_ERROR(NcclToStatus(ncclGroupEnd(), "ncclGroupEnd"));
  OSCARKV_RETURN_IF_ERROR(CudaToStatus(
      cudaEventCreateWithFlags(&pending.done, cudaEventDisableTiming), "cudaEventCreate"));
  OSCARKV_RETURN_IF_ERROR(
      CudaToStatus(cudaEventRecord(pending.done, state_->stream), "cudaEventRecord"));
  const TransferId id = state_->next_id++;
  state_->pending.emplace(id, pending);
  return id;
}

absl::StatusOr<TransferState> NcclBackend::Poll(TransferId id) {
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->pending.find(id);
  if (it == state_->pending.end()) return absl::NotFoundError("unknown transfer");
  ncclResult_t async_error = ncclSuccess;
  absl::Status status = NcclToStatus(ncclCommGetAsyncError(state_->comm, &async_error),
                                     "ncclCommGetAsyncError");
  if (status.ok()) status = NcclToStatus(async_error, "NCCL transfer");
  if (status.ok()) {
    const cudaError_t query = cudaEventQuery(it->second.done);
    if (query == cudaErrorNotReady) return TransferState::kPending;
    status = CudaToStatus(query, "cudaEventQuery");
  }
  const State::Pending pending = it->second;
  cudaEventDestroy(pending.done);
  state_->pending.erase(it);
  if (!status.ok()) {
    batches_failed_.fetch_add(1);
    return status;
  }
  bytes_put_.fetch_add(pending.bytes_put);
  bytes_got_.fetch_add(pending.bytes_got);
  batches_done_.fetch_add(1);
  return TransferState::kDone;
}

TransferCounters NcclBackend::counters() const {
  return {bytes_put_.load(), bytes_got_.load(), batches_done_.load(), batches_failed_.load()};
}

}  // namespace oscarkv::transfer

#include "services/router/router_service.h"

#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/rpc/status_conversion.h"

namespace oscarkv::router {
namespace {

absl::StatusOr<WorkerRole> FromProto(oscarkv::common::v1::WorkerRole role) {
  switch (role) {
    case oscarkv::common::v1::WORKER_ROLE_PREFILL:
      return WorkerRole::kPrefill;
    case oscarkv::common::v1::WORKER_ROLE_DECODE:
      return WorkerRole::kDecode;
    case oscarkv::common::v1::WORKER_ROLE_KVSTORE:
      return WorkerRole::kKvStore;
    default:
      return absl::InvalidArgumentError(absl::StrCat("worker role ", static_cast<int>(role),
                                                     " is not prefill, decode or kvstore"));
  }
}

std::vector<kvformat::BlockKey> Keys(
    const google::protobuf::RepeatedPtrField<oscarkv::common::v1::BlockKey>& keys) {
  std::vector<kvformat::BlockKey> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back({k.lo(), k.hi()});
  return out;
}

uint64_t RandomEpoch() {
  std::random_device rd;
  const uint64_t e = (uint64_t{rd()} << 32) | rd();
  return e == 0 ? 1 : e;
}

}  // namespace

RouterService::RouterService(WorkerRegistry* workers, PrefixIndex* prefix_index,
                             double heartbeat_interval_s)
    : workers_(workers),
      prefix_index_(prefix_index),
      heartbeat_interval_s_(heartbeat_interval_s),
      epoch_(RandomEpoch()) {}

std::string RouterService::Holder(const std::string& worker_id) {
  absl::StatusOr<WorkerView> w = workers_->Get(worker_id);
  if (w.ok() && w->spec.role == WorkerRole::kKvStore) return kStoreHolder;
  return worker_id;
}

grpc::Status RouterService::Register(grpc::ServerContext*, const v1::RegisterRequest* request,
                                     v1::RegisterResponse* response) {
  const auto& info = request->worker();
  absl::StatusOr<WorkerRole> role = FromProto(info.role());
  if (!role.ok()) return rpc::ToGrpcStatus(role.status());
  WorkerSpec spec;
  spec.id = info.worker_id();
  spec.role = *role;
  spec.address = info.grpc_address();
  spec.packed_kv_direct = info.packed_kv_direct();
  spec.kv_numerics = info.kv_numerics();
  spec.bypasses_kvstore = info.bypasses_kvstore();
  // The proto has no request-slot capacity; workers enforce their own limits and answer
  // RESOURCE_EXHAUSTED, so the router does not cap them here.
  spec.capacity = 1 << 20;
  if (absl::Status s = workers_->Register(spec); !s.ok()) return rpc::ToGrpcStatus(s);
  // A (re)registered worker starts with an empty cache as far as the router knows.
  prefix_index_->Clear(Holder(spec.id));
  response->set_heartbeat_interval_seconds(heartbeat_interval_s_);
  response->set_epoch(epoch_);
  return grpc::Status::OK;
}

grpc::Status RouterService::Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* request,
                                      v1::HeartbeatResponse* response) {
  if (request->epoch() != epoch_) {
    return rpc::ToGrpcStatus(absl::NotFoundError(
        "registration epoch does not match (the router restarted): register again"));
  }
  WorkerLoad load;
  load.active_requests = static_cast<int>(request->load().active_requests());
  load.queued_prefill_tokens = static_cast<int64_t>(request->load().pending_prefill_tokens());
  if (absl::Status s = workers_->Heartbeat(request->worker_id(), load); !s.ok()) {
    return rpc::ToGrpcStatus(s);
  }
  const std::string holder = Holder(request->worker_id());
  if (!request->keys_are_delta()) prefix_index_->Clear(holder);
  prefix_index_->Add(holder, Keys(request->held_keys()));
  prefix_index_->Remove(holder, Keys(request->evicted_keys()));
  absl::StatusOr<WorkerView> w = workers_->Get(request->worker_id());
  response->set_drain(w.ok() && w->draining);
  return grpc::Status::OK;
}

grpc::Status RouterService::Deregister(grpc::ServerContext*, const v1::DeregisterRequest* request,
                                       v1::DeregisterResponse*) {
  const std::string holder = Holder(request->worker_id());
  if (absl::Status s = workers_->Deregister(request->worker_id()); !s.ok()) {
    return rpc::ToGrpcStatus(s);
  }
  // The kvstore's blocks outlive one store process only if another store reports them.
  prefix_index_->Clear(holder);
  return grpc::Status::OK;
}

}  // namespace oscarkv::router

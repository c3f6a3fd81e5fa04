// RouterService: the gRPC adapter of the worker registry (proto oscarkv.router.v1.
// WorkerRegistryService). Proto ↔ domain only: Register/Heartbeat/Deregister go to
// WorkerRegistry, the block keys workers report go to PrefixIndex (a kvstore's keys under
// kStoreHolder), statuses convert through lib/rpc. No policy here.
//
// Epochs: each RouterService instance picks a random non-zero epoch; a heartbeat carrying
// another epoch (the router restarted) gets NOT_FOUND, and the worker registers again.
// Thread-safe (gRPC calls it from its pool).
#ifndef OSCARKV_SERVICES_ROUTER_ROUTER_SERVICE_H_
#define OSCARKV_SERVICES_ROUTER_ROUTER_SERVICE_H_

#include <cstdint>

#include "oscarkv/router/v1/router.grpc.pb.h"
#include "services/router/placement_policy.h"
#include "services/router/prefix_index.h"
#include "services/router/worker_registry.h"

namespace oscarkv::router {

class RouterService final : public oscarkv::router::v1::WorkerRegistryService::Service {
 public:
  // Neither pointer may be null; both must outlive the service.
  RouterService(WorkerRegistry* workers, PrefixIndex* prefix_index, double heartbeat_interval_s);

  grpc::Status Register(grpc::ServerContext* context, const v1::RegisterRequest* request,
                        v1::RegisterResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;
  grpc::Status Deregister(grpc::ServerContext* context, const v1::DeregisterRequest* request,
                          v1::DeregisterResponse* response) override;

  uint64_t epoch() const { return epoch_; }

 private:
  // The PrefixIndex holder for a worker: its id, or kStoreHolder for a kvstore.
  std::string Holder(const std::string& worker_id);

  WorkerRegistry* const workers_;
  PrefixIndex* const prefix_index_;
  const double heartbeat_interval_s_;
  const uint64_t epoch_;
};

}  // namespace oscarkv::router

#endif  // OSCARKV_SERVICES_ROUTER_ROUTER_SERVICE_H_

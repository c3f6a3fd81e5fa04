// WorkerChannels: the router's gRPC channels to its registered workers, one per "host:port", kept
// only while the registry still has a live worker there. Registry mode of
// WorkerCompletionBackend calls Retain() with the snapshot of each placement, so a worker that
// was deregistered, declared dead (expired heartbeats) or re-registered at another address loses
// its channel at the next placement; a re-registered worker's new address gets a fresh one on
// first use. Suspect workers keep theirs: they are not placed on, but a late heartbeat brings
// them back without a new connection. A channel whose last connection attempt failed is
// replaced on the next Get, so that a worker that restarted at the same address is reached at
// once rather than after gRPC's reconnect backoff.
//
// A dropped channel closes once the requests still using it (they hold the stubs) end.
// Thread-safe: every method takes the one internal mutex.
#ifndef OSCARKV_SERVICES_ROUTER_BACKEND_WORKER_CHANNELS_H_
#define OSCARKV_SERVICES_ROUTER_BACKEND_WORKER_CHANNELS_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "grpcpp/channel.h"
#include "oscarkv/decode/v1/decode.grpc.pb.h"
#include "oscarkv/prefill/v1/prefill.grpc.pb.h"
#include "services/router/worker_registry.h"

namespace oscarkv::router_backend {

// The stubs of one worker address (a channel serves both services; a worker uses one).
struct WorkerStubs {
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<::oscarkv::prefill::v1::PrefillService::Stub> prefill;
  std::unique_ptr<::oscarkv::decode::v1::DecodeService::Stub> decode;
};

// A new channel to `address` (not yet connected) with both stubs. Never null.
std::shared_ptr<WorkerStubs> MakeWorkerStubs(const std::string& address);

class WorkerChannels {
 public:
  //! The cached stubs for `address`, created on first use or when the cached channel is in
  //! TRANSIENT_FAILURE. Never null.
  std::shared_ptr<WorkerStubs> Get(const std::string& address);

  //! Drops the channel of every address that no worker of `workers` (a
  //! WorkerRegistry::Snapshot()) has unless that worker is kDead. @return the dropped addresses.
  std::vector<std::string> Retain(const std::vector<router::WorkerView>& workers);

  //! The cached addresses, sorted (for tests and logs).
  std::vector<std::string> addresses() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<WorkerStubs>> by_address_;  // guarded by mu_
};

}  // namespace oscarkv::router_backend

#endif  // OSCARKV_SERVICES_ROUTER_BACKEND_WORKER_CHANNELS_H_

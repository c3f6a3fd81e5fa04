// gRPC adapter of the kvstore (proto ↔ domain, status conversion, no policy): every RPC of
// oscarkv.kvstore.v1.KvStoreService forwards to BlockStore and fills block locations from the
// pool's transfer registration.
#ifndef OSCARKV_SERVICES_KVSTORE_KVSTORE_SERVICE_H_
#define OSCARKV_SERVICES_KVSTORE_KVSTORE_SERVICE_H_

#include <string>

#include "oscarkv/kvstore/v1/kvstore.grpc.pb.h"
#include "services/kvstore/block_store.h"

namespace oscarkv::kvstore {

// How peers reach the pool; copied into every BlockLocation.
struct PoolEndpoint {
  std::string endpoint_address;   // TransferBackend::EndpointAddress()
  std::string backend;            // "ucx" | "local"
  std::string remote_descriptor;  // the pool's registration
  std::string worker_id;
};

// Thread-safe (BlockStore is). `store` is not owned and must outlive the service.
class KvStoreService final : public oscarkv::kvstore::v1::KvStoreService::Service {
 public:
  KvStoreService(BlockStore* store, PoolEndpoint endpoint);

  grpc::Status LookupPrefix(grpc::ServerContext* context,
                            const v1::LookupPrefixRequest* request,
                            v1::LookupPrefixResponse* response) override;
  grpc::Status Reserve(grpc::ServerContext* context, const v1::ReserveRequest* request,
                       v1::ReserveResponse* response) override;
  grpc::Status Commit(grpc::ServerContext* context, const v1::CommitRequest* request,
                      v1::CommitResponse* response) override;
  grpc::Status Abort(grpc::ServerContext* context, const v1::AbortRequest* request,
                     v1::AbortResponse* response) override;
  grpc::Status GetLocations(grpc::ServerContext* context, const v1::GetLocationsRequest* request,
                            v1::GetLocationsResponse* response) override;
  grpc::Status Pin(grpc::ServerContext* context, const v1::PinRequest* request,
                   v1::PinResponse* response) override;
  grpc::Status Release(grpc::ServerContext* context, const v1::ReleaseRequest* request,
                       v1::ReleaseResponse* response) override;
  grpc::Status Recheck(grpc::ServerContext* context, const v1::RecheckRequest* request,
                       v1::RecheckResponse* response) override;
  grpc::Status Stats(grpc::ServerContext* context, const v1::StatsRequest* request,
                     v1::StatsResponse* response) override;

 private:
  void FillLocation(const Slot& slot, oscarkv::common::v1::BlockLocation* location) const;
  void FillDescriptor(const StoredBlock& block, oscarkv::common::v1::BlockDescriptor* out) const;

  BlockStore* store_;
  const PoolEndpoint endpoint_;
};

}  // namespace oscarkv::kvstore

#endif  // OSCARKV_SERVICES_KVSTORE_KVSTORE_SERVICE_H_

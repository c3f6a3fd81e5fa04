#include "services/kvstore/kvstore_service.h"

#include <vector>

#include "lib/rpc/status_conversion.h"

namespace oscarkv::kvstore {
namespace {

namespace common = ::oscarkv::common::v1;

kvformat::BlockKey FromProto(const common::BlockKey& key) { return {key.lo(), key.hi()}; }
void ToProto(const kvformat::BlockKey& key, common::BlockKey* out) {
  out->set_lo(key.lo);
  out->set_hi(key.hi);
}
std::vector<kvformat::BlockKey> Keys(const google::protobuf::RepeatedPtrField<common::BlockKey>& in) {
  std::vector<kvformat::BlockKey> out;
  out.reserve(in.size());
  for (const common::BlockKey& key : in) out.push_back(FromProto(key));
  return out;
}
absl::Duration Seconds(double s) { return s > 0 ? absl::Seconds(s) : absl::ZeroDuration(); }

}  // namespace

KvStoreService::KvStoreService(BlockStore* store, PoolEndpoint endpoint)
    : store_(store), endpoint_(std::move(endpoint)) {}

void KvStoreService::FillLocation(const Slot& slot, common::BlockLocation* location) const {
  location->set_endpoint_address(endpoint_.endpoint_address);
  location->set_backend(endpoint_.backend);
  location->set_remote_descriptor(endpoint_.remote_descriptor);
  location->set_offset(slot.offset);
  location->set_length(slot.length);
  location->set_worker_id(endpoint_.worker_id);
}

void KvStoreService::FillDescriptor(const StoredBlock& block, common::BlockDescriptor* out) const {
  const BlockMeta& m = block.meta;
  ToProto(m.key, out->mutable_key());
  ToProto(m.prev_key, out->mutable_prev_key());
  out->set_codec(static_cast<uint32_t>(m.codec));
  out->set_block_kind(static_cast<uint32_t>(m.kind));
  out->set_first_position(m.first_position);
  out->set_token_count(m.token_count);
  out->set_payload_bytes(m.payload_bytes);
  out->set_payload_checksum(m.payload_checksum);
  FillLocation(block.slot, out->mutable_location());
}

grpc::Status KvStoreService::LookupPrefix(grpc::ServerContext*,
                                          const v1::LookupPrefixRequest* request,
                                          v1::LookupPrefixResponse* response) {
  const std::vector<kvformat::BlockKey> keys = Keys(request->keys());
  absl::StatusOr<LookupResult> result =
      store_->LookupPrefix(keys, Seconds(request->read_lease_seconds()));
  if (!result.ok()) return rpc::ToGrpcStatus(result.status());
  response->set_matched_blocks(static_cast<uint32_t>(result->matched));
  for (const StoredBlock& block : result->blocks) FillDescriptor(block, response->add_blocks());
  response->set_lease_id(result->lease_id);
  return grpc::Status::OK;
}

grpc::Status KvStoreService::Reserve(grpc::ServerContext*, const v1::ReserveRequest* request,
                                     v1::ReserveResponse* response) {
  std::vector<BlockMeta> metas;
  metas.reserve(request->blocks_size());
  for (const common::BlockDescriptor& d : request->blocks()) {
    if (d.codec() >= static_cast<uint32_t>(kvformat::kNumCodecs) || d.block_kind() > 1) {
      return rpc::ToGrpcStatus(absl::InvalidArgumentError("unknown codec or block kind"));
    }
    BlockMeta m;
    m.key = FromProto(d.key());
    m.prev_key = FromProto(d.prev_key());
    m.codec = static_cast<kvformat::CodecId>(d.codec());
    m.kind = static_cast<kvformat::BlockKind>(d.block_kind());
    m.first_position = d.first_position();
    m.token_count = d.token_count();
    m.payload_bytes = d.payload_bytes();
    m.payload_checksum = d.payload_checksum();
    metas.push_back(m);
  }
  absl::StatusOr<std::vector<ReserveResult>> results =
      store_->Reserve(metas, Seconds(request->reservation_seconds()));
  if (!results.ok()) return rpc::ToGrpcStatus(results.status());
  for (const ReserveResult& r : *results) {
    v1::Reservation* out = response->add_reservations();
    ToProto(r.key, out->mutable_key());
    out->set_already_stored(r.already_stored);
    out->set_in_flight(r.in_flight);
    if (!r.in_flight) FillLocation(r.slot, out->mutable_location());
  }
  return grpc::Status::OK;
}

grpc::Status KvStoreService::Commit(grpc::ServerContext*, const v1::CommitRequest* request,
                                    v1::CommitResponse* response) {
  absl::StatusOr<size_t> committed = store_->Commit(Keys(request->keys()));
  if (!committed.ok()) return rpc::ToGrpcStatus(committed.status());
  response->set_committed(static_cast<uint32_t>(*committed));
  return grpc::Status::OK;
}

grpc::Status KvStoreService::Abort(grpc::ServerContext*, const v1::AbortRequest* request,
                                   v1::AbortResponse* response) {
  response->set_aborted(static_cast<uint32_t>(store_->Abort(Keys(request->keys()))));
  return grpc::Status::OK;
}

grpc::Status KvStoreService::Recheck(grpc::ServerContext*, const v1::RecheckRequest* request,
                                     v1::RecheckResponse* response) {
  const BlockStore::RecheckResult result = store_->Recheck(Keys(request->keys()));
  response->set_dropped(static_cast<uint32_t>(result.dropped));
  response->set_intact(static_cast<uint32_t>(result.intact));
  return grpc::Status::OK;
}

grpc::Status KvStoreService::GetLocations(grpc::ServerContext*,
                                          const v1::GetLocationsRequest* request,
                                          v1::GetLocationsResponse* response) {
  const LookupResult result =
      store_->GetLocations(Keys(request->keys()), Seconds(request->read_lease_seconds()));
  for (const StoredBlock& block : result.blocks) FillDescriptor(block, response->add_blocks());
  response->set_lease_id(result.lease_id);
  return grpc::Status::OK;
}

grpc::Status KvStoreService::Pin(grpc::ServerContext*, const v1::PinRequest* request,
                                 v1::PinResponse* response) {
  absl::StatusOr<BlockStore::PinResult> result =
      store_->Pin(request->session_id().value(), Keys(request->keys()),
                  Seconds(request->ttl_seconds()));
  if (!result.ok()) return rpc::ToGrpcStatus(result.status());
  response->set_pinned(static_cast<uint32_t>(result->pinned));
  response->set_missing(static_cast<uint32_t>(result->missing));
  return grpc::Status::OK;
}

grpc::Status KvStoreService::Release(grpc::ServerContext*, const v1::ReleaseRequest* request,
                                     v1::ReleaseResponse* response) {
  const std::vector<uint64_t> leases(request->lease_ids().begin(), request->lease_ids().end());
  const BlockStore::ReleaseResult result =
      store_->Release(request->session_id().value(), Keys(request->keys()), leases);
  response->set_released_pins(static_cast<uint32_t>(result.pins));
  response->set_released_leases(static_cast<uint32_t>(result.leases));
  return grpc::Status::OK;
}

grpc::Status KvStoreService::Stats(grpc::ServerContext*, const v1::StatsRequest*,
                                   v1::StatsResponse* response) {
  const StoreStats s = store_->Stats();
  response->set_blocks(s.blocks);
  response->set_reserved_blocks(s.reserved_blocks);
  response->set_capacity_bytes(s.capacity_bytes);
  response->set_used_bytes(s.used_bytes);
  for (const StoreStats::Codec& c : s.by_codec) {
    v1::CodecBytes* out = response->add_by_codec();
    out->set_codec(static_cast<uint32_t>(c.codec));
    out->set_blocks(c.blocks);
    out->set_stored_bytes(c.stored_bytes);
    out->set_bf16_equivalent_bytes(c.bf16_equivalent_bytes);
  }
  response->set_bytes_saved_vs_bf16(s.bytes_saved_vs_bf16);
  response->set_lookup_block_hits(s.lookup_block_hits);
  response->set_lookup_block_misses(s.lookup_block_misses);
  response->set_hit_rate(s.hit_rate);
  response->set_evicted_blocks(s.evicted_blocks);
  response->set_pinned_blocks(s.pinned_blocks);
  response->set_active_read_leases(s.active_read_leases);
  return grpc::Status::OK;
}

}  // namespace oscarkv::kvstore

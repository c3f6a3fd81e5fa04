#include "services/prefill/kvstore_client.h"

#include "lib/base/status_macros.h"
#include "lib/rpc/channel_factory.h"
#include "lib/rpc/status_conversion.h"
#include "oscarkv/kvstore/v1/kvstore.grpc.pb.h"

namespace oscarkv::prefill {
namespace {

namespace kv = ::oscarkv::kvstore::v1;
namespace common = ::oscarkv::common::v1;

void SetKey(const kvformat::BlockKey& k, common::BlockKey* out) {
  out->set_lo(k.lo);
  out->set_hi(k.hi);
}

RemoteLocation FromProto(const common::BlockLocation& l) {
  return {l.endpoint_address(), l.backend(), l.remote_descriptor(), l.offset(), l.length(),
          l.worker_id()};
}

}  // namespace

struct KvStoreClient::Impl {
  std::unique_ptr<kv::KvStoreService::Stub> stub;
  std::chrono::milliseconds timeout;
};

KvStoreClient::KvStoreClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
KvStoreClient::~KvStoreClient() = default;

std::unique_ptr<KvStoreClient> KvStoreClient::Create(const std::string& address,
                                                     std::chrono::milliseconds call_timeout) {
  auto impl = std::make_unique<Impl>();
  impl->stub = kv::KvStoreService::NewStub(rpc::MakeChannel(address));
  impl->timeout = call_timeout;
  return std::unique_ptr<KvStoreClient>(new KvStoreClient(std::move(impl)));
}

absl::StatusOr<LookupResult> KvStoreClient::LookupPrefix(std::span<const kvformat::BlockKey> keys,
                                                         const std::string& session_id) {
  kv::LookupPrefixRequest req;
  for (const auto& k : keys) SetKey(k, req.add_keys());
  if (!session_id.empty()) req.mutable_session_id()->set_value(session_id);
  kv::LookupPrefixResponse resp;
  auto ctx = rpc::MakeContext(impl_->timeout);
  if (auto s = rpc::ToAbslStatus(impl_->stub->LookupPrefix(ctx.get(), req, &resp)); !s.ok()) {
    return s;
  }
  LookupResult r;
  r.lease_id = resp.lease_id();
  for (const auto& d : resp.blocks()) {
    BlockInfo b;
    b.key = {d.key().lo(), d.key().hi()};
    b.prev_key = {d.prev_key().lo(), d.prev_key().hi()};
    b.codec = d.codec();
    b.block_kind = d.block_kind();
    b.first_position = d.first_position();
    b.token_count = d.token_count();
    b.payload_bytes = d.payload_bytes();
    b.payload_checksum = d.payload_checksum();
    b.location = FromProto(d.location());
    r.blocks.push_back(std::move(b));
  }
  return r;
}

absl::StatusOr<std::vector<Reservation>> KvStoreClient::Reserve(std::span<const BlockInfo> blocks,
                                                                const std::string& writer_id) {
  kv::ReserveRequest req;
  req.set_writer_id(writer_id);
  for (const BlockInfo& b : blocks) {
    common::BlockDescriptor* d = req.add_blocks();
    SetKey(b.key, d->mutable_key());
    SetKey(b.prev_key, d->mutable_prev_key());
    d->set_codec(b.codec);
    d->set_block_kind(b.block_kind);
    d->set_first_position(b.first_position);
    d->set_token_count(b.token_count);
    d->set_payload_bytes(b.payload_bytes);
    d->set_payload_checksum(b.payload_checksum);
  }
  kv::ReserveResponse resp;
  auto ctx = rpc::MakeContext(impl_->timeout);
  if (auto s = rpc::ToAbslStatus(impl_->stub->Reserve(ctx.get(), req, &resp)); !s.ok()) return s;
  if (resp.reservations_size() != static_cast<int>(blocks.size())) {
    return absl::InternalError("kvstore returned a wrong number of reservations");
  }
  std::vector<Reservation> out;
  for (const auto& r : resp.reservations()) {
    out.push_back({r.already_stored(), r.in_flight(), FromProto(r.location())});
  }
  return out;
}

absl::StatusOr<uint32_t> KvStoreClient::Commit(std::span<const kvformat::BlockKey> keys) {
  kv::CommitRequest req;
  for (const auto& k : keys) SetKey(k, req.add_keys());
  kv::CommitResponse resp;
  auto ctx = rpc::MakeContext(impl_->timeout);
  if (auto s = rpc::ToAbslStatus(impl_->stub->Commit(ctx.get(), req, &resp)); !s.ok()) return s;
  return resp.committed();
}

absl::Status KvStoreClient::Abort(std::span<const kvformat::BlockKey> keys) {
  kv::AbortRequest req;
  for (const auto& k : keys) SetKey(k, req.add_keys());
  kv::AbortResponse resp;
  auto ctx = rpc::MakeContext(impl_->timeout);
  return rpc::ToAbslStatus(impl_->stub->Abort(ctx.get(), req, &resp));
}

absl::Status KvStoreClient::ReleaseLease(uint64_t lease_id) {
  if (lease_id == 0) return absl::OkStatus();
  kv::ReleaseRequest req;
  req.add_lease_ids(lease_id);
  kv::ReleaseResponse resp;
  auto ctx = rpc::MakeContext(impl_->timeout);
  return rpc::ToAbslStatus(impl_->stub->Release(ctx.get(), req, &resp));
}

absl::StatusOr<uint32_t> KvStoreClient::Recheck(std::span<const kvformat::BlockKey> keys) {
  kv::RecheckRequest req;
  for (const auto& k : keys) SetKey(k, req.add_keys());
  kv::RecheckResponse resp;
  auto ctx = rpc::MakeContext(impl_->timeout);
  OSCARKV_RETURN_IF_ERROR(rpc::ToAbslStatus(impl_->stub->Recheck(ctx.get(), req, &resp)));
  return resp.dropped();
}

}  // namespace oscarkv::prefill

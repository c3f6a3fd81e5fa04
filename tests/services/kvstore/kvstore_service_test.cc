// The kvstore over real sockets: gRPC control plane on a loopback port, UCX data plane between a
// client backend and the store's pool. A client reserves, puts blocks with UCX into the store's
// registered memory, commits, looks up the prefix, gets the blocks back with UCX and verifies
// their checksums; a corrupted write is refused at commit; /metrics reflects the traffic.
#include <cstring>

#include "gtest/gtest.h"
#include "httplib.h"
#include "lib/rpc/channel_factory.h"
#include "lib/rpc/status_conversion.h"
#include "lib/transfer/ucx/ucx_backend.h"
#include "oscarkv/kvstore/v1/kvstore.grpc.pb.h"
#include "services/kvstore/kvstore_server.h"
#include "tests/testing/test_blocks.h"

namespace oscarkv::kvstore {
namespace {

namespace kv = ::oscarkv::kvstore::v1;
namespace common = ::oscarkv::common::v1;
using kvformat::BlockKey;

void SetKey(const BlockKey& k, common::BlockKey* out) {
  out->set_lo(k.lo);
  out->set_hi(k.hi);
}

common::BlockDescriptor Describe(std::span<const std::byte> block) {
  auto h = kvformat::ParseBlockHeader(block);
  CHECK(h.ok());
  common::BlockDescriptor d;
  SetKey(h->key, d.mutable_key());
  SetKey(h->prev_key, d.mutable_prev_key());
  d.set_codec(h->codec);
  d.set_block_kind(h->block_kind);
  d.set_first_position(h->first_position);
  d.set_token_count(h->token_count);
  d.set_payload_bytes(h->payload_bytes);
  d.set_payload_checksum(h->payload_checksum);
  return d;
}

class KvStoreServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KvStoreConfig config;
    config.grpc_address = "127.0.0.1:0";
    config.metrics_host = "127.0.0.1";
    config.metrics_port = 0;
    config.capacity_bytes = 64 << 20;
    config.drain_seconds = 1;
    auto server = KvStoreServer::Create(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    auto client = transfer::UcxBackend::Create();
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
    auto channel = rpc::Connect(server_->grpc_dial_address());
    ASSERT_TRUE(channel.ok()) << channel.status();
    stub_ = kv::KvStoreService::NewStub(*channel);
  }

  std::unique_ptr<grpc::ClientContext> Ctx() { return rpc::MakeContext(std::chrono::seconds(10)); }

  // Puts `block` to a location returned by the store.
  absl::Status Put(std::vector<std::byte>& block, const common::BlockLocation& where) {
    auto local = client_->RegisterMemory(block);
    if (!local.ok()) return local.status();
    absl::Status s = transfer::TransferAndWait(
        *client_, {where.endpoint_address(),
                   {{local->handle, 0, where.remote_descriptor(), where.offset(), block.size(),
                     transfer::Direction::kPut}}});
    (void)client_->DeregisterMemory(local->handle);  // void: test cleanup; the put's status is what matters
    return s;
  }

  std::unique_ptr<KvStoreServer> server_;
  std::unique_ptr<transfer::UcxBackend> client_;
  std::unique_ptr<kv::KvStoreService::Stub> stub_;
};

TEST_F(KvStoreServiceTest, ReservePutCommitLookupGetOverGrpcAndUcx) {
  // A chain of three blocks of 64 KiB, 1 MiB and 4 MiB.
  const std::vector<size_t> sizes = {64 << 10, 1 << 20, 4 << 20};
  std::vector<std::vector<std::byte>> blocks;
  BlockKey prev{0, 0};
  for (size_t i = 0; i < sizes.size(); ++i) {
    const BlockKey key{0x1000 + i, 0x2000 + i};
    std::vector<std::byte> b = oscarkv::testing::MakeTestBlockOfSize(i + 1, sizes[i], key);
    // MakeTestBlockOfSize has no prev key parameter; rebuild with the chain link.
    auto h = kvformat::ParseBlockHeader(b);
    b = oscarkv::testing::MakeTestBlock(i + 1, h->layer_count, h->kv_heads, key, prev);
    prev = key;
    blocks.push_back(std::move(b));
  }

  kv::ReserveRequest reserve;
  for (const auto& b : blocks) *reserve.add_blocks() = Describe(b);
  kv::ReserveResponse reserved;
  ASSERT_TRUE(stub_->Reserve(Ctx().get(), reserve, &reserved).ok());
  ASSERT_EQ(reserved.reservations_size(), 3);
  kv::CommitRequest commit;
  for (int i = 0; i < 3; ++i) {
    const kv::Reservation& r = reserved.reservations(i);
    ASSERT_FALSE(r.already_stored());
    EXPECT_EQ(r.location().backend(), "ucx");
    EXPECT_GE(r.location().length(), blocks[i].size());
    ASSERT_TRUE(Put(blocks[i], r.location()).ok());
    *commit.add_keys() = r.key();
  }
  kv::CommitResponse committed;
  ASSERT_TRUE(stub_->Commit(Ctx().get(), commit, &committed).ok());
  EXPECT_EQ(committed.committed(), 3u);

  // Reserving again reports them stored.
  kv::ReserveResponse again;
  ASSERT_TRUE(stub_->Reserve(Ctx().get(), reserve, &again).ok());
  for (const auto& r : again.reservations()) EXPECT_TRUE(r.already_stored());

  // Lookup a longer chain: the first three match.
  kv::LookupPrefixRequest lookup;
  for (const auto& b : blocks) *lookup.add_keys() = Describe(b).key();
  SetKey({0xdead, 0xbeef}, lookup.add_keys());
  kv::LookupPrefixResponse found;
  ASSERT_TRUE(stub_->LookupPrefix(Ctx().get(), lookup, &found).ok());
  EXPECT_EQ(found.matched_blocks(), 3u);
  ASSERT_EQ(found.blocks_size(), 3);
  EXPECT_NE(found.lease_id(), 0u);

  // Read each back with a UCX get and check it on arrival.
  for (int i = 0; i < 3; ++i) {
    const common::BlockDescriptor& d = found.blocks(i);
    std::vector<std::byte> readback(128 + d.payload_bytes());
    auto sink = client_->RegisterMemory(readback);
    ASSERT_TRUE(sink.ok());
    ASSERT_TRUE(transfer::TransferAndWait(
                    *client_, {d.location().endpoint_address(),
                               {{sink->handle, 0, d.location().remote_descriptor(),
                                 d.location().offset(), readback.size(),
                                 transfer::Direction::kGet}}})
                    .ok());
    auto header = transfer::VerifyBlockOnArrival(readback);
    ASSERT_TRUE(header.ok()) << header.status();
    EXPECT_EQ(header->payload_checksum, d.payload_checksum());
    EXPECT_EQ(std::memcmp(readback.data(), blocks[i].data(), readback.size()), 0);
    ASSERT_TRUE(client_->DeregisterMemory(sink->handle).ok());
  }

  // Release the read lease, pin for a session, release the session.
  kv::ReleaseRequest release;
  release.add_lease_ids(found.lease_id());
  kv::ReleaseResponse released;
  ASSERT_TRUE(stub_->Release(Ctx().get(), release, &released).ok());
  EXPECT_EQ(released.released_leases(), 1u);
  kv::PinRequest pin;
  *pin.mutable_keys() = lookup.keys();
  pin.set_ttl_seconds(60);
  pin.mutable_session_id()->set_value("session-1");
  kv::PinResponse pinned;
  ASSERT_TRUE(stub_->Pin(Ctx().get(), pin, &pinned).ok());
  EXPECT_EQ(pinned.pinned(), 3u);
  EXPECT_EQ(pinned.missing(), 1u);

  kv::StatsResponse stats;
  ASSERT_TRUE(stub_->Stats(Ctx().get(), {}, &stats).ok());
  EXPECT_EQ(stats.blocks(), 3u);
  EXPECT_EQ(stats.pinned_blocks(), 3u);
  EXPECT_EQ(stats.lookup_block_hits(), 3u);
  EXPECT_EQ(stats.lookup_block_misses(), 1u);
  EXPECT_DOUBLE_EQ(stats.hit_rate(), 0.75);
  uint64_t stored = 0;
  for (const auto& b : blocks) stored += b.size();
  ASSERT_EQ(stats.by_codec_size(), 1);
  EXPECT_EQ(stats.by_codec(0).stored_bytes(), stored);
  EXPECT_EQ(stats.bytes_saved_vs_bf16(), 0u);  // BF16 blocks save nothing

  // /metrics, /healthz and /readyz.
  httplib::Client http("127.0.0.1", server_->metrics_port());
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->body.find("oscarkv_kvstore_blocks{state=\"committed\"} 3"), std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("oscarkv_kvstore_blocks_committed_total 3"), std::string::npos);
  auto ready = http.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200);
}

TEST_F(KvStoreServiceTest, CorruptedWriteIsRefusedAtCommit) {
  std::vector<std::byte> block = oscarkv::testing::MakeTestBlockOfSize(9, 256 << 10, {7, 7});
  kv::ReserveRequest reserve;
  *reserve.add_blocks() = Describe(block);
  kv::ReserveResponse reserved;
  ASSERT_TRUE(stub_->Reserve(Ctx().get(), reserve, &reserved).ok());
  block[block.size() - 1] ^= std::byte{0x80};  // corrupt after the descriptor was taken
  ASSERT_TRUE(Put(block, reserved.reservations(0).location()).ok());
  kv::CommitRequest commit;
  *commit.add_keys() = reserved.reservations(0).key();
  kv::CommitResponse committed;
  const absl::Status status =
      rpc::ToAbslStatus(stub_->Commit(Ctx().get(), commit, &committed));
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  kv::LookupPrefixRequest lookup;
  *lookup.add_keys() = reserved.reservations(0).key();
  kv::LookupPrefixResponse found;
  ASSERT_TRUE(stub_->LookupPrefix(Ctx().get(), lookup, &found).ok());
  EXPECT_EQ(found.matched_blocks(), 0u);
  // Commit of something never reserved is a precondition failure.
  SetKey({1, 1}, commit.mutable_keys(0));
  EXPECT_EQ(stub_->Commit(Ctx().get(), commit, &committed).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(KvStoreServiceTest, ShutdownStopsServingAndReadiness) {
  httplib::Client http("127.0.0.1", server_->metrics_port());
  server_->Shutdown();
  auto stats_ctx = rpc::MakeContext(std::chrono::milliseconds(500));
  kv::StatsResponse stats;
  EXPECT_FALSE(stub_->Stats(stats_ctx.get(), {}, &stats).ok());
  EXPECT_FALSE(http.Get("/readyz"));  // HTTP server stopped
}

}  // namespace
}  // namespace oscarkv::kvstore

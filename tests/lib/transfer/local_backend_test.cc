#include "lib/transfer/local/local_backend.h"

#include "gtest/gtest.h"
#include "tests/lib/transfer/transfer_test_util.h"
#include "tests/testing/fake_transfer_backend.h"

namespace oscarkv::transfer {
namespace {

TEST(LocalBackend, RoundTripsBlocksFrom64KiBTo16MiB) {
  auto client = LocalBackend::Create();
  auto server = LocalBackend::Create();
  ASSERT_TRUE(client.ok() && server.ok());
  uint64_t seed = 1;
  for (size_t bytes : {size_t{64} << 10, size_t{1} << 20, size_t{16} << 20}) {
    SCOPED_TRACE(bytes);
    RoundTripBlock(**client, **server, bytes, seed++);
  }
}

TEST(LocalBackend, CorruptedBlockIsDetected) {
  auto client = LocalBackend::Create();
  auto server = LocalBackend::Create();
  CorruptedBlockIsDetected(**client, **server);
}

TEST(LocalBackend, OutOfBoundsIsRefused) {
  auto client = LocalBackend::Create();
  auto server = LocalBackend::Create();
  OutOfBoundsIsRefused(**client, **server);
}

TEST(LocalBackend, DeregisteredRegionIsUnreachable) {
  auto client = LocalBackend::Create();
  auto server = LocalBackend::Create();
  std::vector<std::byte> a(64), b(64);
  auto l = (*client)->RegisterMemory(a);
  auto r = (*server)->RegisterMemory(b);
  ASSERT_TRUE((*server)->DeregisterMemory(r->handle).ok());
  TransferBatch batch{.peer_address = (*server)->EndpointAddress(),
                      .ops = {{l->handle, 0, r->remote_descriptor, 0, 64, Direction::kPut}}};
  EXPECT_EQ((*client)->Post(batch).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*server)->DeregisterMemory(r->handle).code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE((*client)->capabilities().remote_peers);
}

TEST(FakeTransferBackend, StallsFailsAndCorruptsOnCue) {
  oscarkv::testing::FakeTransferBackend client, server;
  RoundTripBlock(client, server, 64 << 10, 3);

  std::vector<std::byte> block = oscarkv::testing::MakeTestBlockOfSize(5, 64 << 10);
  std::vector<std::byte> remote(block.size());
  auto l = client.RegisterMemory(block);
  auto r = server.RegisterMemory(remote);
  const TransferBatch put{.peer_address = "fake",
                          .ops = {{l->handle, 0, r->remote_descriptor, 0, block.size(),
                                   Direction::kPut}}};
  client.SetStalled(true);
  auto id = client.Post(put);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*client.Poll(*id), TransferState::kPending);
  EXPECT_EQ(WaitForTransfer(client, *id, std::chrono::milliseconds(20)).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(VerifyBlockOnArrival(remote).ok());  // nothing moved while stalled
  client.SetStalled(false);
  EXPECT_EQ(*client.Poll(*id), TransferState::kDone);
  EXPECT_TRUE(VerifyBlockOnArrival(remote).ok());

  client.FailNextTransfers(1, absl::UnavailableError("wire cut"));
  EXPECT_EQ(TransferAndWait(client, put).code(), absl::StatusCode::kUnavailable);
  client.FailNextPosts(1, absl::UnavailableError("no route"));
  EXPECT_EQ(client.Post(put).status().code(), absl::StatusCode::kUnavailable);

  client.CorruptNextTransfers(1);
  ASSERT_TRUE(TransferAndWait(client, put).ok());
  EXPECT_EQ(VerifyBlockOnArrival(remote).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace oscarkv::transfer

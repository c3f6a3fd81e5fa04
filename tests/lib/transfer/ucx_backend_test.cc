// UCX loopback: two backends (two ucp workers) in one process, over the transports a plain
// 2-core machine has (tcp, self, shared memory), configured through ucp_config_modify.
#include "lib/transfer/ucx/ucx_backend.h"

#include <thread>

#include "gtest/gtest.h"
#include "tests/lib/transfer/transfer_test_util.h"

namespace oscarkv::transfer {
namespace {

// Param: transports, optionally suffixed "/nopeer" to turn peer failure detection off (which lets
// UCX use shared memory).
class UcxBackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  UcxOptions Options() const {
    std::string tls = GetParam();
    UcxOptions options;
    if (const size_t slash = tls.find('/'); slash != std::string::npos) {
      options.peer_failure_detection = false;
      tls = tls.substr(0, slash);
    }
    options.transports = tls;
    return options;
  }
};

TEST_P(UcxBackendTest, RoundTripsBlocksFrom64KiBTo16MiB) {
  auto client = UcxBackend::Create(Options());
  ASSERT_TRUE(client.ok()) << client.status();
  auto server = UcxBackend::Create(Options());
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE((*client)->capabilities().remote_peers);
  uint64_t seed = 11;
  for (size_t bytes : {size_t{64} << 10, size_t{1} << 20, size_t{16} << 20}) {
    SCOPED_TRACE(bytes);
    RoundTripBlock(**client, **server, bytes, seed++);
  }
}

TEST_P(UcxBackendTest, CorruptedBlockIsDetected) {
  auto client = UcxBackend::Create(Options());
  auto server = UcxBackend::Create(Options());
  ASSERT_TRUE(client.ok() && server.ok());
  CorruptedBlockIsDetected(**client, **server);
}

TEST_P(UcxBackendTest, OutOfBoundsIsRefused) {
  auto client = UcxBackend::Create(Options());
  auto server = UcxBackend::Create(Options());
  ASSERT_TRUE(client.ok() && server.ok());
  OutOfBoundsIsRefused(**client, **server);
}

INSTANTIATE_TEST_SUITE_P(Transports, UcxBackendTest,
                         ::testing::Values("tcp,self,sm", "tcp,self", "tcp,self,sm/nopeer"),
                         [](const auto& info) {
                           if (info.param == "tcp,self") return std::string("Tcp");
                           if (info.param == "tcp,self,sm") return std::string("TcpSm");
                           return std::string("TcpSmNoPeerErrors");
                         });

TEST(UcxBackend, ManyBlocksInOneBatchFromSeveralThreads) {
  auto client = UcxBackend::Create();
  auto server = UcxBackend::Create();
  ASSERT_TRUE(client.ok() && server.ok());
  constexpr int kThreads = 2, kBlocks = 8;
  const size_t slot = (256 << 10) + 128;
  std::vector<std::byte> store(kThreads * kBlocks * slot);
  auto store_reg = (*server)->RegisterMemory(store);
  ASSERT_TRUE(store_reg.ok());
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::vector<std::byte>> blocks;
      TransferBatch batch{.peer_address = (*server)->EndpointAddress()};
      std::vector<MemoryHandle> handles;
      for (int b = 0; b < kBlocks; ++b) {
        blocks.push_back(oscarkv::testing::MakeTestBlockOfSize(100 * t + b, 256 << 10));
      }
      for (int b = 0; b < kBlocks; ++b) {
        auto reg = (*client)->RegisterMemory(blocks[b]);
        ASSERT_TRUE(reg.ok());
        handles.push_back(reg->handle);
        batch.ops.push_back({reg->handle, 0, store_reg->remote_descriptor,
                             (t * kBlocks + b) * slot, blocks[b].size(), Direction::kPut});
      }
      ASSERT_TRUE(TransferAndWait(**client, batch).ok());
      for (MemoryHandle h : handles) ASSERT_TRUE((*client)->DeregisterMemory(h).ok());
    });
  }
  for (auto& th : threads) th.join();
  for (int i = 0; i < kThreads * kBlocks; ++i) {
    EXPECT_TRUE(VerifyBlockOnArrival(std::span(store).subspan(i * slot, slot)).ok()) << i;
  }
}

TEST(UcxBackend, UnknownTransportIsRejected) {
  auto backend = UcxBackend::Create({.transports = "no-such-transport"});
  EXPECT_FALSE(backend.ok());
}

}  // namespace
}  // namespace oscarkv::transfer

// WorkerChannels: one channel per address, reused; Retain keeps the addresses of workers that
// are not dead (suspect included) and drops the rest. Channels are created lazily and never
// dialled here, except in the last test, which dials a closed port.
#include "services/router_backend/worker_channels.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include "gtest/gtest.h"

namespace oscarkv::router_backend {
namespace {

router::WorkerView View(const std::string& id, const std::string& address,
                        router::WorkerHealth health) {
  router::WorkerView w;
  w.spec.id = id;
  w.spec.role = router::WorkerRole::kDecode;
  w.spec.address = address;
  w.health = health;
  return w;
}

TEST(WorkerChannels, SameAddressSharesOneChannel) {
  WorkerChannels channels;
  std::shared_ptr<WorkerStubs> a = channels.Get("127.0.0.1:1001");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->address, "127.0.0.1:1001");
  EXPECT_NE(a->prefill, nullptr);
  EXPECT_NE(a->decode, nullptr);
  EXPECT_EQ(channels.Get("127.0.0.1:1001"), a);
  EXPECT_NE(channels.Get("127.0.0.1:1002"), a);
  EXPECT_EQ(channels.addresses(), (std::vector<std::string>{"127.0.0.1:1001", "127.0.0.1:1002"}));
}

TEST(WorkerChannels, RetainDropsDeadAndUnregisteredAddressesButKeepsSuspectOnes) {
  WorkerChannels channels;
  for (const char* a : {"h:1", "h:2", "h:3", "h:4"}) channels.Get(a);
  std::shared_ptr<WorkerStubs> held = channels.Get("h:3");  // a request still running there
  const std::vector<std::string> dropped = channels.Retain({
      View("healthy", "h:1", router::WorkerHealth::kHealthy),
      View("suspect", "h:2", router::WorkerHealth::kSuspect),
      View("dead", "h:3", router::WorkerHealth::kDead),
      // h:4: its worker re-registered at h:5 (no channel yet: nothing to keep or drop).
      View("moved", "h:5", router::WorkerHealth::kHealthy),
  });
  EXPECT_EQ(dropped, (std::vector<std::string>{"h:3", "h:4"}));
  EXPECT_EQ(channels.addresses(), (std::vector<std::string>{"h:1", "h:2"}));
  EXPECT_EQ(held->address, "h:3");  // the running request keeps its stubs
  // A dead worker that heartbeats again is reached over a new channel.
  EXPECT_NE(channels.Get("h:3"), held);
}

TEST(WorkerChannels, AnAddressSharedWithALiveWorkerIsKept) {
  WorkerChannels channels;
  std::shared_ptr<WorkerStubs> a = channels.Get("h:1");
  // The dead worker's address now belongs to a new live one: same channel.
  EXPECT_TRUE(channels
                  .Retain({View("old", "h:1", router::WorkerHealth::kDead),
                           View("new", "h:1", router::WorkerHealth::kHealthy)})
                  .empty());
  EXPECT_EQ(channels.Get("h:1"), a);
  EXPECT_EQ(channels.Retain({}), (std::vector<std::string>{"h:1"}));
  EXPECT_TRUE(channels.addresses().empty());
}

// A loopback port that nothing listens on (bound, read back, closed).
int ClosedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return -1;
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

TEST(WorkerChannels, AChannelThatFailedToConnectIsReplaced) {
  const int port = ClosedPort();
  ASSERT_GT(port, 0);
  const std::string address = "127.0.0.1:" + std::to_string(port);
  WorkerChannels channels;
  std::shared_ptr<WorkerStubs> first = channels.Get(address);
  // Dial the closed port until the channel reports the refused connection.
  const auto give_up = std::chrono::system_clock::now() + std::chrono::seconds(20);
  grpc_connectivity_state state = first->channel->GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_TRANSIENT_FAILURE &&
         first->channel->WaitForStateChange(state, give_up)) {
    state = first->channel->GetState(/*try_to_connect=*/true);
  }
  ASSERT_EQ(state, GRPC_CHANNEL_TRANSIENT_FAILURE);
  // A worker registered there again (e.g. restarted) is dialled over a new channel, not one
  // waiting out its reconnect backoff.
  std::shared_ptr<WorkerStubs> second = channels.Get(address);
  EXPECT_NE(second, first);
  EXPECT_EQ(second->address, address);
  EXPECT_EQ(channels.Get(address), second);  // idle, not failed: kept
}

}  // namespace
}  // namespace oscarkv::router_backend

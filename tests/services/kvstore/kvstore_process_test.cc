// The oscarkv_kvstore binary as its own process: start it on free ports, learn the gRPC port from
// its startup log line, store and read back a chain of blocks over gRPC + UCX across the process
// boundary, scrape /metrics, then SIGTERM it and expect a clean drain (exit 0). Then the same
// process stopped with SIGSTOP: a call to it fails kUnavailable through the channel's keepalive
// pings well before its deadline, and after SIGCONT the next call succeeds.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <regex>

#include "gtest/gtest.h"
#include "httplib.h"
#include "lib/rpc/channel_factory.h"
#include "lib/transfer/ucx/ucx_backend.h"
#include "oscarkv/kvstore/v1/kvstore.grpc.pb.h"
#include "tests/testing/test_blocks.h"

namespace oscarkv::kvstore {
namespace {

namespace kv = ::oscarkv::kvstore::v1;

class KvStoreProcess {
 public:
  // Starts the binary; stderr goes to a pipe we read the startup line from.
  bool Start() {
    int err[2];
    if (pipe(err) != 0) return false;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(err[1], 2);
      close(err[0]);
      execl(OSCARKV_KVSTORE_BINARY, OSCARKV_KVSTORE_BINARY, "--grpc_address", "127.0.0.1:0",
            "--metrics_host", "127.0.0.1", "--metrics_port", "0", "--capacity_bytes", "67108864",
            "--drain_seconds", "1", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(err[1]);
    log_ = fdopen(err[0], "r");
    const std::regex ready("serving gRPC on port ([0-9]+), metrics on port ([0-9]+)");
    char line[1024];
    while (fgets(line, sizeof(line), log_) != nullptr) {
      std::cmatch m;
      if (std::regex_search(line, m, ready)) {
        grpc_port_ = std::stoi(m[1]);
        metrics_port_ = std::stoi(m[2]);
        return true;
      }
    }
    return false;
  }
  // SIGSTOP / SIGCONT: the process hangs with its sockets open, as a wedged peer does. Each
  // returns once the kernel reports the new state (a signal takes effect asynchronously).
  // @return false when that did not happen within 10 s.
  bool Pause() { return kill(pid_, SIGSTOP) == 0 && WaitForState(/*stopped=*/true); }
  bool Resume() { return kill(pid_, SIGCONT) == 0 && WaitForState(/*stopped=*/false); }
  // SIGTERM and wait; returns the exit status (or -1).
  int Stop() {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = 0;
    if (log_) fclose(log_);
    log_ = nullptr;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  ~KvStoreProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGCONT);
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (log_) fclose(log_);
  }
  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }

 private:
  // Polls the state letter of /proc/<pid>/stat ('T': stopped).
  bool WaitForState(bool stopped) {
    const std::string path = "/proc/" + std::to_string(pid_) + "/stat";
    for (int i = 0; i < 1000; ++i) {
      std::FILE* f = std::fopen(path.c_str(), "r");
      if (f == nullptr) return false;
      char buf[512] = {};
      const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
      std::fclose(f);
      const char* paren = std::strrchr(buf, ')');  // "pid (comm) S ..."
      if (n > 0 && paren != nullptr && paren[1] == ' ' && (paren[2] == 'T') == stopped) {
        return true;
      }
      usleep(10000);
    }
    return false;
  }

  pid_t pid_ = 0;
  FILE* log_ = nullptr;
  int grpc_port_ = 0, metrics_port_ = 0;
};

TEST(KvStoreProcess, StoresAndServesBlocksAcrossProcessesThenDrains) {
  KvStoreProcess process;
  ASSERT_TRUE(process.Start());
  auto channel = rpc::Connect("127.0.0.1:" + std::to_string(process.grpc_port()));
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto stub = kv::KvStoreService::NewStub(*channel);
  auto client = transfer::UcxBackend::Create();
  ASSERT_TRUE(client.ok()) << client.status();

  constexpr int kBlocks = 4;
  std::vector<std::vector<std::byte>> blocks;
  kv::ReserveRequest reserve;
  kvformat::BlockKey prev{0, 0};
  for (int i = 0; i < kBlocks; ++i) {
    const kvformat::BlockKey key{0x77 + static_cast<uint64_t>(i), 0x99};
    blocks.push_back(oscarkv::testing::MakeTestBlock(i, 8, 4, key, prev));  // 512 KiB each
    prev = key;
    auto h = kvformat::ParseBlockHeader(blocks.back());
    auto* d = reserve.add_blocks();
    d->mutable_key()->set_lo(key.lo);
    d->mutable_key()->set_hi(key.hi);
    d->mutable_prev_key()->set_lo(h->prev_key.lo);
    d->mutable_prev_key()->set_hi(h->prev_key.hi);
    d->set_codec(h->codec);
    d->set_block_kind(h->block_kind);
    d->set_token_count(h->token_count);
    d->set_payload_bytes(h->payload_bytes);
    d->set_payload_checksum(h->payload_checksum);
  }
  kv::ReserveResponse reserved;
  auto ctx = rpc::MakeContext(std::chrono::seconds(10));
  ASSERT_TRUE(stub->Reserve(ctx.get(), reserve, &reserved).ok());
  transfer::TransferBatch batch;
  std::vector<transfer::MemoryHandle> handles;
  kv::CommitRequest commit;
  for (int i = 0; i < kBlocks; ++i) {
    const auto& loc = reserved.reservations(i).location();
    batch.peer_address = loc.endpoint_address();
    auto reg = (*client)->RegisterMemory(blocks[i]);
    ASSERT_TRUE(reg.ok());
    batch.ops.push_back({reg->handle, 0, loc.remote_descriptor(), loc.offset(), blocks[i].size(),
                         transfer::Direction::kPut});
    *commit.add_keys() = reserved.reservations(i).key();
  }
  ASSERT_TRUE(transfer::TransferAndWait(**client, batch).ok());  // all four in one batch
  kv::CommitResponse committed;
  ctx = rpc::MakeContext(std::chrono::seconds(10));
  ASSERT_TRUE(stub->Commit(ctx.get(), commit, &committed).ok());
  EXPECT_EQ(committed.committed(), static_cast<uint32_t>(kBlocks));

  kv::LookupPrefixRequest lookup;
  *lookup.mutable_keys() = commit.keys();
  kv::LookupPrefixResponse found;
  ctx = rpc::MakeContext(std::chrono::seconds(10));
  ASSERT_TRUE(stub->LookupPrefix(ctx.get(), lookup, &found).ok());
  ASSERT_EQ(found.matched_blocks(), static_cast<uint32_t>(kBlocks));
  for (int i = 0; i < kBlocks; ++i) {
    const auto& d = found.blocks(i);
    std::vector<std::byte> readback(128 + d.payload_bytes());
    auto reg = (*client)->RegisterMemory(readback);
    ASSERT_TRUE(reg.ok());
    ASSERT_TRUE(transfer::TransferAndWait(
                    **client, {d.location().endpoint_address(),
                               {{reg->handle, 0, d.location().remote_descriptor(),
                                 d.location().offset(), readback.size(),
                                 transfer::Direction::kGet}}})
                    .ok());
    ASSERT_TRUE(transfer::VerifyBlockOnArrival(readback).ok());
    EXPECT_EQ(std::memcmp(readback.data(), blocks[i].data(), readback.size()), 0);
  }

  httplib::Client http("127.0.0.1", process.metrics_port());
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("oscarkv_kvstore_blocks_committed_total 4"), std::string::npos);
  EXPECT_EQ(process.Stop(), 0);
}

TEST(KvStoreProcess, ACallToAStoppedPeerFailsByKeepaliveNotAtItsDeadline) {
  KvStoreProcess process;
  ASSERT_TRUE(process.Start());
  rpc::ChannelOptions options;
  options.keepalive_time = std::chrono::milliseconds(1000);
  options.keepalive_timeout = std::chrono::milliseconds(3000);
  auto channel = rpc::Connect("127.0.0.1:" + std::to_string(process.grpc_port()), options);
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto stub = kv::KvStoreService::NewStub(*channel);
  kv::StatsResponse stats;
  auto ctx = rpc::MakeContext(std::chrono::seconds(10));
  ASSERT_TRUE(stub->Stats(ctx.get(), kv::StatsRequest(), &stats).ok());

  ASSERT_TRUE(process.Pause());
  constexpr auto kDeadline = std::chrono::seconds(60);
  const auto start = std::chrono::steady_clock::now();
  ctx = rpc::MakeContext(kDeadline);
  const grpc::Status hung = stub->Stats(ctx.get(), kv::StatsRequest(), &stats);
  const auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(process.Resume());
  // The ping goes unanswered: the transport closes and the call fails as unavailable, long before
  // the deadline (without keepalive it would wait all of it, as DEADLINE_EXCEEDED).
  EXPECT_EQ(hung.error_code(), grpc::StatusCode::UNAVAILABLE) << hung.error_message();
  EXPECT_LT(waited, kDeadline / 2);

  // The channel reconnects to the resumed process. A call that lands on the transport the
  // keepalive is still closing fails with it ("keepalive watchdog timeout", seen once under
  // load); the next one takes the new connection.
  grpc::Status resumed;
  for (int attempt = 0; attempt < 3; ++attempt) {
    ctx = rpc::MakeContext(std::chrono::seconds(10));
    ctx->set_wait_for_ready(true);
    resumed = stub->Stats(ctx.get(), kv::StatsRequest(), &stats);
    if (resumed.error_code() != grpc::StatusCode::UNAVAILABLE) break;
  }
  EXPECT_TRUE(resumed.ok()) << resumed.error_code() << " " << resumed.error_message();
  EXPECT_EQ(process.Stop(), 0);
}

}  // namespace
}  // namespace oscarkv::kvstore

// UCX across two processes: the child registers a region and publishes its worker address and
// descriptor through a pipe (standing in for the control plane); the parent puts a block into it
// and reads it back; the child checks the block on arrival. Fork happens before either process
// creates any UCX object.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "gtest/gtest.h"
#include "lib/transfer/ucx/ucx_backend.h"
#include "tests/testing/test_blocks.h"

namespace oscarkv::transfer {
namespace {

bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}
bool ReadAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}
bool WriteString(int fd, const std::string& s) {
  const uint64_t n = s.size();
  return WriteAll(fd, &n, 8) && WriteAll(fd, s.data(), n);
}
bool ReadString(int fd, std::string* s) {
  uint64_t n = 0;
  if (!ReadAll(fd, &n, 8)) return false;
  s->resize(n);
  return ReadAll(fd, s->data(), n);
}

constexpr size_t kBlockBytes = 4 << 20;

// Child: serve a region, wait for "written", verify, report, wait for "bye".
int RunChild(int to_parent, int from_parent) {
  auto backend = UcxBackend::Create();
  if (!backend.ok()) return 2;
  std::vector<std::byte> region(kBlockBytes + 4096);
  auto reg = (*backend)->RegisterMemory(region);
  if (!reg.ok()) return 3;
  if (!WriteString(to_parent, (*backend)->EndpointAddress()) ||
      !WriteString(to_parent, reg->remote_descriptor)) {
    return 4;
  }
  char cmd = 0;
  if (!ReadAll(from_parent, &cmd, 1)) return 5;
  const char verdict = VerifyBlockOnArrival(region).ok() ? 'y' : 'n';
  if (!WriteAll(to_parent, &verdict, 1)) return 6;
  if (!ReadAll(from_parent, &cmd, 1)) return 7;  // bye: the parent is done reading
  return 0;
}

TEST(UcxTwoProcess, PutAndGetAcrossProcesses) {
  int up[2], down[2];
  ASSERT_EQ(pipe(up), 0);
  ASSERT_EQ(pipe(down), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(up[0]);
    close(down[1]);
    _exit(RunChild(up[1], down[0]));
  }
  close(up[1]);
  close(down[0]);
  std::string address, descriptor;
  ASSERT_TRUE(ReadString(up[0], &address));
  ASSERT_TRUE(ReadString(up[0], &descriptor));

  auto backend = UcxBackend::Create();
  ASSERT_TRUE(backend.ok()) << backend.status();
  std::vector<std::byte> block = oscarkv::testing::MakeTestBlockOfSize(42, kBlockBytes);
  std::vector<std::byte> readback(block.size());
  auto source = (*backend)->RegisterMemory(block);
  auto sink = (*backend)->RegisterMemory(readback);
  ASSERT_TRUE(source.ok() && sink.ok());
  ASSERT_TRUE(TransferAndWait(**backend, {address, {{source->handle, 0, descriptor, 0,
                                                     block.size(), Direction::kPut}}})
                  .ok());
  const char written = 'w';
  ASSERT_TRUE(WriteAll(down[1], &written, 1));
  char verdict = 0;
  ASSERT_TRUE(ReadAll(up[0], &verdict, 1));
  EXPECT_EQ(verdict, 'y') << "the child's arrival check failed";
  ASSERT_TRUE(TransferAndWait(**backend, {address, {{sink->handle, 0, descriptor, 0,
                                                     block.size(), Direction::kGet}}})
                  .ok());
  EXPECT_EQ(std::memcmp(readback.data(), block.data(), block.size()), 0);
  const char bye = 'b';
  ASSERT_TRUE(WriteAll(down[1], &bye, 1));
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  EXPECT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 0);
}

// A peer that dies makes transfers fail (endpoints use UCX's peer error handling) instead of
// hanging, and the backend stays usable and shuts down cleanly.
TEST(UcxTwoProcess, DeadPeerFailsTransfersInsteadOfHanging) {
  int up[2], down[2];
  ASSERT_EQ(pipe(up), 0);
  ASSERT_EQ(pipe(down), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(up[0]);
    close(down[1]);
    _exit(RunChild(up[1], down[0]));
  }
  close(up[1]);
  close(down[0]);
  std::string address, descriptor;
  ASSERT_TRUE(ReadString(up[0], &address));
  ASSERT_TRUE(ReadString(up[0], &descriptor));
  auto backend = UcxBackend::Create();
  ASSERT_TRUE(backend.ok());
  std::vector<std::byte> block = oscarkv::testing::MakeTestBlockOfSize(1, 1 << 20);
  auto source = (*backend)->RegisterMemory(block);
  ASSERT_TRUE(source.ok());
  const TransferBatch put{address, {{source->handle, 0, descriptor, 0, block.size(),
                                     Direction::kPut}}};
  ASSERT_TRUE(TransferAndWait(**backend, put).ok());
  kill(pid, SIGKILL);
  ASSERT_EQ(waitpid(pid, nullptr, 0), pid);
  // The first transfers after the death may still succeed on transports that buffer; within a
  // few attempts one must fail, and none may hang past its deadline.
  absl::Status status;
  for (int attempt = 0; attempt < 20 && status.ok(); ++attempt) {
    absl::StatusOr<TransferId> id = (*backend)->Post(put);
    status = id.ok() ? WaitForTransfer(**backend, *id, std::chrono::seconds(10)) : id.status();
    EXPECT_NE(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
    if (status.ok()) usleep(50'000);
  }
  EXPECT_FALSE(status.ok());
  const TransferCounters counters = (*backend)->counters();
  EXPECT_GE(counters.batches_done, 1u);
}

}  // namespace
}  // namespace oscarkv::transfer

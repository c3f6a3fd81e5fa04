// RunServiceMain: the exit codes and order of a service binary's main(). --help exits 0 without
// starting; a bad config prints "<binary>: <why>" and exits 2; a failed start exits 1; a started
// server runs until SIGTERM (a real signal to this process), is stopped once, and main exits 0.
#include "lib/rpc/service_main.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <sstream>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace oscarkv::rpc {
namespace {

struct Recorder {
  std::atomic<int> starts{0};
  std::atomic<int> stops{0};
};

ServiceMainSteps Steps(Recorder& r, absl::Status config, absl::Status start = absl::OkStatus(),
                       absl::Notification* started = nullptr) {
  ServiceMainSteps s;
  s.binary = "oscarkv_test";
  s.service = "test";
  s.configure = [config] { return config; };
  s.start = [&r, start, started]() -> absl::StatusOr<std::function<void()>> {
    r.starts.fetch_add(1);
    if (!start.ok()) return start;
    if (started != nullptr) started->Notify();
    return [&r] { r.stops.fetch_add(1); };
  };
  return s;
}

TEST(RunServiceMain, HelpExitsZeroWithoutStarting) {
  Recorder r;
  std::ostringstream err;
  EXPECT_EQ(RunServiceMain(Steps(r, absl::CancelledError("--help printed")), err), 0);
  EXPECT_EQ(r.starts.load(), 0);
  EXPECT_EQ(err.str(), "");
}

TEST(RunServiceMain, BadConfigIsNamedOnStderrAndExitsTwo) {
  Recorder r;
  std::ostringstream err;
  EXPECT_EQ(RunServiceMain(
                Steps(r, absl::InvalidArgumentError("--metrics_port must be in [-1, 65535]")), err),
            2);
  EXPECT_EQ(err.str(), "oscarkv_test: --metrics_port must be in [-1, 65535]\n");
  EXPECT_EQ(r.starts.load(), 0);
}

TEST(RunServiceMain, FailedStartExitsOne) {
  Recorder r;
  std::ostringstream err;
  EXPECT_EQ(RunServiceMain(Steps(r, absl::OkStatus(), absl::UnavailableError("port in use")), err),
            1);
  EXPECT_EQ(r.starts.load(), 1);
  EXPECT_EQ(r.stops.load(), 0);
}

TEST(RunServiceMain, ServesUntilSigtermThenStopsOnceAndExitsZero) {
  Recorder r;
  absl::Notification started;
  std::thread signaller([&] {
    ASSERT_TRUE(started.WaitForNotificationWithTimeout(absl::Seconds(10)));
    EXPECT_EQ(r.stops.load(), 0);  // still serving
    kill(getpid(), SIGTERM);       // the handler RunServiceMain installed turns it into a wakeup
  });
  std::ostringstream err;
  EXPECT_EQ(RunServiceMain(Steps(r, absl::OkStatus(), absl::OkStatus(), &started), err), 0);
  signaller.join();
  EXPECT_EQ(r.starts.load(), 1);
  EXPECT_EQ(r.stops.load(), 1);
}

}  // namespace
}  // namespace oscarkv::rpc

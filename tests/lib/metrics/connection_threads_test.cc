#include "lib/metrics/connection_threads.h"

#include <atomic>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace oscarkv::metrics {
namespace {

// Waits up to 5 s for `done`.
template <class F>
bool Eventually(F done) {
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while (!done()) {
    if (absl::Now() > until) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

// Long tasks (streams) must not keep a new one waiting while fewer than max_threads run.
TEST(ConnectionThreads, EveryTaskStartsAtOnceUpToTheMaximum) {
  ConnectionThreads pool(/*min_threads=*/2, /*max_threads=*/200, absl::Seconds(10));
  absl::Notification release;
  std::atomic<int> running{0};
  for (int i = 0; i < 150; ++i) {
    pool.enqueue([&] {
      running.fetch_add(1);
      release.WaitForNotification();
    });
  }
  EXPECT_TRUE(Eventually([&] { return running.load() == 150; })) << running.load();
  EXPECT_EQ(pool.busy(), 150);
  release.Notify();
  pool.shutdown();
}

TEST(ConnectionThreads, BeyondTheMaximumTasksWaitForAFreeThread) {
  ConnectionThreads pool(1, 4, absl::Seconds(10));
  absl::Notification release;
  std::atomic<int> running{0};
  std::atomic<int> finished{0};
  for (int i = 0; i < 10; ++i) {
    pool.enqueue([&] {
      running.fetch_add(1);
      release.WaitForNotification();
      finished.fetch_add(1);
    });
  }
  EXPECT_TRUE(Eventually([&] { return running.load() == 4; }));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(running.load(), 4) << "no more than max_threads at once";
  EXPECT_EQ(pool.threads(), 4);
  release.Notify();
  EXPECT_TRUE(Eventually([&] { return finished.load() == 10; }));
  pool.shutdown();
}

TEST(ConnectionThreads, ThreadsBeyondTheMinimumEndWhenIdle) {
  ConnectionThreads pool(3, 64, absl::Milliseconds(50));
  EXPECT_EQ(pool.threads(), 3);
  absl::Notification release;
  std::atomic<int> running{0};
  for (int i = 0; i < 20; ++i) {
    pool.enqueue([&] {
      running.fetch_add(1);
      release.WaitForNotification();
    });
  }
  EXPECT_TRUE(Eventually([&] { return running.load() == 20; }));
  EXPECT_GE(pool.threads(), 20);
  release.Notify();
  EXPECT_TRUE(Eventually([&] { return pool.threads() == 3; })) << pool.threads();
  // The pool still works after shrinking.
  std::atomic<int> ran{0};
  for (int i = 0; i < 5; ++i) pool.enqueue([&] { ran.fetch_add(1); });
  EXPECT_TRUE(Eventually([&] { return ran.load() == 5; }));
  pool.shutdown();
}

TEST(ConnectionThreads, ShutdownRunsWhatIsQueuedAndDropsLaterTasks) {
  ConnectionThreads pool(1, 1, absl::Seconds(10));
  std::atomic<int> ran{0};
  absl::Notification release;
  pool.enqueue([&] { release.WaitForNotification(); });
  for (int i = 0; i < 5; ++i) pool.enqueue([&] { ran.fetch_add(1); });
  std::thread stop([&] { pool.shutdown(); });
  absl::SleepFor(absl::Milliseconds(20));
  release.Notify();
  stop.join();
  EXPECT_EQ(ran.load(), 5);
  EXPECT_EQ(pool.threads(), 0);
  pool.enqueue([&] { ran.fetch_add(1); });
  EXPECT_EQ(ran.load(), 5);
}

}  // namespace
}  // namespace oscarkv::metrics

#include "services/router/request_tracker.h"

#include <set>
#include <thread>

#include "gtest/gtest.h"

namespace oscarkv::router {
namespace {

struct FakeClock {
  absl::Time now = absl::FromUnixSeconds(1'000'000);
};

TEST(RequestTracker, IdsAreUniqueHex) {
  RequestTracker tracker;
  std::set<std::string> ids;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = tracker.Admit(absl::Seconds(1), "");
    EXPECT_EQ(id.size(), 24u);
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 1000u);
  EXPECT_EQ(tracker.InFlight(), 1000u);
}

TEST(RequestTracker, LifecycleAndTerminalStates) {
  FakeClock clock;
  RequestTracker tracker([&] { return clock.now; });
  const std::string id = tracker.Admit(absl::Seconds(10), "sess");
  EXPECT_EQ(tracker.Get(id)->state, RequestState::kAdmitted);
  EXPECT_EQ(tracker.Get(id)->session_id, "sess");
  EXPECT_EQ(tracker.Deadline(id), clock.now + absl::Seconds(10));
  ASSERT_TRUE(tracker.MarkRunning(id, 42));
  EXPECT_EQ(tracker.Get(id)->state, RequestState::kRunning);
  clock.now += absl::Milliseconds(250);
  EXPECT_EQ(tracker.OnToken(id), absl::Milliseconds(250));  // TTFT
  EXPECT_EQ(tracker.OnToken(id), std::nullopt);              // not the first any more
  EXPECT_EQ(tracker.Get(id)->state, RequestState::kStreaming);
  auto done = tracker.Finish(id, absl::OkStatus());
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->state, RequestState::kDone);
  EXPECT_EQ(done->completion_tokens, 2);
  EXPECT_EQ(done->prompt_tokens, 42);
  EXPECT_FALSE(tracker.Get(id).has_value());
  EXPECT_FALSE(tracker.Finish(id, absl::OkStatus()).has_value()) << "finishes only once";

  const std::pair<absl::Status, RequestState> cases[] = {
      {absl::CancelledError("gone"), RequestState::kCancelled},
      {absl::DeadlineExceededError("late"), RequestState::kTimedOut},
      {absl::UnavailableError("no workers"), RequestState::kFailed},
  };
  for (const auto& [status, state] : cases) {
    const std::string x = tracker.Admit(absl::Seconds(1), "");
    auto r = tracker.Finish(x, status);
    EXPECT_EQ(r->state, state);
    EXPECT_EQ(r->final_status, status);
    EXPECT_EQ(tracker.FinishedCount(state), 1);
  }
  EXPECT_EQ(tracker.FinishedCount(RequestState::kDone), 1);
  EXPECT_EQ(tracker.InFlight(), 0u);
}

TEST(RequestTracker, ExpiredListsRequestsPastTheirDeadline) {
  FakeClock clock;
  RequestTracker tracker([&] { return clock.now; });
  const std::string a = tracker.Admit(absl::Seconds(1), "");
  const std::string b = tracker.Admit(absl::Seconds(5), "");
  EXPECT_TRUE(tracker.Expired().empty());
  clock.now += absl::Seconds(1);
  EXPECT_EQ(tracker.Expired(), std::vector<std::string>{a});
  clock.now += absl::Seconds(4);
  EXPECT_EQ(tracker.Expired().size(), 2u);
  (void)b;
}

TEST(RequestTracker, WaitForIdleReturnsWhenTheLastRequestEnds) {
  RequestTracker tracker;
  const std::string id = tracker.Admit(absl::Seconds(10), "");
  EXPECT_FALSE(tracker.WaitForIdle(absl::Milliseconds(20)));
  std::thread t([&] {
    absl::SleepFor(absl::Milliseconds(50));
    tracker.Finish(id, absl::OkStatus());
  });
  EXPECT_TRUE(tracker.WaitForIdle(absl::Seconds(10)));
  t.join();
}

}  // namespace
}  // namespace oscarkv::router

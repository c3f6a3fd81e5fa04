// RequestTracker: every request the router accepted, from admission to its end, with its id,
// deadline and state. Each accepted request ends in exactly one terminal state (kDone, kFailed,
// kCancelled, kTimedOut) with a reason: nothing is dropped silently. Also what drain waits on.
//
// Thread-safe: one internal mutex; WaitForIdle blocks on it with a condition.
#ifndef OSCARKV_SERVICES_ROUTER_REQUEST_TRACKER_H_
#define OSCARKV_SERVICES_ROUTER_REQUEST_TRACKER_H_

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace oscarkv::router {

enum class RequestState {
  kAdmitted,   // validated, waiting for placement / backend
  kRunning,    // the backend has it
  kStreaming,  // first token produced
  kDone,       // terminal: finished normally
  kFailed,     // terminal: an error (reason kept)
  kCancelled,  // terminal: the client went away
  kTimedOut,   // terminal: deadline passed
};
inline constexpr int kNumRequestStates = 7;
std::string_view RequestStateName(RequestState state);
bool IsTerminal(RequestState state);

struct TrackedRequest {
  std::string id;
  std::string session_id;
  RequestState state = RequestState::kAdmitted;
  absl::Time admitted;
  absl::Time deadline;
  std::optional<absl::Time> first_token;
  absl::Time finished;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  absl::Status final_status;  // set in a terminal state
};

class RequestTracker {
 public:
  explicit RequestTracker(std::function<absl::Time()> now = absl::Now);

  //! Admits a request ending at now + timeout. Returns its id: 24 lowercase hex digits, unique
  //! within this process (a random per-process prefix plus a counter).
  std::string Admit(absl::Duration timeout, const std::string& session_id);

  //! State updates; unknown or already-finished ids are ignored (returns false).
  bool MarkRunning(const std::string& id, int prompt_tokens);
  //! Records one generated token; returns the time since admission when it is the first one.
  std::optional<absl::Duration> OnToken(const std::string& id);

  //! Ends the request: OK → kDone, kCancelled → kCancelled, kDeadlineExceeded → kTimedOut,
  //! anything else → kFailed. Returns the final record; nullopt for an unknown id.
  std::optional<TrackedRequest> Finish(const std::string& id, const absl::Status& status);

  //! The record of a request still in flight; nullopt once finished or unknown.
  std::optional<TrackedRequest> Get(const std::string& id) const;
  //! Ids in flight whose deadline has passed.
  std::vector<std::string> Expired() const;
  absl::Time Deadline(const std::string& id) const;  // InfinitePast for unknown ids

  size_t InFlight() const;
  //! Requests that ended in `state` since construction.
  int64_t FinishedCount(RequestState state) const;
  //! Blocks until no request is in flight or `timeout` passes; true when idle.
  bool WaitForIdle(absl::Duration timeout) const;

 private:
  bool IdleLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return active_.empty(); }

  const std::function<absl::Time()> now_;
  const uint64_t id_prefix_;
  mutable absl::Mutex mu_;
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, TrackedRequest> active_ ABSL_GUARDED_BY(mu_);
  std::array<int64_t, kNumRequestStates> finished_counts_ ABSL_GUARDED_BY(mu_) = {};
};

}  // namespace oscarkv::router

#endif  // OSCARKV_SERVICES_ROUTER_REQUEST_TRACKER_H_

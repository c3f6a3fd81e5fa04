#include "services/router/request_tracker.h"

#include <random>

#include "absl/strings/str_format.h"
#include "lib/base/log.h"

namespace oscarkv::router {

std::string_view RequestStateName(RequestState state) {
  switch (state) {
    case RequestState::kAdmitted:
      return "admitted";
    case RequestState::kRunning:
      return "running";
    case RequestState::kStreaming:
      return "streaming";
    case RequestState::kDone:
      return "done";
    case RequestState::kFailed:
      return "failed";
    case RequestState::kCancelled:
      return "cancelled";
    case RequestState::kTimedOut:
      return "timed_out";
  }
  return "unknown";
}

bool IsTerminal(RequestState state) {
  return state == RequestState::kDone || state == RequestState::kFailed ||
         state == RequestState::kCancelled || state == RequestState::kTimedOut;
}

RequestTracker::RequestTracker(std::function<absl::Time()> now)
    : now_(std::move(now)), id_prefix_(std::random_device{}() | (uint64_t{std::random_device{}()} << 32)) {}

std::string RequestTracker::Admit(absl::Duration timeout, const std::string& session_id) {
  absl::MutexLock lock(&mu_);
  std::string id = absl::StrFormat("%016x%08x", id_prefix_, static_cast<uint32_t>(next_++));
  TrackedRequest& r = active_[id];
  r.id = id;
  r.session_id = session_id;
  r.admitted = now_();
  r.deadline = r.admitted + timeout;
  return id;
}

bool RequestTracker::MarkRunning(const std::string& id, int prompt_tokens) {
  absl::MutexLock lock(&mu_);
  auto it = active_.find(id);
  if (it == active_.end()) return false;
  it->second.state = RequestState::kRunning;
  it->second.prompt_tokens = prompt_tokens;
  return true;
}

std::optional<absl::Duration> RequestTracker::OnToken(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = active_.find(id);
  if (it == active_.end()) return std::nullopt;
  TrackedRequest& r = it->second;
  ++r.completion_tokens;
  if (r.first_token.has_value()) return std::nullopt;
  r.first_token = now_();
  r.state = RequestState::kStreaming;
  return *r.first_token - r.admitted;
}

std::optional<TrackedRequest> RequestTracker::Finish(const std::string& id,
                                                     const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  auto it = active_.find(id);
  if (it == active_.end()) return std::nullopt;
  TrackedRequest r = std::move(it->second);
  active_.erase(it);
  r.finished = now_();
  r.final_status = status;
  if (status.ok()) {
    r.state = RequestState::kDone;
  } else if (absl::IsCancelled(status)) {
    r.state = RequestState::kCancelled;
  } else if (absl::IsDeadlineExceeded(status)) {
    r.state = RequestState::kTimedOut;
  } else {
    r.state = RequestState::kFailed;
  }
  ++finished_counts_[static_cast<int>(r.state)];
  VLOG(1) << "request " << id << " " << RequestStateName(r.state) << " after "
          << (r.finished - r.admitted) << " (" << r.completion_tokens << " tokens)"
          << (status.ok() ? "" : ": ") << (status.ok() ? "" : status.ToString());
  return r;
}

std::optional<TrackedRequest> RequestTracker::Get(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = active_.find(id);
  if (it == active_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> RequestTracker::Expired() const {
  absl::MutexLock lock(&mu_);
  const absl::Time now = now_();
  std::vector<std::string> out;
  for (const auto& [id, r] : active_) {
    if (r.deadline <= now) out.push_back(id);
  }
  return out;
}

absl::Time RequestTracker::Deadline(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = active_.find(id);
  return it == active_.end() ? absl::InfinitePast() : it->second.deadline;
}

size_t RequestTracker::InFlight() const {
  absl::MutexLock lock(&mu_);
  return active_.size();
}

int64_t RequestTracker::FinishedCount(RequestState state) const {
  absl::MutexLock lock(&mu_);
  return finished_counts_[static_cast<int>(state)];
}

bool RequestTracker::WaitForIdle(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(this, &RequestTracker::IdleLocked), timeout);
}

}  // namespace oscarkv::router

#include "lib/metrics/connection_threads.h"

#include <utility>

namespace oscarkv::metrics {

ConnectionThreads::ConnectionThreads(int min_threads, int max_threads, absl::Duration idle_exit)
    : min_threads_(min_threads), max_threads_(max_threads), idle_exit_(idle_exit) {
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < min_threads_; ++i) StartThread();
}

ConnectionThreads::~ConnectionThreads() { shutdown(); }

void ConnectionThreads::StartThread() {
  const int id = next_id_++;
  ++starting_;
  threads_.emplace(id, std::thread([this, id] { Work(id); }));
}

void ConnectionThreads::enqueue(std::function<void()> fn) {
  JoinExited();
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  jobs_.push_back(std::move(fn));
  // Each idle thread (or one still starting) takes one queued job; a job beyond them gets a new
  // thread if allowed.
  if (static_cast<int>(jobs_.size()) > idle_ + starting_ &&
      static_cast<int>(threads_.size()) < max_threads_) {
    StartThread();
  }
  work_ready_.Signal();
}

void ConnectionThreads::Work(int id) {
  absl::MutexLock lock(&mu_);
  --starting_;
  while (true) {
    ++idle_;
    absl::Time idle_since = absl::Now();
    while (jobs_.empty() && !stopping_) {
      const bool timed_out = work_ready_.WaitWithTimeout(&mu_, idle_exit_);
      if (timed_out && jobs_.empty() && !stopping_ &&
          static_cast<int>(threads_.size()) > min_threads_ &&
          absl::Now() - idle_since >= idle_exit_) {
        --idle_;
        auto self = threads_.find(id);
        exited_.push_back(std::move(self->second));
        threads_.erase(self);
        return;
      }
    }
    --idle_;
    if (jobs_.empty()) return;  // stopping, nothing left to run
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    mu_.Unlock();
    job();
    mu_.Lock();
  }
}

void ConnectionThreads::JoinExited() {
  std::vector<std::thread> exited;
  {
    absl::MutexLock lock(&mu_);
    exited.swap(exited_);
  }
  for (std::thread& t : exited) t.join();
}

void ConnectionThreads::shutdown() {
  std::map<int, std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    work_ready_.SignalAll();
  }
  // A thread removes itself from threads_ only on idleness, which stopping_ rules out now; take
  // them once they have all finished their work.
  {
    absl::MutexLock lock(&mu_);
    threads.swap(threads_);
  }
  for (auto& [id, t] : threads) t.join();
  JoinExited();
}

int ConnectionThreads::threads() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(threads_.size());
}

int ConnectionThreads::busy() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(threads_.size()) - idle_ - starting_;
}

}  // namespace oscarkv::metrics

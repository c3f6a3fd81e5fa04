// ConnectionThreads: httplib's connection task queue, grown on demand.
//
// httplib runs each accepted connection on one task-queue thread until the connection closes, so
// a stream holds its thread for the whole generation, and a keep-alive client until it goes
// idle. With a fixed pool (httplib::ThreadPool) the router's 65th stream, or 64 clients stalled
// mid-request for httplib's 30 s read timeout, made every later request wait, /healthz included. This queue starts a thread whenever a connection would
// otherwise wait, up to `max_threads`, and lets threads beyond `min_threads` end after
// `idle_exit` without work.
#ifndef OSCARKV_LIB_METRICS_CONNECTION_THREADS_H_
#define OSCARKV_LIB_METRICS_CONNECTION_THREADS_H_

#include <deque>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "httplib.h"

namespace oscarkv::metrics {

class ConnectionThreads final : public httplib::TaskQueue {
 public:
  ConnectionThreads(int min_threads, int max_threads, absl::Duration idle_exit);
  ~ConnectionThreads() override;

  // Runs `fn` on an idle thread, or on a new one while fewer than max_threads run; else it
  // waits for the next thread that becomes free.
  void enqueue(std::function<void()> fn) override;
  // Runs what is queued, then joins every thread. Further enqueues are dropped.
  void shutdown() override;

  int threads() const;  // running now (busy or idle)
  int busy() const;     // running a task now

 private:
  void Work(int id);
  void StartThread() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void JoinExited() ABSL_LOCKS_EXCLUDED(mu_);

  const int min_threads_;
  const int max_threads_;
  const absl::Duration idle_exit_;
  mutable absl::Mutex mu_;
  absl::CondVar work_ready_;
  std::deque<std::function<void()>> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::thread> threads_ ABSL_GUARDED_BY(mu_);  // by id
  std::vector<std::thread> exited_ ABSL_GUARDED_BY(mu_);     // ended on idleness, to join
  int next_id_ ABSL_GUARDED_BY(mu_) = 0;
  int idle_ ABSL_GUARDED_BY(mu_) = 0;
  int starting_ ABSL_GUARDED_BY(mu_) = 0;  // started, not yet in Work (neither idle nor busy)
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace oscarkv::metrics

#endif  // OSCARKV_LIB_METRICS_CONNECTION_THREADS_H_

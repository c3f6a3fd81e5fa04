#include "lib/rpc/worker_runtime.h"

#include <utility>

namespace oscarkv::rpc {

absl::StatusOr<std::unique_ptr<metrics::MetricsHttpServer>> StartMetricsEndpoint(
    const metrics::Registry* registry, const std::string& host, int port,
    const std::atomic<bool>* ready, std::string not_ready_message) {
  if (port < 0) return std::unique_ptr<metrics::MetricsHttpServer>();
  metrics::MetricsHttpServerOptions http;
  http.host = host;
  http.port = port;
  http.readiness = [ready, message = std::move(not_ready_message)]() -> absl::Status {
    return ready->load() ? absl::OkStatus() : absl::UnavailableError(message);
  };
  return metrics::MetricsHttpServer::Start(registry, std::move(http));
}

PeriodicThread::PeriodicThread(absl::Duration period, std::function<void()> task)
    : thread_([this, period, task = std::move(task)] { Loop(period, task); }) {}

PeriodicThread::~PeriodicThread() { Stop(); }

void PeriodicThread::Loop(absl::Duration period, const std::function<void()>& task) {
  const auto wait = absl::ToChronoNanoseconds(period);
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, wait, [this] { return stop_; })) {
    lock.unlock();  // Stop() need not wait for the lock while a sweep runs
    task();
    lock.lock();
  }
}

void PeriodicThread::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  std::call_once(join_once_, [this] { thread_.join(); });
}

}  // namespace oscarkv::rpc

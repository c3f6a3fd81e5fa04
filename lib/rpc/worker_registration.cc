#include "lib/rpc/worker_registration.h"

#include <algorithm>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "lib/base/log.h"
#include "lib/rpc/channel_factory.h"

namespace oscarkv::rpc {
namespace {

namespace rv1 = ::oscarkv::router::v1;
namespace cv1 = ::oscarkv::common::v1;

std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout) {
  return MakeContext(std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
}

void AddKey(const kvformat::BlockKey& k, cv1::BlockKey* out) {
  out->set_lo(k.lo);
  out->set_hi(k.hi);
}

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerRegistration>> WorkerRegistration::Start(
    WorkerRegistrationOptions options, ReportFn report) {
  if (options.router_address.empty()) {
    return absl::InvalidArgumentError("worker registration: router address is empty");
  }
  const cv1::WorkerInfo& w = options.worker;
  if (w.worker_id().empty() || w.grpc_address().empty() ||
      w.role() == cv1::WORKER_ROLE_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        "worker registration: worker id, role and gRPC address are required");
  }
  if (options.max_keys_per_heartbeat < 1) options.max_keys_per_heartbeat = 1;
  std::unique_ptr<WorkerRegistration> r(new WorkerRegistration(std::move(options), std::move(report)));
  r->thread_ = std::thread([p = r.get()] { p->Loop(); });
  return r;
}

WorkerRegistration::WorkerRegistration(WorkerRegistrationOptions options, ReportFn report)
    : options_(std::move(options)),
      report_(std::move(report)),
      stub_(rv1::WorkerRegistryService::NewStub(MakeChannel(options_.router_address))),
      interval_(options_.default_heartbeat_interval) {}

WorkerRegistration::~WorkerRegistration() { Stop(/*deregister=*/true); }

void WorkerRegistration::Stop(bool deregister) {
  absl::MutexLock stop_lock(&stop_mu_);
  if (stopped_) return;
  stopped_ = true;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  bool was_registered;
  {
    absl::MutexLock lock(&mu_);
    was_registered = registered_;
    registered_ = false;
  }
  if (!deregister || !was_registered) return;
  rv1::DeregisterRequest req;
  req.set_worker_id(options_.worker.worker_id());
  rv1::DeregisterResponse resp;
  auto ctx = Context(options_.call_timeout);
  const grpc::Status s = stub_->Deregister(ctx.get(), req, &resp);
  if (s.ok()) {
    LOG(INFO) << options_.worker.worker_id() << ": deregistered from router "
              << options_.router_address;
  } else {
    LOG(WARNING) << options_.worker.worker_id() << ": deregister from router "
                 << options_.router_address << " failed (" << s.error_message()
                 << "); the router will expire it after missed heartbeats";
  }
}

bool WorkerRegistration::registered() const {
  absl::MutexLock lock(&mu_);
  return registered_;
}

int WorkerRegistration::registrations() const {
  absl::MutexLock lock(&mu_);
  return registrations_;
}

int64_t WorkerRegistration::heartbeats() const {
  absl::MutexLock lock(&mu_);
  return heartbeats_;
}

bool WorkerRegistration::drain_requested() const {
  absl::MutexLock lock(&mu_);
  return drain_requested_;
}

bool WorkerRegistration::WaitUntilRegistered(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return registered_; };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

bool WorkerRegistration::WaitForHeartbeats(int64_t n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return heartbeats_ >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

bool WorkerRegistration::SleepFor(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stop_), d);
  return !stop_;
}

void WorkerRegistration::Loop() {
  absl::Duration backoff = options_.initial_backoff;
  bool warned = false;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
    }
    if (!registered()) {
      if (TryRegister()) {
        backoff = options_.initial_backoff;
        warned = false;
        // Heartbeat at once: the router learns load and keys without waiting an interval.
        continue;
      }
      if (!warned) {
        LOG(WARNING) << options_.worker.worker_id() << ": router " << options_.router_address
                     << " not reachable yet; retrying registration (backoff up to "
                     << options_.max_backoff << ")";
        warned = true;
      }
      if (!SleepFor(backoff)) return;
      backoff = std::min(backoff * 2, options_.max_backoff);
      continue;
    }
    if (!TryHeartbeat()) {
      absl::MutexLock lock(&mu_);
      registered_ = false;
      continue;  // register again right away
    }
    absl::Duration interval;
    {
      absl::MutexLock lock(&mu_);
      interval = interval_;
    }
    if (!SleepFor(interval)) return;
  }
}

bool WorkerRegistration::TryRegister() {
  rv1::RegisterRequest req;
  *req.mutable_worker() = options_.worker;
  rv1::RegisterResponse resp;
  auto ctx = Context(options_.call_timeout);
  const grpc::Status s = stub_->Register(ctx.get(), req, &resp);
  if (!s.ok()) {
    VLOG(1) << options_.worker.worker_id() << ": Register: " << s.error_message();
    if (s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
        s.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
        s.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
      LOG(ERROR) << options_.worker.worker_id() << ": router " << options_.router_address
                 << " refused the registration: " << s.error_message();
    }
    return false;
  }
  const absl::Duration interval = resp.heartbeat_interval_seconds() > 0
                                      ? absl::Seconds(resp.heartbeat_interval_seconds())
                                      : options_.default_heartbeat_interval;
  int n;
  {
    absl::MutexLock lock(&mu_);
    registered_ = true;
    epoch_ = resp.epoch();
    interval_ = interval;
    n = ++registrations_;
  }
  sent_keys_.clear();  // the router forgets a (re)registered worker's keys
  keys_in_sync_ = true;
  LOG(INFO) << options_.worker.worker_id() << ": registered with router "
            << options_.router_address << " as " << cv1::WorkerRole_Name(options_.worker.role())
            << " at " << options_.worker.grpc_address() << " (heartbeat every " << interval
            << (n > 1 ? absl::StrCat(", registration #", n) : "") << ")";
  return true;
}

bool WorkerRegistration::TryHeartbeat() {
  WorkerReport report;
  if (report_) report = report_();
  rv1::HeartbeatRequest req;
  req.set_worker_id(options_.worker.worker_id());
  {
    absl::MutexLock lock(&mu_);
    req.set_epoch(epoch_);
  }
  *req.mutable_load() = report.load;

  // Keys: a delta against what the router holds for us, or the full set when out of sync.
  absl::flat_hash_set<kvformat::BlockKey, KeyHash> now(report.held_keys.begin(),
                                                       report.held_keys.end());
  absl::flat_hash_set<kvformat::BlockKey, KeyHash> next;
  const bool full = !keys_in_sync_;
  req.set_keys_are_delta(!full);
  size_t added = 0;
  if (full) {
    for (const auto& k : report.held_keys) {
      if (added == options_.max_keys_per_heartbeat) break;
      if (next.insert(k).second) {
        AddKey(k, req.add_held_keys());
        ++added;
      }
    }
  } else {
    next = sent_keys_;
    for (const auto& k : sent_keys_) {
      if (!now.contains(k)) {
        AddKey(k, req.add_evicted_keys());
        next.erase(k);
      }
    }
    for (const auto& k : report.held_keys) {
      if (added == options_.max_keys_per_heartbeat) break;
      if (next.insert(k).second) {
        AddKey(k, req.add_held_keys());
        ++added;
      }
    }
  }

  rv1::HeartbeatResponse resp;
  auto ctx = Context(options_.call_timeout);
  const grpc::Status s = stub_->Heartbeat(ctx.get(), req, &resp);
  if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
    LOG(INFO) << options_.worker.worker_id() << ": router " << options_.router_address
              << " does not know this worker (" << s.error_message() << "); registering again";
    return false;
  }
  if (!s.ok()) {
    // Whether the router applied the keys is unknown: send the full set next time.
    keys_in_sync_ = false;
    VLOG(1) << options_.worker.worker_id() << ": Heartbeat: " << s.error_message();
    return true;
  }
  sent_keys_ = std::move(next);
  keys_in_sync_ = true;
  bool newly_draining;
  {
    absl::MutexLock lock(&mu_);
    newly_draining = resp.drain() && !drain_requested_;
    drain_requested_ = resp.drain();
    ++heartbeats_;
  }
  if (newly_draining) {
    LOG(INFO) << options_.worker.worker_id() << ": router asks this worker to drain";
  }
  return true;
}

void AddRegistrationFlags(CLI::App& app, std::string& router_address,
                          std::string& advertise_address) {
  app.add_option("--router_address", router_address,
                 "router worker-registry gRPC host:port to register with (empty = none)")
      ->capture_default_str();
  app.add_option("--advertise_address", advertise_address,
                 "gRPC host:port the router gives out for this worker (empty = 127.0.0.1:<port>)")
      ->capture_default_str();
}

absl::Status ValidateRegistrationFlags(const std::string& router_address,
                                       const std::string& advertise_address) {
  auto host_port = [](const std::string& a) {
    const size_t colon = a.rfind(':');
    return colon != std::string::npos && colon > 0 && colon + 1 < a.size();
  };
  if (!router_address.empty() && !host_port(router_address)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--router_address must be host:port, got '", router_address, "'"));
  }
  if (!advertise_address.empty() && !host_port(advertise_address)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--advertise_address must be host:port, got '", advertise_address, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WorkerRegistration>> StartWorkerRegistration(
    const std::string& router_address, const std::string& advertise_address,
    const std::string& dial_address, cv1::WorkerInfo worker, WorkerRegistration::ReportFn report) {
  if (router_address.empty()) return std::unique_ptr<WorkerRegistration>();
  worker.set_grpc_address(advertise_address.empty() ? dial_address : advertise_address);
  WorkerRegistrationOptions o;
  o.router_address = router_address;
  o.worker = std::move(worker);
  return WorkerRegistration::Start(std::move(o), std::move(report));
}

}  // namespace oscarkv::rpc

#include "lib/metrics/metrics_http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/metrics/connection_threads.h"
#include "lib/metrics/http_listen.h"
#include "lib/base/log.h"

namespace oscarkv::metrics {

struct MetricsHttpServer::Impl {
  httplib::Server server;
  std::thread thread;
  std::mutex stop_mu;
  bool stopped = false;  // guarded by stop_mu
};

namespace {

void Reply(httplib::Response& res, const HttpResponse& r) {
  res.status = r.status;
  res.set_content(r.body, r.content_type.c_str());
}

HttpResponse Probe(const std::function<absl::Status()>& probe) {
  if (!probe) return HttpResponse{200, "text/plain; charset=utf-8", "ok\n"};
  const absl::Status s = probe();
  if (s.ok()) return HttpResponse{200, "text/plain; charset=utf-8", "ok\n"};
  return HttpResponse{503, "text/plain; charset=utf-8", absl::StrCat(s.ToString(), "\n")};
}

}  // namespace

MetricsHttpServer::MetricsHttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const Registry* registry, MetricsHttpServerOptions options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("metrics port ", options.port,
                                                   " outside [0, 65535]"));
  }
  if (options.threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("metrics threads ", options.threads, " < 1"));
  }
  auto impl = std::make_unique<Impl>();
  httplib::Server& server = impl->server;
  const int threads = options.threads;
  server.new_task_queue = [threads] {
    return new ConnectionThreads(std::min(threads, 2), threads, absl::Seconds(10));
  };

  server.Get("/metrics", [registry](const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_content(registry ? registry->Expose() : std::string(), kExpositionContentType);
  });
  server.Get("/healthz", [probe = options.health](const httplib::Request&,
                                                  httplib::Response& res) {
    Reply(res, Probe(probe));
  });
  server.Get("/readyz", [probe = options.readiness](const httplib::Request&,
                                                    httplib::Response& res) {
    Reply(res, Probe(probe));
  });
  for (auto& [path, handler] : options.extra_get_handlers) {
    // httplib matches paths as whole-string regexes: a plain path matches only itself.
    if (path.empty() || path[0] != '/') {
      return absl::InvalidArgumentError(absl::StrCat("extra handler path \"", path,
                                                     "\" must start with /"));
    }
    server.Get(path, [h = std::move(handler)](const httplib::Request&, httplib::Response& res) {
      Reply(res, h());
    });
  }

  OSCARKV_ASSIGN_OR_RETURN(const int port,
                           BindHttpServer(server, options.host, options.port, "metrics server"));
  OSCARKV_RETURN_IF_ERROR(ListenInBackground(server, &impl->thread, "metrics server"));
  LOG(INFO) << "metrics server listening on " << options.host << ":" << port;
  auto out = std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(std::move(impl)));
  out->port_ = port;
  return out;
}

void MetricsHttpServer::Stop() {
  if (!impl_) return;
  std::lock_guard<std::mutex> lock(impl_->stop_mu);
  if (impl_->stopped) return;
  impl_->stopped = true;
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace oscarkv::metrics

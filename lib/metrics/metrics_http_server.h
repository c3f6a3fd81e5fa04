// A small HTTP server for a service's operational endpoints (cpp-httplib underneath, hidden):
//   GET /metrics  -> Registry::Expose(), Content-Type kExpositionContentType
//   GET /healthz  -> 200 "ok" while the process serves (liveness); 503 + message if `health` fails
//   GET /readyz   -> 200 "ok" when `readiness` returns OK, else 503 with its message
//   GET <path>    -> any extra handlers given in the options (e.g. the router's /status page)
// Everything else is 404. Start() binds and serves on a background thread; Stop() (or the
// destructor) shuts down and joins. Services whose main HTTP server already exists (the router's
// OpenAI API) can instead serve Registry::Expose() themselves.
#ifndef OSCARKV_LIB_METRICS_METRICS_HTTP_SERVER_H_
#define OSCARKV_LIB_METRICS_METRICS_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/metrics/metrics.h"

namespace oscarkv::metrics {

struct HttpResponse {
  int status = 200;                                       // Default: 200
  std::string content_type = "text/plain; charset=utf-8";  // Default: plain text
  std::string body;                                       // Default: empty
};

struct MetricsHttpServerOptions {
  std::string host = "0.0.0.0";  // Default: all interfaces ("127.0.0.1" in tests)
  int port = 0;                  // Default: 0 = an ephemeral port (see port())
  // Default: at most 32 connection threads, one per open connection, started on demand (2 kept
  // while idle): a keep-alive scraper cannot delay a probe.
  int threads = 32;
  // Readiness probe for /readyz; OK = ready. Called on a server thread; must be thread-safe.
  // Default: null = always ready.
  std::function<absl::Status()> readiness;
  // Liveness probe for /healthz; OK = healthy. Default: null = healthy while serving.
  std::function<absl::Status()> health;
  // Extra GET endpoints (exact paths). Default: none.
  std::vector<std::pair<std::string, std::function<HttpResponse()>>> extra_get_handlers;
};

class MetricsHttpServer {
 public:
  // Binds options.host:options.port and starts serving `registry` (not owned; must outlive the
  // server; may be null, then /metrics serves an empty body).
  // @return kInvalidArgument for a bad port or thread count; kUnavailable if the address cannot
  //         be bound (in use, bad host) or the server fails to start.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const Registry* registry, MetricsHttpServerOptions options = {});

  ~MetricsHttpServer();  // Stop()
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // The bound port (the ephemeral one when options.port was 0).
  int port() const { return port_; }
  // Stops accepting, finishes in-flight requests, joins the thread. Idempotent, thread-safe.
  void Stop();

 private:
  struct Impl;
  explicit MetricsHttpServer(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace oscarkv::metrics

#endif  // OSCARKV_LIB_METRICS_METRICS_HTTP_SERVER_H_

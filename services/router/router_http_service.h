// The router's HTTP adapter: the OpenAI-compatible API (POST /v1/completions,
// POST /v1/chat/completions, GET /v1/models) plus /healthz, /readyz and /metrics, on a
// cpp-httplib server. Thin: openai_api.h parses and formats; a CompletionBackend generates;
// RequestTracker follows each request to its end. Every accepted request ends with a response
// or, when streaming, a final SSE event (tokens then [DONE], or an error event then [DONE]).
//
// Threads: httplib's connection threads run the handlers; each completion runs the backend on
// its own thread so that the handler can enforce the deadline (504) even if the backend is slow
// to notice it. Thread-safe.
#ifndef OSCARKV_SERVICES_ROUTER_ROUTER_HTTP_SERVICE_H_
#define OSCARKV_SERVICES_ROUTER_ROUTER_HTTP_SERVICE_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "httplib.h"
#include "services/router/completion_backend.h"
#include "services/router/openai_api.h"

namespace oscarkv::metrics {
class Registry;
}

namespace oscarkv::router {

class RequestTracker;
class RouterMetrics;

struct HttpServiceOptions {
  std::string served_model_name;  // "" → backend model ids as they are
  int default_max_tokens = 256;
  std::string default_codec = "oscar";
  ApiLimits limits;
  absl::Duration request_timeout = absl::Minutes(5);
  int64_t max_body_bytes = 8 << 20;  // what the HTTP server takes (for the 413 message)
};

class RouterHttpService {
 public:
  // None of the pointers may be null; all must outlive this object (the backend is shared with
  // the per-request threads, which may outlive a timed-out request).
  RouterHttpService(HttpServiceOptions options, std::shared_ptr<CompletionBackend> backend,
                    RequestTracker* tracker, RouterMetrics* metrics,
                    metrics::Registry* metrics_registry);

  //! Installs every route and the error handlers on `server`.
  void Register(httplib::Server& server);

  //! While draining, new completions get 503 and /readyz fails; running ones finish.
  void SetDraining(bool draining) { draining_.store(draining); }
  bool draining() const { return draining_.load(); }
  //! At the drain limit: every running request ends now with 503 (a stream, with an error
  //! event and [DONE]) and its backend work is cancelled, so that the HTTP server can stop.
  void CutOff() { cut_off_.store(true); }

  //! Models as clients see them (served_model_name applied).
  std::vector<ModelInfo> Models() const;

 private:
  void HandleCompletion(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);

  const HttpServiceOptions options_;
  const std::shared_ptr<CompletionBackend> backend_;
  RequestTracker* const tracker_;
  RouterMetrics* const metrics_;
  metrics::Registry* const metrics_registry_;
  std::atomic<bool> draining_{false};
  std::atomic<bool> cut_off_{false};
};

}  // namespace oscarkv::router

#endif  // OSCARKV_SERVICES_ROUTER_ROUTER_HTTP_SERVICE_H_

// Every Prometheus family the router exports (STYLE habit 13). Handles are made once here; the
// HTTP service and backends update them. Names: oscarkv_router_<what>_<unit>.
//
// Thread-safe: lib/metrics types are; label lookups take the family's mutex (per request only).
#ifndef OSCARKV_SERVICES_ROUTER_ROUTER_METRICS_H_
#define OSCARKV_SERVICES_ROUTER_ROUTER_METRICS_H_

#include <string>

#include "lib/metrics/metrics.h"

namespace oscarkv::router {

class WorkerRegistry;

class RouterMetrics {
 public:
  // Declares the families on `registry` (which must outlive this object).
  explicit RouterMetrics(metrics::Registry& registry);

  //! One finished HTTP request on `endpoint` ("completions", "chat_completions", "models", ...)
  //! with its HTTP status code and total duration.
  void OnRequest(const std::string& endpoint, int http_status, double seconds);
  void ObserveTimeToFirstToken(double seconds);
  void ObserveTimePerOutputToken(double seconds);
  void AddTokens(int prompt_tokens, int completion_tokens);
  void OnPlacement(bool ok, int matched_blocks, int request_blocks);
  //! A generation its decode worker cut off, resumed on another pair (ok) or not.
  void OnResume(bool ok);
  metrics::Gauge& in_flight() { return *in_flight_; }

  //! Samples worker counts by role and health from `registry` on each scrape.
  void WatchWorkers(metrics::Registry& metrics_registry, WorkerRegistry* workers);

 private:
  metrics::CounterFamily& requests_;
  metrics::HistogramFamily& duration_;
  metrics::Histogram* ttft_;
  metrics::Histogram* tpot_;
  metrics::Counter* prompt_tokens_;
  metrics::Counter* completion_tokens_;
  metrics::Gauge* in_flight_;
  metrics::CounterFamily& placements_;
  metrics::CounterFamily& resumes_;
  metrics::Counter* prefix_blocks_matched_;
  metrics::Counter* prefix_blocks_requested_;
  metrics::GaugeFamily& workers_;
};

}  // namespace oscarkv::router

#endif  // OSCARKV_SERVICES_ROUTER_ROUTER_METRICS_H_

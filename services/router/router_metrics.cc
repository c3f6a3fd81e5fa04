#include "services/router/router_metrics.h"

#include <map>
#include <utility>

#include "services/router/worker_registry.h"

namespace oscarkv::router {

RouterMetrics::RouterMetrics(metrics::Registry& r)
    : requests_(r.AddCounter("oscarkv_router_requests_total",
                             "HTTP requests finished, by endpoint and HTTP status code.",
                             {"endpoint", "code"})),
      duration_(r.AddHistogram("oscarkv_router_request_duration_seconds",
                               "Time from receiving a request to its last byte.",
                               metrics::ExponentialBuckets(0.001, 2, 20), {"endpoint"})),
      ttft_(&r.AddHistogram("oscarkv_router_time_to_first_token_seconds",
                            "Time from admission to the first generated token.",
                            metrics::ExponentialBuckets(0.001, 2, 18))
                 .Get()),
      tpot_(&r.AddHistogram("oscarkv_router_time_per_output_token_seconds",
                            "Mean time between generated tokens after the first, per request.",
                            metrics::ExponentialBuckets(0.0005, 2, 16))
                 .Get()),
      prompt_tokens_(&r.AddCounter("oscarkv_router_prompt_tokens_total",
                                   "Prompt tokens of finished requests.")
                          .Get()),
      completion_tokens_(&r.AddCounter("oscarkv_router_completion_tokens_total",
                                       "Generated tokens sent to clients.")
                              .Get()),
      in_flight_(&r.AddGauge("oscarkv_router_requests_in_flight",
                             "Requests admitted and not yet finished.")
                      .Get()),
      placements_(r.AddCounter("oscarkv_router_placements_total",
                               "Placement decisions, by result (ok, failed).", {"result"})),
      resumes_(r.AddCounter("oscarkv_router_resumed_generations_total",
                            "Generations cut off by their decode worker (it died or drained) "
                            "and placed again to go on, by result (ok, failed).",
                            {"result"})),
      prefix_blocks_matched_(&r.AddCounter("oscarkv_router_prefix_blocks_matched_total",
                                           "Prompt blocks the chosen prefill worker or the "
                                           "kvstore already held at placement.")
                                  .Get()),
      prefix_blocks_requested_(&r.AddCounter("oscarkv_router_prefix_blocks_requested_total",
                                             "Prompt blocks of placed requests (a partial "
                                             "last block counts).")
                                    .Get()),
      workers_(r.AddGauge("oscarkv_router_workers", "Registered workers by role and health.",
                          {"role", "health"})) {}

void RouterMetrics::OnRequest(const std::string& endpoint, int http_status, double seconds) {
  requests_.WithLabels({endpoint, std::to_string(http_status)}).Increment();
  duration_.WithLabels({endpoint}).Observe(seconds);
}

void RouterMetrics::ObserveTimeToFirstToken(double seconds) { ttft_->Observe(seconds); }
void RouterMetrics::ObserveTimePerOutputToken(double seconds) { tpot_->Observe(seconds); }

void RouterMetrics::AddTokens(int prompt_tokens, int completion_tokens) {
  prompt_tokens_->Increment(prompt_tokens);
  completion_tokens_->Increment(completion_tokens);
}

void RouterMetrics::OnPlacement(bool ok, int matched_blocks, int request_blocks) {
  placements_.WithLabels({ok ? "ok" : "failed"}).Increment();
  if (!ok) return;
  prefix_blocks_matched_->Increment(matched_blocks);
  prefix_blocks_requested_->Increment(request_blocks);
}

void RouterMetrics::OnResume(bool ok) { resumes_.WithLabels({ok ? "ok" : "failed"}).Increment(); }

void RouterMetrics::WatchWorkers(metrics::Registry& metrics_registry, WorkerRegistry* workers) {
  metrics_registry.AddCollectCallback([this, workers] {
    std::map<std::pair<std::string, std::string>, int> counts;
    for (const char* role : {"prefill", "decode", "both", "kvstore"}) {
      for (const char* health : {"healthy", "suspect", "dead"}) counts[{role, health}] = 0;
    }
    for (const WorkerView& w : workers->Snapshot()) {
      ++counts[{std::string(WorkerRoleName(w.spec.role)), std::string(WorkerHealthName(w.health))}];
    }
    for (const auto& [key, n] : counts) workers_.WithLabels({key.first, key.second}).Set(n);
  });
}

}  // namespace oscarkv::router

// Every Prometheus family the prefill worker exports (STYLE habit 13).
#ifndef OSCARKV_SERVICES_PREFILL_PREFILL_METRICS_H_
#define OSCARKV_SERVICES_PREFILL_PREFILL_METRICS_H_

#include "lib/metrics/metrics.h"

namespace oscarkv::prefill {

struct PrefillMetrics {
  explicit PrefillMetrics(metrics::Registry& r);

  metrics::Counter& requests_total;            // prefills completed
  metrics::Counter& failures_total;            // prefills that failed
  metrics::Counter& cancelled_total;           // prefills stopped: caller gone or deadline passed
  metrics::Counter& tokens_computed_total;     // prompt tokens run through the model
  metrics::Counter& tokens_reused_total;       // prompt tokens taken from stored blocks
  metrics::Counter& tokens_scored_total;       // prompt tokens given logprobs (prompt scoring)
  metrics::Counter& blocks_fetched_total;      // prefix blocks fetched from the kvstore
  metrics::Counter& fetched_bytes_total;       // bytes of those blocks
  metrics::Counter& stored_blocks_rejected_total;  // fetched blocks that failed their checks
  // {codec, target}: bytes put to the kvstore ("kvstore"), staged for decode ("decode") or
  // handed to a decode GPU as packed KV ("decode_gpu")
  metrics::CounterFamily& published_bytes_total;
  metrics::HistogramFamily& phase_seconds;     // {phase}: prefix_fetch, compute, pack, transfer, total
  metrics::Gauge& outbox_bytes;                // bytes staged for decode workers
  metrics::Gauge& active_requests;             // prefills running
};

}  // namespace oscarkv::prefill

#endif  // OSCARKV_SERVICES_PREFILL_PREFILL_METRICS_H_

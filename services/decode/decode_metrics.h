// Every Prometheus family the decode worker exports (STYLE habit 13). Handles are made once at
// startup; gauges sampled on scrape are set by DecodeServer's collect callback.
#ifndef OSCARKV_SERVICES_DECODE_DECODE_METRICS_H_
#define OSCARKV_SERVICES_DECODE_DECODE_METRICS_H_

#include "lib/metrics/metrics.h"

namespace oscarkv::decode {

struct DecodeMetrics {
  explicit DecodeMetrics(metrics::Registry& r);

  metrics::Counter& sequences_started_total;    // StartSequence successes
  metrics::Counter& sequences_rejected_total;   // StartSequence failures
  metrics::Counter& tokens_generated_total;     // tokens streamed to callers
  metrics::Counter& steps_total;                // batched decode steps
  metrics::Counter& received_bytes_total;       // KV bytes fetched through lib/transfer
  metrics::Counter& packed_kv_received_total;   // sequences taken as packed KV GPU to GPU
  metrics::Counter& received_blocks_total;      // blocks fetched and verified
  metrics::Histogram& fetch_seconds;            // block fetch + rebuild per sequence
  metrics::Histogram& packed_kv_transfer_seconds;  // the GPU-to-GPU read of packed KV alone
  metrics::Histogram& time_to_first_token_seconds;  // Generate → first streamed token
  metrics::Histogram& step_seconds;             // one batched step
  metrics::Histogram& sample_seconds;           // sampling one step's rows on the host
  metrics::Gauge& active_sequences;             // waiting + running in the batcher
  metrics::Gauge& pooled_sequences;             // sequences held in the token pool
  metrics::Gauge& kv_bytes;                     // KV bytes held (codec form)
  metrics::Gauge& kv_bf16_equivalent_bytes;     // the same tokens as BF16
  metrics::Gauge& kv_reserved_bytes;            // what the held sequences may grow to
  metrics::Gauge& kv_capacity_bytes;            // pool capacity
  metrics::Gauge& tokens_per_second;            // tokens/s over the last 10 s
};

}  // namespace oscarkv::decode

#endif  // OSCARKV_SERVICES_DECODE_DECODE_METRICS_H_

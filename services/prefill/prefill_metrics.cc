#include "services/prefill/prefill_metrics.h"

namespace oscarkv::prefill {

PrefillMetrics::PrefillMetrics(metrics::Registry& r)
    : requests_total(r.AddCounter("oscarkv_prefill_requests_total", "Prefills completed.").Get()),
      failures_total(r.AddCounter("oscarkv_prefill_failures_total", "Prefills failed.").Get()),
      cancelled_total(r.AddCounter("oscarkv_prefill_cancelled_total",
                                   "Prefills stopped before the end because their caller "
                                   "cancelled or their deadline passed (not failures).")
                          .Get()),
      tokens_computed_total(r.AddCounter("oscarkv_prefill_tokens_computed_total",
                                         "Prompt tokens run through the model.")
                                .Get()),
      tokens_reused_total(r.AddCounter("oscarkv_prefill_tokens_reused_total",
                                       "Prompt tokens taken from stored prefix blocks.")
                              .Get()),
      tokens_scored_total(r.AddCounter("oscarkv_prefill_tokens_scored_total",
                                       "Prompt tokens given logprobs (echo with logprobs, "
                                       "prompt_logprobs); such prompts are computed in full.")
                              .Get()),
      blocks_fetched_total(r.AddCounter("oscarkv_prefill_blocks_fetched_total",
                                        "Prefix blocks fetched from the kvstore.")
                               .Get()),
      fetched_bytes_total(r.AddCounter("oscarkv_prefill_fetched_bytes_total",
                                       "Bytes of prefix blocks fetched from the kvstore.")
                              .Get()),
      stored_blocks_rejected_total(
          r.AddCounter("oscarkv_prefill_stored_blocks_rejected_total",
                       "Prefix blocks fetched from the kvstore that failed their checks (the "
                       "prompt is computed from there; the store is asked to recheck its copy).")
              .Get()),
      published_bytes_total(r.AddCounter("oscarkv_prefill_published_bytes_total",
                                         "Block bytes published, by codec and target "
                                         "(kvstore: put to the store; decode: staged for the "
                                         "decode worker; decode_gpu: packed KV handed to a "
                                         "decode GPU).",
                                         {"codec", "target"})),
      phase_seconds(r.AddHistogram("oscarkv_prefill_phase_seconds",
                                   "Time per prefill phase (prefix_fetch, compute, pack, "
                                   "transfer, total).",
                                   metrics::ExponentialBuckets(0.001, 2, 18), {"phase"})),
      outbox_bytes(
          r.AddGauge("oscarkv_prefill_outbox_bytes", "Block bytes staged for decode workers.")
              .Get()),
      active_requests(
          r.AddGauge("oscarkv_prefill_active_requests", "Prefills running.").Get()) {}

}  // namespace oscarkv::prefill

#include "services/decode/decode_metrics.h"

namespace oscarkv::decode {

DecodeMetrics::DecodeMetrics(metrics::Registry& r)
    : sequences_started_total(
          r.AddCounter("oscarkv_decode_sequences_started_total", "Sequences started.").Get()),
      sequences_rejected_total(r.AddCounter("oscarkv_decode_sequences_rejected_total",
                                            "StartSequence calls that failed.")
                                   .Get()),
      tokens_generated_total(
          r.AddCounter("oscarkv_decode_tokens_generated_total", "Tokens streamed.").Get()),
      steps_total(r.AddCounter("oscarkv_decode_steps_total", "Batched decode steps.").Get()),
      received_bytes_total(r.AddCounter("oscarkv_decode_received_bytes_total",
                                        "KV bytes fetched through the transfer layer (blocks, "
                                        "or packed KV GPU to GPU).")
                               .Get()),
      packed_kv_received_total(r.AddCounter("oscarkv_decode_packed_kv_received_total",
                                            "Sequences whose KV came GPU to GPU in packed form.")
                                   .Get()),
      received_blocks_total(r.AddCounter("oscarkv_decode_received_blocks_total",
                                         "Blocks fetched and verified.")
                                .Get()),
      fetch_seconds(r.AddHistogram("oscarkv_decode_fetch_seconds",
                                   "Block fetch and sequence rebuild per StartSequence.",
                                   metrics::ExponentialBuckets(0.001, 2, 16))
                        .Get()),
      packed_kv_transfer_seconds(r.AddHistogram(
                                     "oscarkv_decode_packed_kv_transfer_seconds",
                                     "The GPU-to-GPU read of one sequence's packed KV.",
                                     metrics::ExponentialBuckets(0.0001, 2, 16))
                                     .Get()),
      time_to_first_token_seconds(
          r.AddHistogram("oscarkv_decode_time_to_first_token_seconds",
                         "Generate to first streamed token.",
                         metrics::ExponentialBuckets(0.001, 2, 16))
              .Get()),
      step_seconds(r.AddHistogram("oscarkv_decode_step_seconds", "One batched decode step.",
                                  metrics::ExponentialBuckets(0.0005, 2, 16))
                       .Get()),
      sample_seconds(r.AddHistogram("oscarkv_decode_sample_seconds",
                                    "Sampling one step's rows (and their logprobs) on the host.",
                                    metrics::ExponentialBuckets(0.00001, 2, 18))
                         .Get()),
      active_sequences(r.AddGauge("oscarkv_decode_active_sequences",
                                  "Sequences waiting or running in the batcher.")
                           .Get()),
      pooled_sequences(
          r.AddGauge("oscarkv_decode_pooled_sequences", "Sequences held in the token pool.")
              .Get()),
      kv_bytes(r.AddGauge("oscarkv_decode_kv_bytes", "KV bytes held (codec form).").Get()),
      kv_bf16_equivalent_bytes(r.AddGauge("oscarkv_decode_kv_bf16_equivalent_bytes",
                                          "The held tokens' KV as BF16.")
                                   .Get()),
      kv_reserved_bytes(r.AddGauge("oscarkv_decode_kv_reserved_bytes",
                                   "KV bytes the held sequences may grow to (prompt and "
                                   "max_new_tokens each); admission keeps it within capacity.")
                            .Get()),
      kv_capacity_bytes(
          r.AddGauge("oscarkv_decode_kv_capacity_bytes", "KV pool capacity.").Get()),
      tokens_per_second(r.AddGauge("oscarkv_decode_tokens_per_second",
                                   "Generated tokens per second over the last 10 s.")
                            .Get()) {}

}  // namespace oscarkv::decode

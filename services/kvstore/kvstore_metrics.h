// Every Prometheus family the kvstore exports (STYLE habit 13). Handles are made once at startup;
// hot paths only touch them. Gauges that mirror BlockStore::Stats() are refreshed on each scrape.
#ifndef OSCARKV_SERVICES_KVSTORE_KVSTORE_METRICS_H_
#define OSCARKV_SERVICES_KVSTORE_KVSTORE_METRICS_H_

#include "lib/metrics/metrics.h"

namespace oscarkv::kvstore {

struct KvStoreMetrics {
  // Declares the families in `registry` (which must outlive this struct).
  explicit KvStoreMetrics(metrics::Registry& registry);

  // Counters (hot path).
  metrics::Counter& lookups_total;              // oscarkv_kvstore_lookups_total
  metrics::Counter& lookup_blocks_hit_total;    // oscarkv_kvstore_lookup_blocks_total{result="hit"}
  metrics::Counter& lookup_blocks_miss_total;   //   {result="miss"}
  metrics::Counter& blocks_reserved_total;      // oscarkv_kvstore_blocks_reserved_total
  metrics::Counter& blocks_committed_total;     // oscarkv_kvstore_blocks_committed_total
  metrics::Counter& blocks_evicted_total;       // oscarkv_kvstore_blocks_evicted_total
  metrics::Counter& blocks_expired_total;       // oscarkv_kvstore_blocks_expired_total
  metrics::Counter& commit_checksum_failures_total;  // oscarkv_kvstore_commit_failures_total{reason="checksum"}
  metrics::Counter& damaged_blocks_dropped_total;  // oscarkv_kvstore_damaged_blocks_dropped_total
  metrics::Counter& reserve_rejected_total;     // oscarkv_kvstore_reserve_rejected_total
  metrics::Counter& committed_bytes_total;      // oscarkv_kvstore_committed_bytes_total
  // Gauges (refreshed from Stats on scrape).
  metrics::Gauge& blocks_committed;             // oscarkv_kvstore_blocks{state="committed"}
  metrics::Gauge& blocks_reserved;              //   {state="reserved"}
  metrics::Gauge& pool_capacity_bytes;          // oscarkv_kvstore_pool_capacity_bytes
  metrics::Gauge& pool_used_bytes;              // oscarkv_kvstore_pool_used_bytes
  metrics::Gauge& bytes_saved_vs_bf16_bytes;    // oscarkv_kvstore_saved_vs_bf16_bytes
  metrics::Gauge& hit_ratio;                    // oscarkv_kvstore_lookup_hit_ratio
  metrics::Gauge& pinned_blocks;                // oscarkv_kvstore_pinned_blocks
  metrics::Gauge& read_leases;                  // oscarkv_kvstore_read_leases
  metrics::GaugeFamily& stored_bytes_by_codec;  // oscarkv_kvstore_stored_bytes{codec="..."}
};

}  // namespace oscarkv::kvstore

#endif  // OSCARKV_SERVICES_KVSTORE_KVSTORE_METRICS_H_

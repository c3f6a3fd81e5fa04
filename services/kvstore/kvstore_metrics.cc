#include "services/kvstore/kvstore_metrics.h"

namespace oscarkv::kvstore {

KvStoreMetrics::KvStoreMetrics(metrics::Registry& r)
    : lookups_total(r.AddCounter("oscarkv_kvstore_lookups_total",
                                 "LookupPrefix and GetLocations calls.")
                        .Get()),
      lookup_blocks_hit_total(r.AddCounter("oscarkv_kvstore_lookup_blocks_total",
                                           "Blocks asked for by lookups, by result.", {"result"})
                                  .WithLabels({"hit"})),
      lookup_blocks_miss_total(r.AddCounter("oscarkv_kvstore_lookup_blocks_total",
                                            "Blocks asked for by lookups, by result.", {"result"})
                                   .WithLabels({"miss"})),
      blocks_reserved_total(
          r.AddCounter("oscarkv_kvstore_blocks_reserved_total", "Block reservations granted.")
              .Get()),
      blocks_committed_total(
          r.AddCounter("oscarkv_kvstore_blocks_committed_total", "Blocks committed.").Get()),
      blocks_evicted_total(r.AddCounter("oscarkv_kvstore_blocks_evicted_total",
                                        "Committed blocks evicted to make room.")
                               .Get()),
      blocks_expired_total(r.AddCounter("oscarkv_kvstore_blocks_expired_total",
                                        "Reservations dropped because they were not committed "
                                        "in time.")
                               .Get()),
      commit_checksum_failures_total(
          r.AddCounter("oscarkv_kvstore_commit_failures_total",
                       "Commits refused, by reason.", {"reason"})
              .WithLabels({"checksum"})),
      damaged_blocks_dropped_total(
          r.AddCounter("oscarkv_kvstore_damaged_blocks_dropped_total",
                       "Committed blocks a reader reported damaged whose stored bytes failed "
                       "their checksum on recheck, dropped.")
              .Get()),
      reserve_rejected_total(r.AddCounter("oscarkv_kvstore_reserve_rejected_total",
                                          "Reserve calls refused for lack of room.")
                                 .Get()),
      committed_bytes_total(r.AddCounter("oscarkv_kvstore_committed_bytes_total",
                                         "Serialised block bytes committed.")
                                .Get()),
      blocks_committed(
          r.AddGauge("oscarkv_kvstore_blocks", "Blocks in the store, by state.", {"state"})
              .WithLabels({"committed"})),
      blocks_reserved(
          r.AddGauge("oscarkv_kvstore_blocks", "Blocks in the store, by state.", {"state"})
              .WithLabels({"reserved"})),
      pool_capacity_bytes(
          r.AddGauge("oscarkv_kvstore_pool_capacity_bytes", "Host pool capacity.").Get()),
      pool_used_bytes(r.AddGauge("oscarkv_kvstore_pool_used_bytes",
                                 "Host pool bytes in reserved or committed slots.")
                          .Get()),
      bytes_saved_vs_bf16_bytes(r.AddGauge("oscarkv_kvstore_saved_vs_bf16_bytes",
                                           "BF16-equivalent bytes of the committed blocks minus "
                                           "their stored bytes.")
                                    .Get()),
      hit_ratio(r.AddGauge("oscarkv_kvstore_lookup_hit_ratio",
                           "Lookup block hits / (hits + misses) since start.")
                    .Get()),
      pinned_blocks(
          r.AddGauge("oscarkv_kvstore_pinned_blocks", "Live (session, block) pins.").Get()),
      read_leases(r.AddGauge("oscarkv_kvstore_read_leases", "Live read leases.").Get()),
      stored_bytes_by_codec(r.AddGauge("oscarkv_kvstore_stored_bytes",
                                       "Serialised bytes of committed blocks, by codec.",
                                       {"codec"})) {}

}  // namespace oscarkv::kvstore

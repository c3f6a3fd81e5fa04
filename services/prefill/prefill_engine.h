// The prefill worker's domain: one request's prompt → look up its reusable block keys in the
// kvstore → fetch the hit blocks through lib/transfer and parse them with expectations
// (checksums, fingerprints, codec, keys) → prefill the rest on the worker's PrefillDevice (CPU:
// ServingEngine::Prefill; a GPU device does not share the kvstore and prefills it all) → stage ALL
// blocks in the outbox for the decode worker, put the reusable ones to the kvstore → sample the
// first token. Knows no proto or gRPC (the kvstore is reached through KvStoreClient).
//
// Prefix reuse is bit-exact (lib/engine/serving_engine.h): a hit changes work, never output.
// A kvstore that is down or a block that fails its checks only costs the reuse (logged, then
// the prompt is computed in full); it never fails the request.
//
// Threads: Prefill may be called from many threads; ServingEngine, KvPublisher, KvStoreClient
// and the transfer backend are thread-safe. Concurrent prefills are limited by
// `max_concurrent` (a counting semaphore), extra callers get kResourceExhausted.
#ifndef OSCARKV_SERVICES_PREFILL_PREFILL_ENGINE_H_
#define OSCARKV_SERVICES_PREFILL_PREFILL_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/engine/serving_engine.h"
#include "lib/transfer/transfer_backend.h"
#include "services/prefill/kv_publisher.h"
#include "services/prefill/prefill_device.h"
#include "services/prefill/kvstore_client.h"
#include "services/prefill/prefill_metrics.h"
#include "lib/engine/logprobs.h"
#include "lib/engine/sampler.h"

namespace oscarkv::prefill {

struct PrefillParams {
  std::string request_id;
  std::string session_id;
  std::vector<int32_t> tokens;       // the prompt; not empty
  std::string codec;                 // must equal the engine's codec name
  bool use_kvstore = true;           // look up and publish to the kvstore (when configured)
  engine::SamplingParams sampling;           // for the first token
  int logprobs = -1;  // >= 0: the first token's logprobs with this many alternatives; -1 = off
  // >= 0: the prompt's own tokens' logprobs (PrefillOutput::prompt_logprobs) with this many
  // alternatives: every token is then computed, no stored prefix is fetched (its positions would
  // have no logits). -1 = off.
  int prompt_logprobs = -1;
  uint64_t model_fingerprint = 0;    // expected identity; 0 = unchecked
  uint64_t calib_fingerprint = 0;
  // Push mode: where the decode worker wants each prompt block (one per block, in order);
  // empty = pull (the decode worker gets them from the outbox).
  std::vector<RemoteLocation> push_to;
  // The decode worker takes packed GPU KV: hand it over that way when the device offers it
  // (PrefillDevice::offers_packed_kv; ignored in push mode).
  bool want_packed = false;
  // Asked before the prefix fetch and between prefill chunks; its error (e.g. kCancelled: the
  // caller left, kDeadlineExceeded) ends the prefill with it. Empty = never stops.
  engine::PrefillStopCheck stop_check;
};

struct PrefillTimings {
  double prefix_fetch_seconds = 0;
  double compute_seconds = 0;   // PrefillDevice::Prefill (forward + block encoding)
  double transfer_seconds = 0;  // staging + kvstore puts
  double pack_seconds = 0;      // packed handoff: packing + checksum on the device
  double total_seconds = 0;
};

struct PrefillOutput {
  int32_t first_token = 0;
  std::optional<engine::TokenLogprobs> first_token_logprobs;  // when params.logprobs >= 0
  // With params.prompt_logprobs >= 0: entry i scores tokens[i + 1] (tokens.size() - 1 entries).
  std::vector<engine::TokenLogprobs> prompt_logprobs;
  StagedBlocks staged;             // ALL prompt blocks, located in this worker's outbox
  std::optional<PackedKvHandoff> packed;  // instead of staged blocks (want_packed, offered)
  int64_t reused_tokens = 0;
  int64_t computed_tokens = 0;
  int matched_blocks = 0;          // kvstore prefix hit, in blocks
  StorePublishStats store;         // what went to the kvstore
  PrefillTimings timings;
};

struct PrefillEngineOptions {
  std::string worker_id = "prefill-0";
  int max_concurrent = 4;
};

class PrefillEngine {
 public:
  // Not owned, must outlive this: `engine` (the model and codec identity: codec, fingerprints,
  // block keys), `device` (where the prompt is prefilled), `backend`, `publisher`, `metrics`;
  // `store` may be null (no kvstore: no reuse, no store publishing).
  PrefillEngine(const engine::ServingEngine* engine, PrefillDevice* device,
                transfer::TransferBackend* backend,
                KvStoreClient* store, KvPublisher* publisher, PrefillMetrics* metrics,
                PrefillEngineOptions options);

  // @return kInvalidArgument (empty prompt, bad token, codec mismatch, push_to of the wrong
  //   length or with too small slots), kFailedPrecondition
  //   (model identity mismatch), kResourceExhausted (too many concurrent prefills, outbox
  //   full), model and transfer errors, params.stop_check's error.
  absl::StatusOr<PrefillOutput> Prefill(const PrefillParams& params);

  int active() const { return active_.load(); }
  // When the last prefill succeeded (long ago before any): its decode worker pulls the KV
  // after the call returns, so a draining worker keeps the outbox a moment longer.
  absl::Time last_completed() const;
  // Where peers reach this worker's transfer backend, and its name (for PackedKvHandoff).
  std::string endpoint_address() const { return backend_->EndpointAddress(); }
  std::string backend_name() const { return backend_->capabilities().name; }
  const std::string& worker_id() const { return options_.worker_id; }
  const engine::ServingEngine& serving_engine() const { return *engine_; }

 private:
  // Fetched and parsed prefix blocks (views into `buffer`).
  struct Prefix {
    std::vector<std::byte> buffer;
    std::vector<kvformat::BlockView> views;
    uint64_t bytes = 0;
    int matched = 0;
  };
  // Puts every staged block into the decode worker's slot for it.
  absl::Status Push(const StagedBlocks& staged, std::span<const RemoteLocation> to);
  absl::StatusOr<Prefix> FetchPrefix(const PrefillParams& params,
                                     std::span<const kvformat::BlockKey> keys);

  const engine::ServingEngine* engine_;
  PrefillDevice* device_;
  transfer::TransferBackend* backend_;
  KvStoreClient* store_;
  KvPublisher* publisher_;
  PrefillMetrics* metrics_;
  PrefillEngineOptions options_;
  std::atomic<int> active_{0};
  std::atomic<int64_t> last_completed_unix_ns_{0};  // 1970 before the first
};

}  // namespace oscarkv::prefill

#endif  // OSCARKV_SERVICES_PREFILL_PREFILL_ENGINE_H_

// The decode worker's domain: fetch a sequence's blocks (KvFetcher), build its KV on the worker's
// DecodeDevice (the CPU three-tier cache, or GPU pages), hold it (TokenPool), run it in the
// continuous batcher (DecodeBatcher) and end turns. Knows no proto or gRPC.
//
// Threads: StartSequence/Generate/EndTurn from any thread (gRPC pool); the batcher's loop thread
// runs the steps and the token callbacks. No lock of its own: TokenPool and DecodeBatcher each
// guard themselves and neither calls the other while locked.
#ifndef OSCARKV_SERVICES_DECODE_DECODE_ENGINE_H_
#define OSCARKV_SERVICES_DECODE_DECODE_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/engine/serving_engine.h"
#include "services/decode/decode_batcher.h"
#include "services/decode/decode_device.h"
#include "services/decode/decode_metrics.h"
#include "services/decode/kv_fetcher.h"
#include "services/decode/token_pool.h"

namespace oscarkv::decode {

struct StartParams {
  std::string request_id;
  std::string session_id;
  std::string codec;                  // must equal the engine's codec name
  uint64_t model_fingerprint = 0;     // 0 = unchecked
  uint64_t calib_fingerprint = 0;     // checked when model_fingerprint is set
  std::vector<BlockSource> blocks;    // ALL the prompt's blocks, in order (or none with `packed`)
  // Instead of blocks: the whole prompt's KV in packed GPU form (DecodeDevice::BuildFromPacked).
  std::optional<PackedKvSource> packed;
  // Tokens the sequence may generate (a GPU device reserves room for them at admission);
  // 0 = DecodeEngineOptions::default_max_new_tokens.
  int64_t max_new_tokens = 0;
};

struct StartResult {
  uint64_t sequence_id = 0;
  int64_t prompt_tokens = 0;    // tokens in the rebuilt sequence
  uint64_t fetched_bytes = 0;   // bytes moved by the transfer layer
};

// Push mode: where a prefill worker should put each prompt block (one slot per block, sized for
// the largest block kind), all in one region registered with this worker's backend.
struct ReceiveSlots {
  uint64_t sequence_id = 0;
  std::string endpoint_address;   // this worker's TransferBackend::EndpointAddress()
  std::string backend;            // its capabilities().name
  std::string remote_descriptor;  // the region's descriptor
  std::vector<std::pair<uint64_t, uint64_t>> slots;  // (offset, length) per block
};

struct GenerateParams {
  int32_t first_token = 0;             // produced by prefill; fed first, not streamed again
  // The completion's tokens before first_token when it resumes here (BatchRequest).
  std::vector<int32_t> earlier_tokens;
  int max_new_tokens = 1;              // tokens to stream after first_token; >= 1
  std::vector<int32_t> stop_token_ids; // with the model's end-of-generation ones (unless ignore_eos)
  engine::SamplingParams sampling;
  int logprobs = -1;  // >= 0: each token's logprobs with this many alternatives; -1 = off
  bool ignore_eos = false;  // end-of-generation tokens are ordinary tokens (vLLM's ignore_eos)
  // Stop tokens cannot be picked before the completion (first_token included) has this many
  // tokens (vLLM's min_tokens).
  int min_tokens = 0;
};

struct EndTurnResult {
  int64_t kept_bytes = 0;
  int64_t released_bytes = 0;
};

struct DecodeEngineOptions {
  int max_batch = 32;
  int64_t kv_capacity_bytes = int64_t{1} << 30;
  double idle_ttl_seconds = 60;
  double max_keep_seconds = 3600;
  // Lifetime of a push reservation (PrepareReceive until the first Generate).
  double receive_ttl_seconds = 600;
  // Room reserved for generated tokens when a request does not say (StartParams).
  int64_t default_max_new_tokens = 2048;
};

class DecodeEngine {
 public:
  // Not owned, must outlive this object: `engine` (the worker's model and codec identity:
  // codec, fingerprints, tokenizer, block size), `device` (where sequences live and step),
  // `backend`, `metrics`.
  DecodeEngine(const engine::ServingEngine* engine, DecodeDevice* device,
               transfer::TransferBackend* backend, DecodeMetrics* metrics,
               const DecodeEngineOptions& options);
  ~DecodeEngine();  // Stop()

  // Fetches and verifies the blocks, builds the sequence on the device and pools it.
  // @return kInvalidArgument (codec mismatch, no blocks), kFailedPrecondition (model identity
  //   or block mismatch), kDataLoss (checksum), kResourceExhausted (pool full), transfer errors.
  absl::StatusOr<StartResult> StartSequence(const StartParams& params);

  // Push mode: reserves receive slots for the ceil(prompt_tokens / block_tokens) blocks of a
  // prompt; the sequence is built from them when Generate is first called on the id. Sweep
  // releases a reservation not completed within options.receive_ttl_seconds.
  // @return kInvalidArgument (codec, no tokens), kResourceExhausted (too large), registration
  //   errors.
  absl::StatusOr<ReceiveSlots> PrepareReceive(const StartParams& params, int64_t prompt_tokens);

  // Runs `id` in the batcher (after building it from received slots, in push mode). `on_token` (loop thread, must not block; false = stop) gets each
  // new token; `on_done` is called once at the end.
  // @return kNotFound, kFailedPrecondition (already generating), kInvalidArgument (bad
  //   params, or more tokens than the sequence has room for).
  absl::Status Generate(uint64_t id, const GenerateParams& params,
                        std::function<bool(int32_t, const engine::TokenLogprobs*)> on_token,
                        std::function<void(FinishReason, const absl::Status&)> on_done);
  // Asks a running Generate to stop before the next step.
  void Cancel(uint64_t batch_id) { batcher_.Cancel(batch_id); }
  // Id of the batch request of the last Generate on `id` (for Cancel); 0 if none.
  uint64_t BatchIdOf(uint64_t sequence_id) const;

  // Keeps (for `keep_ttl_seconds`, capped by max_keep_seconds) or releases a sequence.
  absl::StatusOr<EndTurnResult> EndTurn(uint64_t id, bool keep, double keep_ttl_seconds);

  // Drops expired sequences. Returns how many.
  int Sweep();
  PoolUsage Usage() const { return pool_.Usage(); }
  int Load() const { return batcher_.Load(); }
  BatcherStats batcher_stats() const { return batcher_.stats(); }
  const engine::ServingEngine& serving_engine() const { return *engine_; }
  const DecodeDevice& device() const { return *device_; }
  // Stops the batcher: running requests end with kCancelled, or fail with `unfinished` when it
  // is not OK (DecodeBatcher::Stop).
  void Stop(absl::Status unfinished = absl::OkStatus()) { batcher_.Stop(std::move(unfinished)); }

 private:
  struct Receive;
  // Builds and pools a pushed sequence whose blocks have arrived. kNotFound when `id` is not
  // a pending receive (then nothing is done).
  absl::Status CompleteReceive(uint64_t id, int64_t max_new_tokens);
  // Builds the sequence from verified blocks and pools it under `entry_id` (0 = a new id).
  absl::StatusOr<uint64_t> BuildAndPool(std::span<const kvformat::BlockView> views,
                                        const StartParams& params, int64_t max_new_tokens,
                                        uint64_t entry_id);
  // Pools a built sequence (or counts the failure to build it) under `entry_id`.
  absl::StatusOr<uint64_t> Pool(absl::StatusOr<std::unique_ptr<HeldSequence>> seq,
                                const StartParams& params, uint64_t entry_id);

  const engine::ServingEngine* engine_;
  DecodeDevice* device_;
  DecodeMetrics* metrics_;
  DecodeEngineOptions options_;
  KvFetcher fetcher_;
  TokenPool pool_;
  DecodeBatcher batcher_;
  mutable std::mutex ids_mu_;
  std::unordered_map<uint64_t, uint64_t> batch_ids_;  // sequence id → batch id; guarded
  std::unordered_map<uint64_t, std::shared_ptr<Receive>> receives_;  // pending pushes; guarded
  transfer::TransferBackend* backend_;
};

}  // namespace oscarkv::decode

#endif  // OSCARKV_SERVICES_DECODE_DECODE_ENGINE_H_

// Continuous batching: one loop thread runs decode steps over every active sequence at once.
// Sequences join (Submit) and leave (stop token, length, cancel, error) between steps, so a new
// request never waits for a running batch to finish.
//
// Each step: move waiting requests into the active set (up to max_batch), feed every active
// sequence its last token through `step` (one batched forward), sample the next token per
// sequence (and its logprobs; the rows split over lib/model's CPU pool, each sequence having
// its own sampler; a step whose rows are all plain greedy takes the device's argmax instead,
// where it has one), deliver it, and retire the finished ones.
//
// Threads: the loop thread calls `step` and every callback; Submit/Cancel/Stop may be called from
// any thread. One mutex (mu_) guards the waiting list and cancel flags; it is never held while
// calling `step` or a callback.
#ifndef OSCARKV_SERVICES_DECODE_DECODE_BATCHER_H_
#define OSCARKV_SERVICES_DECODE_DECODE_BATCHER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "lib/engine/logprobs.h"
#include "lib/engine/sampler.h"
#include "services/decode/decode_device.h"

namespace oscarkv::decode {

// One batched forward: appends tokens[b] to *seqs[b] and writes logits [B, vocab], or, when
// `argmax` is set (every row plain greedy) and the step can, each row's argmax to *argmax (B
// ids; *logits may then stay empty). DecodeDevice::Step's contract.
using StepFunction = std::function<absl::Status(
    std::span<HeldSequence* const> seqs, std::span<const int32_t> tokens,
    std::vector<float>* logits, std::vector<int32_t>* argmax)>;

// Why a sequence left the batch.
enum class FinishReason { kStop, kLength, kCancelled, kError };
const char* FinishReasonName(FinishReason reason);  // "stop", "length", "cancelled", "error"

struct BatchRequest {
  HeldSequence* sequence = nullptr;     // not owned; valid until on_done returns
  int32_t first_token = 0;              // fed first (already produced by prefill)
  // Tokens of the completion before first_token (a generation resumed from another worker),
  // observed by the sampler first: its penalties and min_tokens count them.
  std::vector<int32_t> earlier_tokens;
  int max_new_tokens = 1;               // tokens to generate after first_token; >= 1
  std::vector<int32_t> stop_token_ids;  // end generation (not delivered); e.g. EOS
  engine::SamplingParams sampling;
  int logprobs = -1;  // >= 0: each token's logprobs with this many alternatives; -1 = off
  // Called on the loop thread for each generated token, in order, with its logprobs (nullptr
  // unless `logprobs` >= 0); return false to stop (finishes with kCancelled). Must not block.
  std::function<bool(int32_t token, const engine::TokenLogprobs* logprobs)> on_token;
  // Called exactly once, on the loop thread (or in Stop), when the sequence leaves.
  std::function<void(FinishReason reason, const absl::Status& status)> on_done;
};

struct BatcherStats {
  uint64_t steps = 0;            // batched forwards run
  uint64_t tokens = 0;           // tokens generated (sampled), all sequences
  uint64_t max_batch_seen = 0;   // largest batch so far
  double step_seconds = 0;       // time inside `step`
};

class DecodeBatcher {
 public:
  // Starts the loop thread. `vocab_size` > 0, `max_batch` >= 1. `on_sampled`, if set, gets
  // each step's sampling time in seconds (on the loop thread).
  DecodeBatcher(StepFunction step, int vocab_size, int max_batch,
                std::function<void(double seconds)> on_sampled = nullptr);
  ~DecodeBatcher();  // Stop()
  DecodeBatcher(const DecodeBatcher&) = delete;
  DecodeBatcher& operator=(const DecodeBatcher&) = delete;

  // Queues a request; it joins the batch before the next step. Returns its id (for Cancel).
  // After Stop, the request finishes at once, as Stop says.
  uint64_t Submit(BatchRequest request);
  // Marks a request cancelled; it leaves before the next step (on_done with kCancelled).
  void Cancel(uint64_t id);
  // Sequences waiting + active (the active count is refreshed after each step's callbacks).
  int Load() const;
  BatcherStats stats() const;
  // Finishes every request and joins the loop thread: with kCancelled, or with kError and
  // `unfinished` when that is not OK (a worker shutting down says so to its callers). Idempotent;
  // the first call's status holds.
  void Stop(absl::Status unfinished = absl::OkStatus());

 private:
  struct Entry;
  void Loop();

  StepFunction step_;
  std::function<void(double seconds)> on_sampled_;
  const int vocab_size_;
  const int max_batch_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Entry>> waiting_;   // guarded by mu_
  std::vector<uint64_t> cancelled_;               // guarded by mu_
  uint64_t next_id_ = 1;                          // guarded by mu_
  bool stopping_ = false;                         // guarded by mu_
  absl::Status stop_status_;                      // Stop's `unfinished`; guarded by mu_
  int active_count_ = 0;                          // guarded by mu_
  BatcherStats stats_;                            // guarded by mu_
  std::thread thread_;
};

}  // namespace oscarkv::decode

#endif  // OSCARKV_SERVICES_DECODE_DECODE_BATCHER_H_

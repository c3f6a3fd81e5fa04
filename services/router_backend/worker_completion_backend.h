// The router's gRPC CompletionBackend: drives one prefill worker and one decode worker for each
// request (pull model):
//   Prefill(prompt) → first token + descriptors of ALL prompt blocks (in the prefill's outbox)
//   → decode StartSequence(descriptors) (the decode worker gets the blocks through lib/transfer)
//   → Generate (stream) → EndTurn(release).
// Tokenization and detokenization happen here, with the model's tokenizer; stop strings are
// matched on the detokenized text (the output is cut before the match).
//
// Two ways to find the workers:
//  - static: one prefill and one decode address (`oscarkv serve` all-in-one, workers in the same
//    process on loopback gRPC; or `--prefill_address/--decode_address`);
//  - registry (`oscarkv serve --router_only`): per request, the prompt's block key chain
//    (lib/kvformat/block_key.h, the workers' key parameters), computed once per numerics label
//    the registered workers give (GPU-made KV is keyed apart from the CPU engine's), is matched
//    in the router's PrefixIndex, the PlacementPolicy picks a (prefill, decode) pair among the
//    WorkerRegistry's workers, and the request runs there over cached channels
//    (WorkerChannels: one per address, dropped at the next placement once no live worker has
//    that address). The router-side
//    load of the pair (WorkerRegistry::AddPlaced) is held while each part runs: the prefill
//    worker's until Prefill returns, the decode worker's until the request ends. The keys a
//    prefill publishes to the kvstore are added to the PrefixIndex under kStoreHolder (the
//    kvstore does not list its keys in heartbeats). No healthy worker of a role: kUnavailable
//    (HTTP 503) naming the role.
// A prefill worker at its limit (--max_concurrent) answers RESOURCE_EXHAUSTED: the request waits
// and retries (placed again each time, busy workers left out while another can take it) for up
// to `busy_wait_seconds`, so a burst larger than the workers' slots queues instead of failing.
// Waiting requests are not ordered (Continuum scheduling, ARCHITECTURE §5, will order them).
//
// Thread-safe: Complete may run on many threads; each call has its own RPCs.
#ifndef OSCARKV_SERVICES_ROUTER_BACKEND_WORKER_COMPLETION_BACKEND_H_
#define OSCARKV_SERVICES_ROUTER_BACKEND_WORKER_COMPLETION_BACKEND_H_

#include <functional>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/kvformat/block_key.h"
#include "lib/model/tokenizer.h"
#include "services/router/completion_backend.h"
#include "services/router/placement_policy.h"
#include "services/router/prefix_index.h"
#include "services/router/worker_registry.h"

namespace oscarkv::router_backend {

// Registry mode: where the registered workers, their held keys and the policy live (the
// router's RouterServer owns them). None is owned; all must outlive the backend.
struct RegistryPlacement {
  router::WorkerRegistry* workers = nullptr;        // not null
  router::PrefixIndex* prefix_index = nullptr;      // not null
  const router::PlacementPolicy* policy = nullptr;  // not null
  // The workers' key chain (fingerprints, codec, block size): ServingEngine::KeyParams(). Its
  // `numerics` is replaced by each worker's WorkerSpec::kv_numerics in turn.
  kvformat::KeyChainParams key_params;
  // Told each request's placement (RouterMetrics::OnPlacement): ok with the prompt blocks the
  // chosen prefill worker or the kvstore held and the prompt's full blocks; not ok when no pair
  // could take it (no healthy worker of a role, every prefill worker busy until the wait ended).
  // A request's retries while workers are busy count once. Default: none.
  std::function<void(bool ok, int matched_blocks, int request_blocks)> on_placement;
  // Told each resume of a generation its decode worker cut off (RouterMetrics::OnResume): ok
  // when the prompt and its tokens so far were prefilled on a new pair. Default: none.
  std::function<void(bool ok)> on_resume;
};

struct WorkerBackendOptions {
  std::string prefill_address;      // "host:port" of a prefill worker; static mode: required
  std::string decode_address;       // "host:port" of a decode worker; static mode: required
  // Set: registry mode (the two addresses must then be empty). Default: unset (static).
  std::optional<RegistryPlacement> registry;
  std::string model_id;             // id listed by /v1/models; required
  int context_length = 8192;        // prompt + completion tokens; Default: 8192
  bool use_kvstore = true;          // prefix lookup + publishing in the prefill; Default: true
  double connect_timeout_seconds = 5;  // Ready() probes; Default: 5
  // How long a request waits for a prefill slot while the workers answer RESOURCE_EXHAUSTED
  // (busy), retrying, before it fails with that status (HTTP 429); its deadline caps it.
  // Default: 300 (the router's default request timeout)
  double busy_wait_seconds = 300;
};

// What happened in the last completed request (for tests and logs).
struct RequestTrace {
  std::string prefill_worker;        // worker id (registry mode) or address (static)
  std::string decode_worker;
  int prefix_matched_blocks = 0;     // leading blocks the chosen decode worker was known to hold
  uint32_t reused_tokens = 0;
  uint64_t prompt_block_bytes = 0;   // serialised bytes of all prompt blocks moved to decode
                                     // (packed bytes when packed_kv)
  int prompt_blocks = 0;
  bool packed_kv = false;            // the KV went GPU to GPU in packed form (no blocks)
  double prefill_seconds = 0;        // waiting for a prefill slot included
  double decode_seconds = 0;
};

class WorkerCompletionBackend final : public router::CompletionBackend {
 public:
  // `tokenizer` is not owned and must outlive the backend.
  // @return kInvalidArgument for missing options (or addresses given in registry mode).
  static absl::StatusOr<std::unique_ptr<WorkerCompletionBackend>> Create(
      const WorkerBackendOptions& options, const model::Tokenizer* tokenizer);
  ~WorkerCompletionBackend() override;

  std::vector<router::ModelInfo> Models() const override;
  absl::StatusOr<std::vector<int32_t>> Tokenize(const std::string& model,
                                                const router::PromptInput& prompt) override;
  absl::StatusOr<router::CompletionOutcome> Complete(const router::CompletionRequest& request,
                                                     const router::TokenCallback& on_token) override;
  bool Ready() const override;

  RequestTrace last_trace() const;
  // Registry mode: the worker addresses with a cached channel, sorted (for tests and logs).
  std::vector<std::string> cached_channel_addresses() const;

 private:
  struct Impl;
  explicit WorkerCompletionBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Incremental detokenizer with stop strings: feed token ids, get the text to append. Holds back
// an incomplete UTF-8 sequence at the end; after a stop string matches, `stopped()` is true and
// the text returned stops right before the match. Not thread-safe.
class TextEmitter {
 public:
  TextEmitter(const model::Tokenizer* tokenizer, std::vector<std::string> stop)
      : tokenizer_(tokenizer), stop_(std::move(stop)) {}
  // The new text after `token` (may be empty). Text that could still grow into a stop string
  // is held back until it cannot (or until Flush).
  std::string Push(int32_t token);
  // What is held back, at the end of generation (empty once stopped).
  std::string Flush();
  bool stopped() const { return stopped_; }

 private:
  const model::Tokenizer* tokenizer_;
  std::vector<std::string> stop_;
  std::string bytes_;     // all the tokens' bytes so far (may end inside a UTF-8 character)
  size_t emitted_ = 0;    // bytes of bytes_ already returned
  bool stopped_ = false;
};

}  // namespace oscarkv::router_backend

#endif  // OSCARKV_SERVICES_ROUTER_BACKEND_WORKER_COMPLETION_BACKEND_H_

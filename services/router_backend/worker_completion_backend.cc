#include "services/router_backend/worker_completion_backend.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "lib/base/log.h"
#include "lib/base/status_macros.h"
#include "lib/rpc/cancellable_call.h"
#include "lib/rpc/status_conversion.h"
#include "oscarkv/decode/v1/decode.grpc.pb.h"
#include "oscarkv/prefill/v1/prefill.grpc.pb.h"
#include "services/router_backend/worker_channels.h"

namespace oscarkv::router_backend {
namespace {

namespace pv1 = ::oscarkv::prefill::v1;
namespace dv1 = ::oscarkv::decode::v1;

// A worker's logprobs of `token`, with the tokens as their bytes.
router::TokenLogprob ToTokenLogprob(const model::Tokenizer& tok, int32_t token,
                                    const ::oscarkv::common::v1::TokenLogprobs& in) {
  router::TokenLogprob out{tok.TokenToPiece(token), in.logprob(), {}, token, /*scored=*/true,
                           std::max<int64_t>(1, in.rank())};
  const int n = std::min(in.top_token_ids_size(), in.top_logprobs_size());
  out.top.reserve(n);
  for (int i = 0; i < n; ++i) {
    const auto id = static_cast<int32_t>(in.top_token_ids(i));
    out.top.push_back({tok.TokenToPiece(id), in.top_logprobs(i), id});
  }
  return out;
}

// Length of `s` without a trailing incomplete UTF-8 sequence.
size_t CompleteUtf8Prefix(const std::string& s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    size_t need = 1;
    if ((c & 0xE0) == 0xC0) need = 2;
    else if ((c & 0xF0) == 0xE0) need = 3;
    else if ((c & 0xF8) == 0xF0) need = 4;
    return back < need ? n - back : n;
  }
  return n;
}

void SetDeadline(grpc::ClientContext* ctx, absl::Time deadline) {
  if (deadline != absl::InfiniteFuture()) ctx->set_deadline(absl::ToChronoTime(deadline));
}

// One request's (prefill, decode) pair and, in registry mode, the router-side load it holds on
// them: the prefill part until EndPrefill, the decode part until the route is destroyed.
class Route {
 public:
  Route() = default;
  Route(const Route&) = delete;
  Route& operator=(const Route&) = delete;
  ~Route() {
    EndPrefill();
    if (workers_ != nullptr) workers_->RemovePlaced(decode_id, 0, decode_blocks_);
  }

  void Hold(router::WorkerRegistry* workers, int64_t prompt_tokens, int64_t decode_blocks) {
    workers_ = workers;
    prompt_tokens_ = prompt_tokens;
    decode_blocks_ = decode_blocks;
    workers_->AddPlaced(prefill_id, prompt_tokens_, 0);
    workers_->AddPlaced(decode_id, 0, decode_blocks_);
    prefill_held_ = true;
  }
  void EndPrefill() {
    if (!prefill_held_) return;
    workers_->RemovePlaced(prefill_id, prompt_tokens_, 0);
    prefill_held_ = false;
  }
  // Takes `other`'s decode worker, and the load it holds there, in place of this route's.
  void TakeDecodeFrom(Route& other) {
    other.EndPrefill();
    if (workers_ != nullptr) workers_->RemovePlaced(decode_id, 0, decode_blocks_);
    decode = std::move(other.decode);
    decode_id = std::exchange(other.decode_id, std::string());
    decode_matched_blocks = other.decode_matched_blocks;
    workers_ = other.workers_;
    decode_blocks_ = std::exchange(other.decode_blocks_, 0);
  }

  std::shared_ptr<WorkerStubs> prefill, decode;
  std::string prefill_id, decode_id;  // worker ids; the addresses in static mode
  int decode_matched_blocks = 0;
  bool packed_kv = false;  // both workers move the prompt's KV GPU to GPU (registry mode)
  // False when the registry has seen the registered kvstore go silent: the prefill would spend
  // its publish deadline on it before answering (its own prefix lookup still tries the store).
  bool publish_to_store = true;
  // Registry mode: prompt blocks the prefill worker or the kvstore held, of request_blocks.
  int prefix_matched_blocks = 0;
  int request_blocks = 0;

 private:
  router::WorkerRegistry* workers_ = nullptr;  // null in static mode
  int64_t prompt_tokens_ = 0;
  int64_t decode_blocks_ = 0;
  bool prefill_held_ = false;
};

// A placed request whose prefill has run.
struct Prefilled {
  std::unique_ptr<Route> route;
  pv1::PrefillResponse response;
};

// A sampling seed for a request that set none: sampling at temperature > 0 then differs from
// request to request, as clients expect (a fixed default made every such request alike).
uint64_t RandomSeed() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return rng();
}

// A factor in [0.5, 1.5), so that requests waiting for the same worker do not retry in step.
double Jitter() {
  thread_local std::minstd_rand rng(std::random_device{}());
  return 0.5 + std::uniform_real_distribution<double>(0, 1)(rng);
}

// The wait between tries for a busy worker: jittered, 2 ms doubling to 100 ms.
class BusyBackoff {
 public:
  // Sleeps the next step; false, without sleeping, when that would end after `give_up`.
  bool Wait(absl::Time give_up) {
    if (absl::Now() + next_ > give_up) return false;
    absl::SleepFor(next_ * Jitter());
    next_ = std::min(next_ * 2, absl::Milliseconds(100));
    return true;
  }

 private:
  absl::Duration next_ = absl::Milliseconds(2);
};

}  // namespace

std::string TextEmitter::Push(int32_t token) {
  if (stopped_) return "";
  // Decode joins the tokens' bytes, so the text grows by this token's alone (re-decoding
  // everything made a long completion quadratic); only its complete UTF-8 prefix is visible.
  bytes_ += tokenizer_->Decode(std::span<const int32_t>(&token, 1), /*skip_special=*/true);
  const std::string_view text(bytes_.data(), CompleteUtf8Prefix(bytes_));
  // A stop string anywhere after what was emitted ends the text right before it; when several
  // match, the one that starts first (not the first listed).
  size_t stop_at = std::string_view::npos;
  size_t hold = 0;
  for (const std::string& stop : stop_) {
    if (stop.empty()) continue;
    const size_t from = emitted_ >= stop.size() ? emitted_ - stop.size() + 1 : 0;
    const size_t at = text.find(stop, from);
    if (at != std::string_view::npos && at + stop.size() > emitted_) {
      stop_at = std::min(stop_at, at);
      continue;
    }
    // Hold back a suffix that is a prefix of this stop string.
    for (size_t k = std::min(stop.size() - 1, text.size() - emitted_); k > hold; --k) {
      if (text.compare(text.size() - k, k, stop, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  if (stop_at != std::string_view::npos) {
    stopped_ = true;
    std::string out(stop_at > emitted_ ? text.substr(emitted_, stop_at - emitted_) : "");
    emitted_ = std::max(emitted_, stop_at);
    return out;
  }
  const size_t upto = text.size() - hold;
  std::string out(upto > emitted_ ? text.substr(emitted_, upto - emitted_) : "");
  emitted_ = std::max(emitted_, upto);
  return out;
}

std::string TextEmitter::Flush() {
  const size_t complete = CompleteUtf8Prefix(bytes_);
  if (stopped_ || emitted_ >= complete) return "";
  std::string out = bytes_.substr(emitted_, complete - emitted_);
  emitted_ = complete;
  return out;
}

struct WorkerCompletionBackend::Impl {
  WorkerBackendOptions options;
  const model::Tokenizer* tokenizer = nullptr;
  std::shared_ptr<WorkerStubs> static_prefill, static_decode;  // static mode
  int64_t created_unix_s = 0;
  mutable std::mutex mu;
  RequestTrace last;  // guarded by mu
  WorkerChannels channels;  // registry mode

  // The pair for `request`: the static one, or a placement over the registry that leaves out
  // the prefill workers in `avoid_prefill` (busy or unreachable) and the decode workers in
  // `avoid_decode` (unreachable), each unless that would leave none of its role.
  // @return the policy's kUnavailable / kResourceExhausted, annotated.
  absl::StatusOr<std::unique_ptr<Route>> Pick(const router::CompletionRequest& request,
                                              const std::set<std::string>& avoid_prefill,
                                              const std::set<std::string>& avoid_decode = {}) {
    auto route = std::make_unique<Route>();
    if (!options.registry) {
      route->prefill = static_prefill;
      route->decode = static_decode;
      route->prefill_id = options.prefill_address;
      route->decode_id = options.decode_address;
      return route;
    }
    const RegistryPlacement& reg = *options.registry;
    std::vector<router::WorkerView> workers = reg.workers->Snapshot();
    for (const auto& [role, avoid] : {std::pair(router::WorkerRole::kPrefill, &avoid_prefill),
                                      std::pair(router::WorkerRole::kDecode, &avoid_decode)}) {
      if (avoid->empty()) continue;
      auto avoided = [role, avoid](const router::WorkerView& w) {
        return w.spec.role == role && avoid->count(w.spec.id) != 0;
      };
      const bool other = std::any_of(workers.begin(), workers.end(), [&](const auto& w) {
        return w.spec.role == role && !avoided(w);
      });
      if (other) std::erase_if(workers, avoided);
    }
    router::PlacementRequest preq;
    preq.prompt_tokens = static_cast<int64_t>(request.prompt_token_ids.size());
    preq.max_tokens = request.max_tokens;
    preq.session_id = request.session_id;
    MatchPrompt(reg, workers, request.prompt_token_ids, &preq);
    // The cache follows this snapshot. Placements racing with a registry change may apply theirs
    // out of order; the worst case is a channel dropped early (made again on its next use) or
    // kept until the next placement.
    channels.Retain(workers);
    absl::StatusOr<router::Placement> p = reg.policy->Choose(preq, workers);
    if (!p.ok()) return Annotate(p.status(), "placement");
    route->prefill = channels.Get(p->prefill_address);
    route->decode = channels.Get(p->decode_address);
    route->prefill_id = p->prefill_id;
    route->decode_id = p->decode_id;
    route->packed_kv = PackedKvDirect(workers, p->prefill_id) && PackedKvDirect(workers, p->decode_id);
    route->publish_to_store = KvStoreHealth(workers) != StoreHealth::kDown;
    route->prefix_matched_blocks = std::max(p->prefill_matched_blocks, p->store_matched_blocks);
    route->request_blocks = p->request_blocks;
    auto it = preq.matched.find(p->decode_id);
    route->decode_matched_blocks = it == preq.matched.end() ? 0 : it->second;
    const int64_t bt = std::max(1, reg.key_params.block_tokens);
    const int64_t decode_blocks = (preq.prompt_tokens + request.max_tokens + bt - 1) / bt;
    route->Hold(reg.workers, preq.prompt_tokens, decode_blocks);
    VLOG(1) << request.request_id << ": placed on prefill " << p->prefill_id << " ("
            << p->prefill_matched_blocks << " own + " << p->store_matched_blocks
            << " kvstore blocks of " << p->request_blocks << "), decode " << p->decode_id << " ("
            << route->decode_matched_blocks << " held), cost " << p->cost;
    return route;
  }

  // The prefill RPC, cancelled when the request's consumer leaves (the prefill worker then stops
  // at its next chunk; a long prompt would otherwise be computed for nobody).
  static grpc::Status CallPrefill(const Route& route, const router::CompletionRequest& request,
                                  const pv1::PrefillRequest& preq, pv1::PrefillResponse* resp) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, request.deadline);
    return rpc::WaitCancellable(
        &ctx,
        [&](std::function<void(grpc::Status)> done) {
          route.prefill->prefill->async()->Prefill(&ctx, &preq, resp, std::move(done));
        },
        request.cancelled);
  }

  // Places the request and runs its prefill. A prefill worker at its limit (or the policy, when
  // every worker is) answers kResourceExhausted; the request then waits for a slot, placed again
  // at each try with the busy workers left out while another can take it, with a jittered
  // backoff of 2 ms doubling to 100 ms, for up to options.busy_wait_seconds or its deadline.
  // A prefill worker that is unreachable (kUnavailable: gone before the registry noticed, or
  // draining) is left out and the request placed again at once; a prefill streams nothing, so
  // running it elsewhere is safe. Each worker gets one such chance.
  // @return the last status once that time is up; any other error at once.
  absl::StatusOr<Prefilled> PlaceAndPrefill(const router::CompletionRequest& request,
                                            pv1::PrefillRequest preq) {
    const absl::Time start = absl::Now();
    const absl::Time give_up =
        std::min(request.deadline, start + absl::Seconds(options.busy_wait_seconds));
    BusyBackoff backoff;
    std::set<std::string> busy;         // answered kResourceExhausted
    std::set<std::string> unreachable;  // answered kUnavailable
    // Reports the placement once per request (registry mode): ok when a pair took the prefill
    // call (whatever the call's outcome), else the last try's failure.
    auto report = [this](bool ok, const Route* route) {
      if (!options.registry || !options.registry->on_placement) return;
      options.registry->on_placement(ok, ok ? route->prefix_matched_blocks : 0,
                                     ok ? route->request_blocks : 0);
    };
    for (int attempt = 1;; ++attempt) {
      // A consumer that left while this waited for a slot is not placed any more.
      if (request.cancelled && request.cancelled()) {
        return absl::CancelledError("consumer gone while waiting for a prefill slot");
      }
      absl::Status s;
      std::set<std::string> avoid = busy;
      avoid.insert(unreachable.begin(), unreachable.end());
      absl::StatusOr<std::unique_ptr<Route>> picked = Pick(request, avoid);
      if (picked.ok()) {
        Route& route = **picked;
        preq.set_offer_packed_kv(route.packed_kv);
        preq.set_publish_to_kvstore(options.use_kvstore && route.publish_to_store);
        Prefilled out;
        s = rpc::ToAbslStatus(CallPrefill(route, request, preq, &out.response));
        route.EndPrefill();
        if (s.ok()) {
          if (attempt > 1) {
            VLOG(1) << request.request_id << ": prefill slot on " << route.prefill_id
                    << " after " << attempt << " tries, " << absl::Now() - start;
          }
          report(true, &route);
          out.route = *std::move(picked);
          return out;
        }
        s = Annotate(s, absl::StrCat("prefill on ", route.prefill_id));
        if (absl::IsResourceExhausted(s)) {
          busy.insert(route.prefill_id);
        } else if (absl::IsUnavailable(s) && options.registry &&
                   unreachable.insert(route.prefill_id).second) {
          LOG(WARNING) << request.request_id << ": " << s << "; placing it again";
          continue;
        } else {
          report(true, &route);
          return s;
        }
      } else {
        s = picked.status();
      }
      if (!absl::IsResourceExhausted(s)) {
        report(false, nullptr);
        return s;
      }
      if (!backoff.Wait(give_up)) {
        report(false, nullptr);
        return Annotate(s, absl::StrCat("no prefill slot in ", attempt, " tries over ",
                                        absl::FormatDuration(absl::Now() - start),
                                        " (oscarkv serve --prefill_busy_wait_s)"));
      }
    }
  }

  // Moves `route`'s decode part to the best decode worker not in `avoid` (registry mode); false
  // when there is none.
  bool MoveDecode(const router::CompletionRequest& request, Route* route,
                  const std::set<std::string>& avoid) {
    absl::StatusOr<std::unique_ptr<Route>> other = Pick(request, {}, avoid);
    if (!other.ok() || avoid.count((*other)->decode_id) != 0) return false;
    route->TakeDecodeFrom(**other);
    return true;
  }

  // After a first StartSequence on route->decode that answered `started`, runs `start` again
  // until a decode worker takes the sequence.
  // With `movable` (registry mode, prompt blocks rather than packed KV, which needs its pair):
  // a decode worker that is unreachable (gone before the registry noticed, or draining) has
  // started nothing, so the blocks go to another one, each tried once (`unreachable` keeps them
  // across a request's resumes). In both modes a worker whose pool is full (kResourceExhausted:
  // the sequences it holds may grow to its capacity) hands the sequence to another with room;
  // when none has, the request waits for generations to end, placed again at each try, with a
  // BusyBackoff, for up to options.busy_wait_seconds but at most 30 s (the blocks wait in the
  // prefill worker's outbox, 60 s by default) or its deadline.
  // @return the last try's status.
  absl::Status StartDecode(const router::CompletionRequest& request, bool movable, Route* route,
                           std::set<std::string>* unreachable, absl::Status started,
                           const std::function<absl::Status()>& start) {
    constexpr absl::Duration kRoomWait = absl::Seconds(30);
    const absl::Time room_until = std::min(
        request.deadline,
        absl::Now() + std::min(absl::Seconds(options.busy_wait_seconds), kRoomWait));
    BusyBackoff backoff;
    std::set<std::string> full;  // answered kResourceExhausted since the last wait
    int room_tries = 0;
    for (;;) {
      std::set<std::string> unreachable_or_full = *unreachable;
      unreachable_or_full.insert(full.begin(), full.end());
      if (absl::IsUnavailable(started) && movable && unreachable->insert(route->decode_id).second) {
        unreachable_or_full.insert(route->decode_id);
        if (!MoveDecode(request, route, unreachable_or_full) &&
            !MoveDecode(request, route, *unreachable)) {
          break;
        }
        LOG(WARNING) << request.request_id << ": decode StartSequence: " << started
                     << "; starting it on " << route->decode_id;
      } else if (absl::IsResourceExhausted(started) &&
                 !(request.cancelled && request.cancelled())) {
        ++room_tries;
        full.insert(route->decode_id);
        unreachable_or_full.insert(route->decode_id);
        if (!movable || !MoveDecode(request, route, unreachable_or_full)) {
          // Every decode worker is full: wait, then start with the best placement again.
          if (!backoff.Wait(room_until)) {
            return Annotate(started,
                            absl::StrCat("no decode worker had room in ", room_tries, " tries"));
          }
          full.clear();
          if (movable) MoveDecode(request, route, *unreachable);
        }
      } else {
        break;
      }
      started = start();
    }
    return started;
  }

  // The prompt's keys under each numerics label the workers give (the CPU engine's "" always):
  // keys of different labels never coincide, so a worker's match is its best over the labels,
  // and the kvstore's is kept per label for the policy to read under each prefill worker's own.
  static void MatchPrompt(const RegistryPlacement& reg,
                          const std::vector<router::WorkerView>& workers,
                          const std::vector<int32_t>& prompt, router::PlacementRequest* preq) {
    std::set<std::string> labels = {""};
    for (const router::WorkerView& w : workers) labels.insert(w.spec.kv_numerics);
    for (const std::string& label : labels) {
      kvformat::KeyChainParams params = reg.key_params;
      params.numerics = label;
      const std::vector<kvformat::BlockKey> keys =
          kvformat::ComputeBlockKeys(params, std::span<const int32_t>(prompt));
      for (const auto& [holder, blocks] : reg.prefix_index->MatchAll(keys)) {
        int& slot = holder == router::kStoreHolder ? preq->store_matched[label]
                                                   : preq->matched[holder];
        slot = std::max(slot, blocks);
      }
    }
  }

  static bool PackedKvDirect(const std::vector<router::WorkerView>& workers, const std::string& id) {
    for (const router::WorkerView& w : workers) {
      if (w.spec.id == id) return w.spec.packed_kv_direct;
    }
    return false;
  }

  // What a registry snapshot says of the kvstore.
  enum class StoreHealth { kUnknown, kHealthy, kDown };
  static StoreHealth KvStoreHealth(const std::vector<router::WorkerView>& workers) {
    StoreHealth health = StoreHealth::kUnknown;  // none registered: the workers may have one
    for (const router::WorkerView& w : workers) {
      if (w.spec.role != router::WorkerRole::kKvStore) continue;
      if (w.health == router::WorkerHealth::kHealthy) return StoreHealth::kHealthy;
      health = StoreHealth::kDown;
    }
    return health;
  }

  // Registry mode: the keys a prefill published to the kvstore are now there (as far as the
  // router can tell; the index is approximate by design).
  void RecordStored(const pv1::PrefillResponse& presp) {
    if (!options.registry || !options.use_kvstore) return;
    std::vector<kvformat::BlockKey> stored;
    for (const auto& k : presp.published_keys()) {
      if (k.lo() != 0 || k.hi() != 0) stored.push_back({k.lo(), k.hi()});
    }
    if (stored.empty()) return;
    if (KvStoreHealth(options.registry->workers->Snapshot()) == StoreHealth::kHealthy) {
      options.registry->prefix_index->Add(router::kStoreHolder, stored);
    }
  }
};

WorkerCompletionBackend::WorkerCompletionBackend(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
WorkerCompletionBackend::~WorkerCompletionBackend() = default;

absl::StatusOr<std::unique_ptr<WorkerCompletionBackend>> WorkerCompletionBackend::Create(
    const WorkerBackendOptions& options, const model::Tokenizer* tokenizer) {
  if (options.registry) {
    const RegistryPlacement& r = *options.registry;
    if (r.workers == nullptr || r.prefix_index == nullptr || r.policy == nullptr) {
      return absl::InvalidArgumentError("registry mode needs the registry, prefix index and policy");
    }
    if (!options.prefill_address.empty() || !options.decode_address.empty()) {
      return absl::InvalidArgumentError(
          "static prefill/decode addresses and registry placement are exclusive");
    }
    if (r.key_params.block_tokens < 1 || r.key_params.block_tokens > 65535) {
      return absl::InvalidArgumentError("registry mode: block_tokens must be in [1, 65535]");
    }
  } else if (options.prefill_address.empty() || options.decode_address.empty()) {
    return absl::InvalidArgumentError("prefill and decode addresses are required");
  }
  if (options.model_id.empty()) return absl::InvalidArgumentError("model id is required");
  if (tokenizer == nullptr) return absl::InvalidArgumentError("tokenizer is required");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->tokenizer = tokenizer;
  if (!options.registry) {
    impl->static_prefill = MakeWorkerStubs(options.prefill_address);
    impl->static_decode = MakeWorkerStubs(options.decode_address);
  }
  impl->created_unix_s = absl::ToUnixSeconds(absl::Now());
  return std::unique_ptr<WorkerCompletionBackend>(new WorkerCompletionBackend(std::move(impl)));
}

std::vector<router::ModelInfo> WorkerCompletionBackend::Models() const {
  router::ModelInfo m;
  m.id = impl_->options.model_id;
  m.context_length = impl_->options.context_length;
  m.created_unix_s = impl_->created_unix_s;
  m.vocab_size = impl_->tokenizer->vocab_size();
  return {m};
}

absl::StatusOr<std::vector<int32_t>> WorkerCompletionBackend::Tokenize(
    const std::string& model, const router::PromptInput& prompt) {
  if (model != impl_->options.model_id) {
    return absl::NotFoundError(absl::StrCat("unknown model '", model, "'"));
  }
  const model::Tokenizer& tok = *impl_->tokenizer;
  if (prompt.token_ids) {
    for (int32_t id : *prompt.token_ids) {
      if (id < 0 || id >= tok.vocab_size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("token id ", id, " is outside the vocabulary [0, ", tok.vocab_size(), ")"));
      }
    }
    return *prompt.token_ids;
  }
  if (prompt.messages) {
    std::vector<model::ChatMessage> msgs;
    for (const auto& m : *prompt.messages) {
      // The chat template knows system/user/assistant; developer speaks as system, tool as user.
      std::string role = m.role == "developer" ? "system" : (m.role == "tool" ? "user" : m.role);
      msgs.push_back({role, m.content});
    }
    absl::StatusOr<std::string> text = tok.ApplyChatTemplate(msgs, /*add_assistant=*/true);
    if (!text.ok()) return text.status();
    return tok.Encode(*text, /*add_special=*/true);
  }
  return tok.Encode(prompt.text.value_or(""), /*add_special=*/true);
}

bool WorkerCompletionBackend::Ready() const {
  auto ready = [](const std::shared_ptr<grpc::Channel>& ch) {
    const auto state = ch->GetState(/*try_to_connect=*/true);
    return state == GRPC_CHANNEL_READY || state == GRPC_CHANNEL_IDLE ||
           state == GRPC_CHANNEL_CONNECTING;
  };
  if (impl_->options.registry) {
    router::WorkerRegistry& w = *impl_->options.registry->workers;
    return !w.Placeable(router::WorkerRole::kPrefill).empty() &&
           !w.Placeable(router::WorkerRole::kDecode).empty();
  }
  return ready(impl_->static_prefill->channel) && ready(impl_->static_decode->channel);
}

std::vector<std::string> WorkerCompletionBackend::cached_channel_addresses() const {
  return impl_->channels.addresses();
}

RequestTrace WorkerCompletionBackend::last_trace() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->last;
}

absl::StatusOr<router::CompletionOutcome> WorkerCompletionBackend::Complete(
    const router::CompletionRequest& request, const router::TokenCallback& on_token) {
  const model::Tokenizer& tok = *impl_->tokenizer;
  RequestTrace trace;
  router::CompletionOutcome outcome;
  TextEmitter emitter(&tok, request.stop);
  const uint64_t seed = request.seed ? *request.seed : RandomSeed();
  bool consumer_gone = false;
  auto send = [&](router::TokenEvent ev) {
    if (!on_token(ev)) {
      consumer_gone = true;
      return false;
    }
    ++outcome.completion_tokens;
    return true;
  };
  // With stop strings, each token goes out when the next one arrives (or at the end), so text
  // held back as a possible stop-string prefix can still leave with the last token.
  const bool lazy = !request.stop.empty();
  std::optional<router::TokenEvent> pending;
  // Delivers one token (with its logprobs, when asked for and given); false when the consumer
  // is gone or a stop string matched.
  auto deliver = [&](int32_t token, const ::oscarkv::common::v1::TokenLogprobs* logprobs) {
    router::TokenEvent ev{token, emitter.Push(token), std::nullopt};
    if (logprobs != nullptr && request.logprobs >= 0) {
      ev.logprob = ToTokenLogprob(tok, token, *logprobs);
    }
    if (!lazy) return send(std::move(ev)) && !emitter.stopped();
    if (pending && !send(*std::exchange(pending, std::nullopt))) return false;
    pending = std::move(ev);
    if (!emitter.stopped()) return true;
    send(*std::exchange(pending, std::nullopt));
    return false;
  };
  // Sends the held token with any held-back text (end of generation without a stop match).
  auto finish_pending = [&] {
    if (!pending) return;
    pending->text += emitter.Flush();
    send(*std::exchange(pending, std::nullopt));
  };

  // 0–1. Placement (which pair runs it) and prefill.
  auto t0 = std::chrono::steady_clock::now();
  pv1::PrefillRequest preq;
  preq.set_request_id(request.request_id);
  preq.mutable_session_id()->set_value(request.session_id);
  preq.mutable_token_ids()->Add(request.prompt_token_ids.begin(), request.prompt_token_ids.end());
  preq.set_codec(request.codec);
  preq.mutable_sampling()->set_temperature(static_cast<float>(request.temperature));
  preq.mutable_sampling()->set_top_p(static_cast<float>(request.top_p));
  preq.mutable_sampling()->set_top_k(static_cast<uint32_t>(request.top_k));
  preq.mutable_sampling()->set_seed(seed);
  // The tokens that end a completion (not delivered): the request's, and the model's
  // end-of-generation ones unless ignore_eos. min_tokens keeps the prefill off them too.
  std::vector<int32_t> stops(request.stop_token_ids.begin(), request.stop_token_ids.end());
  if (!request.ignore_eos) {
    stops.insert(stops.end(), tok.end_of_generation_ids().begin(),
                 tok.end_of_generation_ids().end());
  }
  auto is_stop = [&](int32_t t) { return std::find(stops.begin(), stops.end(), t) != stops.end(); };
  if (request.min_tokens > 0) {
    preq.mutable_sampling()->set_min_tokens(static_cast<uint32_t>(request.min_tokens));
    for (int32_t t : stops) preq.mutable_sampling()->add_stop_token_ids(static_cast<uint32_t>(t));
  }
  for (const auto& [token, bias] : request.logit_bias) {
    (*preq.mutable_sampling()->mutable_logit_bias())[static_cast<uint32_t>(token)] =
        static_cast<float>(bias);
  }
  if (request.logprobs >= 0) {
    preq.set_logprobs(true);
    preq.set_top_logprobs(static_cast<uint32_t>(request.logprobs));
  }
  // Echo / prompt logprobs: the prompt's tokens go out first (not counted as generated), after
  // the prefill, which scores them when logprobs (with echo) or prompt_logprobs are asked for.
  // Echo alone with max_tokens 0 needs no worker.
  const int prompt_top = router::PromptScoreAlternatives(request);
  const bool echo_scored = prompt_top >= 0;
  const bool send_prompt = router::DeliversPrompt(request);
  if (echo_scored) {
    preq.set_prompt_logprobs(true);
    preq.set_prompt_top_logprobs(static_cast<uint32_t>(prompt_top));
  }
  auto echo_prompt = [&](const pv1::PrefillResponse* scores) -> absl::Status {
    const std::vector<int32_t>& prompt = request.prompt_token_ids;
    if (scores != nullptr &&
        scores->prompt_logprobs_size() + 1 != static_cast<int>(prompt.size())) {
      return absl::InternalError(absl::StrCat("the prefill scored ", scores->prompt_logprobs_size(),
                                              " prompt tokens, expected ", prompt.size() - 1));
    }
    TextEmitter text(&tok, {});
    for (size_t i = 0; i < prompt.size(); ++i) {
      router::TokenEvent ev{prompt[i], text.Push(prompt[i]), std::nullopt, /*prompt=*/true};
      if (i + 1 == prompt.size()) ev.text += text.Flush();
      if (scores != nullptr) {
        ev.logprob = i == 0 ? router::TokenLogprob{tok.TokenToPiece(prompt[0]), 0, {}, prompt[0],
                                                   /*scored=*/false}
                            : ToTokenLogprob(tok, prompt[i], scores->prompt_logprobs(i - 1));
      }
      if (!on_token(ev)) return absl::CancelledError("consumer gone");
    }
    return absl::OkStatus();
  };
  if (request.echo && !echo_scored && request.max_tokens == 0) {
    OSCARKV_RETURN_IF_ERROR(echo_prompt(nullptr));
    return outcome;  // kLength, nothing generated
  }
  absl::StatusOr<Prefilled> prefilled = impl_->PlaceAndPrefill(request, preq);
  if (!prefilled.ok()) return prefilled.status();
  Route& route = *prefilled->route;
  const pv1::PrefillResponse& presp = prefilled->response;
  trace.prefill_worker = route.prefill_id;
  trace.decode_worker = route.decode_id;
  trace.prefix_matched_blocks = route.decode_matched_blocks;
  impl_->RecordStored(presp);
  trace.prefill_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  trace.reused_tokens = presp.reused_tokens();
  trace.prompt_blocks = presp.published_blocks_size();
  for (const auto& b : presp.published_blocks()) trace.prompt_block_bytes += 128 + b.payload_bytes();
  trace.packed_kv = presp.has_packed_kv();
  if (trace.packed_kv) trace.prompt_block_bytes = presp.packed_kv().bytes();
  auto record = [&] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->last = trace;
  };

  if (send_prompt) {
    if (absl::Status s = echo_prompt(echo_scored ? &presp : nullptr); !s.ok()) {
      record();
      return s;
    }
    if (request.max_tokens == 0) {
      record();
      return outcome;  // kLength, nothing generated
    }
  }
  const int32_t first = static_cast<int32_t>(presp.first_token());
  if (is_stop(first)) {
    outcome.finish_reason = router::FinishReason::kStop;
    record();
    return outcome;
  }
  if (!deliver(first, presp.has_first_token_logprobs() ? &presp.first_token_logprobs() : nullptr)) {
    record();
    if (consumer_gone) return absl::CancelledError("consumer gone");
    outcome.finish_reason = router::FinishReason::kStop;
    return outcome;
  }
  if (request.max_tokens <= 1) {
    finish_pending();
    record();
    if (consumer_gone) return absl::CancelledError("consumer gone");
    outcome.finish_reason = router::FinishReason::kLength;
    return outcome;
  }

  // 2. Decode: start (the decode worker pulls the blocks), generate, end the turn. A generation
  // that its decode worker cuts off (kUnavailable: the worker drained past its limit, or died)
  // resumes on another one in registry mode, up to kMaxResumes times: the prompt and the tokens
  // delivered so far but the last are prefilled again (their stored blocks come from the
  // kvstore), and the last is the new sequence's first token, the earlier ones counted by its
  // sampler (penalties, min_tokens, and the index that keys each draw with the seed). The client
  // sees one completion; sampled or greedy, the tokens after the cut are those the cut-off
  // generation would have drawn from the resumed run's logits.
  constexpr int kMaxResumes = 2;
  t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> delivered = {first};  // the completion's tokens so far
  std::set<std::string> unreachable_decode;  // decode workers that refused or cut off this one
  absl::Status gen_status;
  bool stopped_early = false;
  std::string finish_reason;
  // The pair, prefill response, prefill request and request (prompt) of the current try: the
  // first placement's, then a resume's.
  Route* at = &route;
  const pv1::PrefillResponse* at_presp = &presp;
  router::CompletionRequest resumed;
  const router::CompletionRequest* at_request = &request;
  std::unique_ptr<Route> resumed_route;
  pv1::PrefillResponse resumed_presp;
  for (int resumes = 0;; ++resumes) {
    const int64_t prompt_tokens = static_cast<int64_t>(at_request->prompt_token_ids.size());
    // Tokens to generate after the one it is fed (delivered.back(), delivered already).
    const int max_new = request.max_tokens - static_cast<int>(delivered.size());
    dv1::StartSequenceRequest sreq;
    sreq.set_request_id(request.request_id);
    sreq.mutable_session_id()->set_value(request.session_id);
    sreq.set_prompt_tokens(static_cast<uint32_t>(prompt_tokens));
    sreq.set_max_new_tokens(static_cast<uint32_t>(max_new));
    sreq.set_codec(request.codec);
    if (at_presp->has_packed_kv()) {
      *sreq.mutable_packed_kv() = at_presp->packed_kv();
    } else {
      *sreq.mutable_prompt_blocks() = at_presp->published_blocks();
    }
    dv1::StartSequenceResponse sresp;
    auto start_sequence = [&] {
      grpc::ClientContext ctx;
      SetDeadline(&ctx, request.deadline);
      return rpc::ToAbslStatus(at->decode->decode->StartSequence(&ctx, sreq, &sresp));
    };
    // A resume avoids the decode workers that cut it off or refused it.
    if (impl_->options.registry && !sreq.has_packed_kv() &&
        unreachable_decode.count(at->decode_id) != 0) {
      impl_->MoveDecode(*at_request, at, unreachable_decode);
    }
    absl::Status started = start_sequence();
    if (!started.ok() && sreq.has_packed_kv() && !absl::IsDeadlineExceeded(started) &&
        !absl::IsCancelled(started)) {
      // The GPU handoff failed (e.g. DATA_LOSS: the prefill's outbox reused the room): the prompt
      // is prefilled again and moves as blocks. Same seed, so the same first token.
      LOG(WARNING) << request.request_id << ": packed KV handoff to " << at->decode_id
                   << " failed (" << started << "), prefilling again with blocks";
      pv1::PrefillRequest blocks_preq = preq;
      blocks_preq.mutable_token_ids()->Assign(at_request->prompt_token_ids.begin(),
                                              at_request->prompt_token_ids.end());
      blocks_preq.set_offer_packed_kv(false);
      blocks_preq.set_publish_to_kvstore(impl_->options.use_kvstore && at->publish_to_store);
      blocks_preq.set_prompt_logprobs(false);  // already delivered
      pv1::PrefillResponse again;
      absl::Status s = rpc::ToAbslStatus(impl_->CallPrefill(*at, *at_request, blocks_preq, &again));
      if (!s.ok()) return Annotate(s, absl::StrCat("prefill (block retry) on ", at->prefill_id));
      sreq.clear_packed_kv();
      *sreq.mutable_prompt_blocks() = again.published_blocks();
      trace.packed_kv = false;
      trace.prompt_blocks = again.published_blocks_size();
      trace.prompt_block_bytes = 0;
      for (const auto& b : again.published_blocks()) {
        trace.prompt_block_bytes += 128 + b.payload_bytes();
      }
      started = start_sequence();
    }
    started = impl_->StartDecode(*at_request, impl_->options.registry && !sreq.has_packed_kv(),
                                 at, &unreachable_decode, started, start_sequence);
    trace.decode_worker = at->decode_id;
    if (!started.ok()) {
      return Annotate(started, absl::StrCat("decode StartSequence on ", at->decode_id));
    }
    dv1::GenerateRequest greq;
    greq.set_sequence_id(sresp.sequence_id());
    greq.set_first_token(static_cast<uint32_t>(delivered.back()));
    for (size_t i = 0; i + 1 < delivered.size(); ++i) {
      greq.add_earlier_output_token_ids(static_cast<uint32_t>(delivered[i]));
    }
    greq.set_max_new_tokens(static_cast<uint32_t>(max_new));
    greq.set_temperature(static_cast<float>(request.temperature));
    greq.set_top_p(static_cast<float>(request.top_p));
    greq.set_top_k(static_cast<uint32_t>(request.top_k));
    greq.set_presence_penalty(static_cast<float>(request.presence_penalty));
    greq.set_frequency_penalty(static_cast<float>(request.frequency_penalty));
    greq.set_ignore_eos(request.ignore_eos);
    for (int32_t t : request.stop_token_ids) greq.add_stop_token_ids(static_cast<uint32_t>(t));
    greq.set_min_tokens(static_cast<uint32_t>(request.min_tokens));
    greq.mutable_logit_bias()->insert(preq.sampling().logit_bias().begin(),
                                      preq.sampling().logit_bias().end());
    if (request.logprobs >= 0) {
      greq.set_logprobs(true);
      greq.set_top_logprobs(static_cast<uint32_t>(request.logprobs));
    }
    // The same seed as the prefill's: a draw is keyed by (seed, token index), so the decode's
    // tokens (index >= 1) do not repeat the first token's draw, and a resume, whose delivered
    // tokens are observed, draws what the cut-off generation would have.
    greq.set_seed(seed);
    {
      grpc::ClientContext ctx;
      SetDeadline(&ctx, request.deadline);
      std::unique_ptr<grpc::ClientReader<dv1::GenerateResponse>> reader =
          at->decode->decode->Generate(&ctx, greq);
      dv1::GenerateResponse msg;
      while (!stopped_early && reader->Read(&msg)) {
        for (int i = 0; i < msg.token_ids_size(); ++i) {
          const bool has_logprobs = i < msg.token_logprobs_size();
          delivered.push_back(static_cast<int32_t>(msg.token_ids(i)));
          if (!deliver(delivered.back(), has_logprobs ? &msg.token_logprobs(i) : nullptr)) {
            stopped_early = true;
            break;
          }
        }
        if (msg.finished()) finish_reason = msg.finish_reason();
      }
      if (stopped_early) ctx.TryCancel();
      grpc::Status fs = reader->Finish();
      gen_status = stopped_early ? absl::OkStatus() : rpc::ToAbslStatus(fs);
    }
    {
      dv1::EndTurnRequest ereq;
      ereq.set_sequence_id(sresp.sequence_id());
      ereq.mutable_session_id()->set_value(request.session_id);
      ereq.set_keep(false);
      dv1::EndTurnResponse eresp;
      // The release holds even when the sequence is still in the batch for a step after a
      // cancelled Generate (the decode worker drops it when it leaves). A worker that cut the
      // generation off may be gone: one second for it.
      grpc::ClientContext ctx;
      SetDeadline(&ctx, absl::Now() + absl::Seconds(absl::IsUnavailable(gen_status) ? 1 : 5));
      const grpc::Status es = at->decode->decode->EndTurn(&ctx, ereq, &eresp);
      if (!es.ok()) VLOG(1) << request.request_id << ": EndTurn: " << es.error_message();
    }
    if (absl::IsUnavailable(gen_status) &&
        static_cast<int>(delivered.size()) >= request.max_tokens) {
      gen_status = absl::OkStatus();  // cut off after its last token: nothing is missing
      finish_reason = "length";
    }
    if (!absl::IsUnavailable(gen_status) || !impl_->options.registry || consumer_gone ||
        resumes == kMaxResumes || (request.cancelled && request.cancelled())) {
      break;
    }
    // Resume: the prompt and the tokens delivered but the last, prefilled on a new pair.
    unreachable_decode.insert(at->decode_id);
    LOG(WARNING) << request.request_id << ": decode Generate on " << at->decode_id
                 << " ended after " << delivered.size() << " tokens: " << gen_status
                 << "; resuming it on another decode worker";
    resumed = request;
    resumed.prompt_token_ids.insert(resumed.prompt_token_ids.end(), delivered.begin(),
                                    delivered.end() - 1);
    resumed.max_tokens = request.max_tokens - static_cast<int>(delivered.size()) + 1;
    pv1::PrefillRequest resume_preq = preq;
    resume_preq.mutable_token_ids()->Assign(resumed.prompt_token_ids.begin(),
                                            resumed.prompt_token_ids.end());
    resume_preq.set_logprobs(false);  // its sampled token is not used: the last one is fed
    resume_preq.set_prompt_logprobs(false);
    absl::StatusOr<Prefilled> again = impl_->PlaceAndPrefill(resumed, resume_preq);
    if (impl_->options.registry->on_resume) impl_->options.registry->on_resume(again.ok());
    if (!again.ok()) {
      gen_status = Annotate(again.status(), absl::StrCat("resuming after ", gen_status.message()));
      break;
    }
    resumed_route = std::move(again->route);
    resumed_presp = std::move(again->response);
    impl_->RecordStored(resumed_presp);
    at = resumed_route.get();
    at_presp = &resumed_presp;
    at_request = &resumed;
    trace.prefill_worker = at->prefill_id;
    trace.decode_worker = at->decode_id;
  }
  if (!stopped_early && gen_status.ok()) finish_pending();
  trace.decode_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  record();
  if (consumer_gone) return absl::CancelledError("consumer gone");
  if (!gen_status.ok()) {
    return Annotate(gen_status, absl::StrCat("decode Generate on ", at->decode_id));
  }
  outcome.finish_reason = (stopped_early || finish_reason == "stop") ? router::FinishReason::kStop
                                                                       : router::FinishReason::kLength;
  return outcome;
}

}  // namespace oscarkv::router_backend

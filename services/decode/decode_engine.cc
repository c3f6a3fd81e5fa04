#include "services/decode/decode_engine.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"
#include "lib/base/status_macros.h"

namespace oscarkv::decode {

DecodeEngine::DecodeEngine(const engine::ServingEngine* engine, DecodeDevice* device,
                           transfer::TransferBackend* backend, DecodeMetrics* metrics,
                           const DecodeEngineOptions& options)
    : engine_(engine),
      device_(device),
      metrics_(metrics),
      options_(options),
      fetcher_(backend),
      pool_(options.kv_capacity_bytes, absl::Seconds(options.idle_ttl_seconds),
            engine->model().config().KvBytesPerTokenBf16()),
      batcher_(
          [device, metrics](std::span<HeldSequence* const> seqs, std::span<const int32_t> tokens,
                            std::vector<float>* logits, std::vector<int32_t>* argmax) {
            const auto t0 = std::chrono::steady_clock::now();
            absl::Status s = device->Step(seqs, tokens, logits, argmax);
            metrics->step_seconds.Observe(
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            metrics->steps_total.Increment();
            return s;
          },
          engine->model().tokenizer().vocab_size(), options.max_batch,
          [metrics](double seconds) { metrics->sample_seconds.Observe(seconds); }),
      backend_(backend) {}

struct DecodeEngine::Receive {
  std::vector<std::byte> buffer;
  transfer::MemoryHandle handle = 0;
  std::vector<std::pair<uint64_t, uint64_t>> slots;
  StartParams params;
  absl::Time expires;
};

DecodeEngine::~DecodeEngine() {
  Stop();
  std::lock_guard<std::mutex> lock(ids_mu_);
  for (auto& [id, r] : receives_) {
    if (absl::Status s = backend_->DeregisterMemory(r->handle); !s.ok()) {
      LOG(WARNING) << "receive region deregistration failed: " << s;
    }
  }
}

absl::StatusOr<ReceiveSlots> DecodeEngine::PrepareReceive(const StartParams& p,
                                                         int64_t prompt_tokens) {
  if (p.codec != engine_->codec().name) {
    metrics_->sequences_rejected_total.Increment();
    return absl::InvalidArgumentError(absl::StrCat(
        "this decode worker serves codec ", std::string(engine_->codec().name), ", not '",
        p.codec, "'"));
  }
  if (prompt_tokens <= 0) return absl::InvalidArgumentError("prompt_tokens must be > 0");
  const auto& c = engine_->model().config();
  const int bt = engine_->options().block_tokens;
  const auto codec = engine_->codec().id;
  const uint64_t slot =
      kvformat::kBlockHeaderBytes +
      std::max(kvformat::PayloadBytes(codec, kvformat::BlockKind::kBf16, c.num_layers,
                                      c.num_kv_heads, c.head_dim, bt),
               kvformat::PayloadBytes(codec, kvformat::BlockKind::kQuantized, c.num_layers,
                                      c.num_kv_heads, c.head_dim, bt));
  const int64_t blocks = (prompt_tokens + bt - 1) / bt;
  if (static_cast<int64_t>(slot) * blocks > options_.kv_capacity_bytes) {
    return absl::ResourceExhaustedError("prompt too large for this decode worker");
  }
  auto r = std::make_shared<Receive>();
  r->buffer.resize(slot * blocks);
  OSCARKV_ASSIGN_OR_RETURN(transfer::RegisteredMemory reg,
                           backend_->RegisterMemory(std::span<std::byte>(r->buffer)));
  r->handle = reg.handle;
  for (int64_t i = 0; i < blocks; ++i) r->slots.push_back({i * slot, slot});
  r->params = p;
  r->expires = absl::Now() + absl::Seconds(options_.receive_ttl_seconds);
  ReceiveSlots out;
  out.sequence_id = pool_.ReserveId();
  out.endpoint_address = backend_->EndpointAddress();
  out.backend = backend_->capabilities().name;
  out.remote_descriptor = reg.remote_descriptor;
  out.slots = r->slots;
  backend_->ExpectPeerTraffic();  // the prefill worker puts the blocks next
  std::lock_guard<std::mutex> lock(ids_mu_);
  receives_[out.sequence_id] = std::move(r);
  return out;
}

absl::Status DecodeEngine::CompleteReceive(uint64_t id, int64_t max_new_tokens) {
  std::shared_ptr<Receive> r;
  {
    std::lock_guard<std::mutex> lock(ids_mu_);
    auto it = receives_.find(id);
    if (it == receives_.end()) return absl::NotFoundError("not a pending receive");
    r = it->second;
    receives_.erase(it);
  }
  if (absl::Status s = backend_->DeregisterMemory(r->handle); !s.ok()) {
    LOG(WARNING) << "receive region deregistration failed: " << s;
  }
  const auto t0 = std::chrono::steady_clock::now();
  kvformat::BlockExpectations expect;
  expect.model_fingerprint = engine_->model_fingerprint();
  expect.calib_fingerprint = engine_->calibration_fingerprint();
  std::vector<kvformat::BlockView> views;
  uint64_t bytes = 0;
  for (size_t i = 0; i < r->slots.size(); ++i) {
    // A slot may be longer than its block: size the view from the header first.
    const std::span<const std::byte> slot(r->buffer.data() + r->slots[i].first,
                                          r->slots[i].second);
    absl::StatusOr<kvformat::BlockHeader> h = kvformat::ParseBlockHeader(slot, expect);
    absl::StatusOr<kvformat::BlockView> v =
        !h.ok() ? absl::StatusOr<kvformat::BlockView>(h.status())
        : h->payload_bytes > slot.size() - kvformat::kBlockHeaderBytes
            ? absl::StatusOr<kvformat::BlockView>(absl::DataLossError("block overruns its slot"))
            : kvformat::ParseBlock(
                  slot.first(kvformat::kBlockHeaderBytes + h->payload_bytes), expect);
    if (!v.ok()) {
      metrics_->sequences_rejected_total.Increment();
      return Annotate(v.status(), absl::StrCat("pushed block ", i));
    }
    bytes += kvformat::kBlockHeaderBytes + v->header.payload_bytes;
    views.push_back(*v);
  }
  metrics_->received_bytes_total.Increment(static_cast<double>(bytes));
  metrics_->received_blocks_total.Increment(static_cast<double>(views.size()));
  absl::StatusOr<uint64_t> pooled = BuildAndPool(views, r->params, max_new_tokens, id);
  if (!pooled.ok()) return Annotate(pooled.status(), "building the pushed sequence");
  metrics_->fetch_seconds.Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> DecodeEngine::BuildAndPool(std::span<const kvformat::BlockView> views,
                                                    const StartParams& params,
                                                    int64_t max_new_tokens, uint64_t entry_id) {
  return Pool(device_->Build(views, max_new_tokens), params, entry_id);
}

absl::StatusOr<uint64_t> DecodeEngine::Pool(absl::StatusOr<std::unique_ptr<HeldSequence>> seq,
                                            const StartParams& params, uint64_t entry_id) {
  if (!seq.ok()) {
    metrics_->sequences_rejected_total.Increment();
    return seq.status();
  }
  auto entry = std::make_unique<PooledSequence>();
  entry->id = entry_id;
  entry->request_id = params.request_id;
  entry->session_id = params.session_id;
  entry->sequence = *std::move(seq);
  absl::StatusOr<uint64_t> id = pool_.Insert(std::move(entry), absl::Now());
  if (!id.ok()) {
    metrics_->sequences_rejected_total.Increment();
    return id.status();
  }
  metrics_->sequences_started_total.Increment();
  return *id;
}

absl::StatusOr<StartResult> DecodeEngine::StartSequence(const StartParams& p) {
  const auto t0 = std::chrono::steady_clock::now();
  auto fail = [&](absl::Status s) {
    metrics_->sequences_rejected_total.Increment();
    return s;
  };
  if (p.codec != engine_->codec().name) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "this decode worker serves codec ", std::string(engine_->codec().name), ", not '", p.codec, "'")));
  }
  if (p.model_fingerprint != 0 && (p.model_fingerprint != engine_->model_fingerprint() ||
                                   p.calib_fingerprint != engine_->calibration_fingerprint())) {
    return fail(absl::FailedPreconditionError("model or calibration fingerprint mismatch"));
  }
  const int64_t max_new = p.max_new_tokens > 0 ? p.max_new_tokens : options_.default_max_new_tokens;
  if (p.packed.has_value()) {
    if (!p.blocks.empty()) {
      return fail(absl::InvalidArgumentError("both packed KV and prompt blocks given"));
    }
    // Packed KV has no block headers: its descriptor carries the identity, checked here.
    if (p.packed->model_fingerprint != engine_->model_fingerprint() ||
        p.packed->calib_fingerprint != engine_->calibration_fingerprint()) {
      return fail(absl::FailedPreconditionError(
          "packed KV of another model or calibration (fingerprints differ)"));
    }
    PackedKvArrival arrival;
    absl::StatusOr<uint64_t> id =
        Pool(device_->BuildFromPacked(*p.packed, max_new, &arrival), p, /*entry_id=*/0);
    if (!id.ok()) return Annotate(id.status(), "taking the packed GPU KV");
    metrics_->received_bytes_total.Increment(static_cast<double>(p.packed->bytes));
    metrics_->packed_kv_received_total.Increment();
    metrics_->packed_kv_transfer_seconds.Observe(arrival.transfer_seconds);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    metrics_->fetch_seconds.Observe(dt);
    VLOG(1) << "sequence " << *id << " (" << p.request_id << "): " << p.packed->tokens
            << " tokens, packed " << p.packed->bytes << " bytes GPU to GPU in "
            << arrival.transfer_seconds << " s (checksum " << arrival.verify_seconds
            << " s), total " << dt << " s";
    return StartResult{*id, p.packed->tokens, p.packed->bytes};
  }
  if (p.blocks.empty()) return fail(absl::InvalidArgumentError("no prompt blocks"));
  kvformat::BlockExpectations expect;
  expect.model_fingerprint = engine_->model_fingerprint();
  expect.calib_fingerprint = engine_->calibration_fingerprint();
  absl::StatusOr<FetchedBlocks> fetched = fetcher_.Fetch(p.blocks, expect);
  if (!fetched.ok()) return fail(Annotate(fetched.status(), "fetching prompt blocks"));
  metrics_->received_bytes_total.Increment(static_cast<double>(fetched->bytes));
  metrics_->received_blocks_total.Increment(static_cast<double>(fetched->views.size()));
  absl::StatusOr<uint64_t> id = BuildAndPool(fetched->views, p, max_new, /*entry_id=*/0);
  if (!id.ok()) return Annotate(id.status(), "building the sequence");
  int64_t tokens = 0;
  for (const kvformat::BlockView& v : fetched->views) tokens += v.header.token_count;
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  metrics_->fetch_seconds.Observe(dt);
  VLOG(1) << "sequence " << *id << " (" << p.request_id << "): " << tokens << " tokens, "
          << fetched->views.size() << " blocks, " << fetched->bytes << " bytes in " << dt << " s";
  return StartResult{*id, tokens, fetched->bytes};
}

absl::Status DecodeEngine::Generate(uint64_t id, const GenerateParams& params,
                                    std::function<bool(int32_t, const engine::TokenLogprobs*)> on_token,
                                    std::function<void(FinishReason, const absl::Status&)> on_done) {
  const int vocab = engine_->model().tokenizer().vocab_size();
  OSCARKV_RETURN_IF_ERROR(params.sampling.Validate(vocab));
  if (params.max_new_tokens < 1) return absl::InvalidArgumentError("max_new_tokens must be >= 1");
  if (params.first_token < 0 || params.first_token >= vocab) {
    return absl::InvalidArgumentError("first_token outside the vocabulary");
  }
  if (absl::Status s = CompleteReceive(id, params.max_new_tokens);
      !s.ok() && !absl::IsNotFound(s)) {
    return s;
  }
  OSCARKV_ASSIGN_OR_RETURN(HeldSequence * seq, pool_.BeginGenerate(id));
  // Each step appends its input token: first_token, then all sampled tokens but the last.
  if (seq->remaining_tokens() < params.max_new_tokens) {
    pool_.FinishGenerate(id, absl::Now());
    return absl::InvalidArgumentError(absl::StrCat(
        "max_new_tokens ", params.max_new_tokens, " exceeds the room reserved for sequence ", id,
        " on ", device_->name(), " (", seq->remaining_tokens(),
        " tokens; StartSequence's max_new_tokens sets it)"));
  }
  BatchRequest r;
  r.sequence = seq;
  r.first_token = params.first_token;
  r.earlier_tokens = params.earlier_tokens;
  r.max_new_tokens = params.max_new_tokens;
  r.stop_token_ids = params.stop_token_ids;
  const model::Tokenizer& tok = engine_->model().tokenizer();
  if (!params.ignore_eos) {
    r.stop_token_ids.insert(r.stop_token_ids.end(), tok.end_of_generation_ids().begin(),
                            tok.end_of_generation_ids().end());
  }
  r.sampling = params.sampling;
  // The sampler has seen first_token (the batcher observes it), so its count is the
  // completion's.
  r.sampling.min_tokens = params.min_tokens;
  r.sampling.min_tokens_banned = r.stop_token_ids;
  r.logprobs = params.logprobs;
  r.on_token = [this, on_token = std::move(on_token), t0 = std::chrono::steady_clock::now(),
                first = true](int32_t t, const engine::TokenLogprobs* logprobs) mutable {
    if (first) {
      metrics_->time_to_first_token_seconds.Observe(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      first = false;
    }
    metrics_->tokens_generated_total.Increment();
    return on_token(t, logprobs);
  };
  r.on_done = [this, id, seq, on_done = std::move(on_done)](FinishReason reason,
                                                            const absl::Status& s) {
    pool_.FinishGenerate(id, absl::Now());
    on_done(reason, s);
  };
  const uint64_t batch_id = batcher_.Submit(std::move(r));
  std::lock_guard<std::mutex> lock(ids_mu_);
  batch_ids_[id] = batch_id;
  return absl::OkStatus();
}

uint64_t DecodeEngine::BatchIdOf(uint64_t sequence_id) const {
  std::lock_guard<std::mutex> lock(ids_mu_);
  auto it = batch_ids_.find(sequence_id);
  return it == batch_ids_.end() ? 0 : it->second;
}

absl::StatusOr<EndTurnResult> DecodeEngine::EndTurn(uint64_t id, bool keep,
                                                    double keep_ttl_seconds) {
  EndTurnResult r;
  if (keep) {
    const double ttl = std::min(std::max(keep_ttl_seconds, 0.0), options_.max_keep_seconds);
    OSCARKV_ASSIGN_OR_RETURN(r.kept_bytes, pool_.Keep(id, absl::Seconds(ttl), absl::Now()));
  } else {
    bool deferred = false;
    OSCARKV_ASSIGN_OR_RETURN(r.released_bytes, pool_.Release(id, &deferred));
    uint64_t batch_id = 0;
    {
      std::lock_guard<std::mutex> lock(ids_mu_);
      auto it = batch_ids_.find(id);
      if (it != batch_ids_.end()) batch_id = it->second;
      batch_ids_.erase(id);
    }
    // Still generating: it leaves the batch before the next step, and the pool drops it then.
    if (deferred && batch_id != 0) batcher_.Cancel(batch_id);
  }
  return r;
}

int DecodeEngine::Sweep() {
  const absl::Time now = absl::Now();
  int dropped = 0;
  {
    std::lock_guard<std::mutex> lock(ids_mu_);
    for (auto it = receives_.begin(); it != receives_.end();) {
      if (it->second->expires <= now) {
        if (absl::Status s = backend_->DeregisterMemory(it->second->handle); !s.ok()) {
          LOG(WARNING) << "receive region deregistration failed: " << s;
        }
        it = receives_.erase(it);
        ++dropped;
      } else {
        ++it;
      }
    }
  }
  return dropped + pool_.Sweep(now);
}

}  // namespace oscarkv::decode

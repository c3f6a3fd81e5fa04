#include "services/prefill/prefill_engine.h"

#include <chrono>
#include <map>

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"
#include "lib/base/status_macros.h"

namespace oscarkv::prefill {
namespace {

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

PrefillEngine::PrefillEngine(const engine::ServingEngine* engine, PrefillDevice* device,
                             transfer::TransferBackend* backend, KvStoreClient* store,
                             KvPublisher* publisher, PrefillMetrics* metrics,
                             PrefillEngineOptions options)
    : engine_(engine),
      device_(device),
      backend_(backend),
      store_(store),
      publisher_(publisher),
      metrics_(metrics),
      options_(std::move(options)) {}

absl::StatusOr<PrefillEngine::Prefix> PrefillEngine::FetchPrefix(
    const PrefillParams& params, std::span<const kvformat::BlockKey> keys) {
  Prefix prefix;
  OSCARKV_ASSIGN_OR_RETURN(LookupResult hit, store_->LookupPrefix(keys, params.session_id));
  if (hit.blocks.empty()) return prefix;
  std::vector<uint64_t> offsets;
  uint64_t total = 0;
  for (const BlockInfo& b : hit.blocks) {
    offsets.push_back(total);
    total += kvformat::kBlockHeaderBytes + b.payload_bytes;
  }
  prefix.buffer.resize(total);
  absl::Status status;
  absl::StatusOr<transfer::RegisteredMemory> local =
      backend_->RegisterMemory(std::span<std::byte>(prefix.buffer));
  if (!local.ok()) status = local.status();
  if (status.ok()) {
    std::map<std::string, transfer::TransferBatch> batches;
    for (size_t i = 0; i < hit.blocks.size(); ++i) {
      const BlockInfo& b = hit.blocks[i];
      transfer::TransferBatch& batch = batches[b.location.peer_address];
      batch.peer_address = b.location.peer_address;
      batch.ops.push_back({local->handle, offsets[i], b.location.remote_descriptor,
                           b.location.offset, kvformat::kBlockHeaderBytes + b.payload_bytes,
                           transfer::Direction::kGet});
    }
    for (auto& [peer, batch] : batches) {
      status = transfer::TransferAndWait(*backend_, batch);
      if (!status.ok()) break;
    }
    if (absl::Status d = backend_->DeregisterMemory(local->handle); !d.ok()) {
      LOG(WARNING) << "prefix buffer deregistration failed: " << d;
    }
  }
  if (absl::Status r = store_->ReleaseLease(hit.lease_id); !r.ok()) {
    VLOG(1) << "kvstore lease release failed: " << r;
  }
  OSCARKV_RETURN_IF_ERROR(status);
  // Every block is checked against what this engine expects; the first one that does not fit
  // ends the usable prefix (never used, ARCHITECTURE.md §4).
  for (size_t i = 0; i < hit.blocks.size(); ++i) {
    kvformat::BlockExpectations e;
    e.model_fingerprint = engine_->model_fingerprint();
    e.calib_fingerprint = engine_->calibration_fingerprint();
    e.key = keys[i];
    e.token_count = engine_->options().block_tokens;
    const uint64_t bytes = kvformat::kBlockHeaderBytes + hit.blocks[i].payload_bytes;
    absl::StatusOr<kvformat::BlockView> view =
        kvformat::ParseBlock(std::span(prefix.buffer.data() + offsets[i], bytes), e);
    if (!view.ok()) {
      LOG(WARNING) << params.request_id << ": stored block " << i << " rejected: "
                   << view.status();
      metrics_->stored_blocks_rejected_total.Increment();
      // If the store's own copy is damaged it drops it, and this request's publish stores it
      // again; else every later reader would refuse it until it was evicted.
      absl::StatusOr<uint32_t> dropped = store_->Recheck(std::span(&keys[i], 1));
      if (!dropped.ok()) {
        LOG(WARNING) << params.request_id << ": kvstore recheck failed: " << dropped.status();
      } else if (*dropped > 0) {
        LOG(WARNING) << params.request_id << ": the kvstore dropped its damaged copy";
      }
      break;
    }
    prefix.views.push_back(*view);
    prefix.bytes += bytes;
  }
  prefix.matched = static_cast<int>(prefix.views.size());
  return prefix;
}

absl::Status PrefillEngine::Push(const StagedBlocks& staged,
                                std::span<const RemoteLocation> to) {
  if (to.size() != staged.blocks.size()) {
    return absl::InvalidArgumentError(absl::StrCat("decode target has ", to.size(),
                                                   " block locations for ",
                                                   staged.blocks.size(), " blocks"));
  }
  std::map<std::string, transfer::TransferBatch> batches;
  for (size_t i = 0; i < to.size(); ++i) {
    const BlockInfo& b = staged.blocks[i];
    const uint64_t bytes = kvformat::kBlockHeaderBytes + b.payload_bytes;
    if (to[i].length < bytes) {
      return absl::InvalidArgumentError(absl::StrCat("decode slot ", i, " holds ", to[i].length,
                                                     " bytes, the block needs ", bytes));
    }
    transfer::TransferBatch& batch = batches[to[i].peer_address];
    batch.peer_address = to[i].peer_address;
    batch.ops.push_back({staged.handle, b.location.offset, to[i].remote_descriptor,
                         to[i].offset, bytes, transfer::Direction::kPut});
  }
  for (auto& [peer, batch] : batches) {
    if (absl::Status s = transfer::TransferAndWait(*backend_, batch); !s.ok()) {
      // The usual cause: the decode worker released the reservation (--receive_ttl_seconds).
      return Annotate(s, absl::StrCat(peer, " (a push reservation lasts the decode worker's "
                                            "--receive_ttl_seconds from StartSequence)"));
    }
  }
  return absl::OkStatus();
}

absl::Time PrefillEngine::last_completed() const {
  return absl::FromUnixNanos(last_completed_unix_ns_.load());
}

absl::StatusOr<PrefillOutput> PrefillEngine::Prefill(const PrefillParams& params) {
  const auto t_start = std::chrono::steady_clock::now();
  if (params.tokens.empty()) return absl::InvalidArgumentError("empty prompt");
  if (params.codec != engine_->codec().name) {
    return absl::InvalidArgumentError(absl::StrCat(
        "this prefill worker serves codec ", std::string(engine_->codec().name), ", not '", params.codec, "'"));
  }
  if (params.model_fingerprint != 0 &&
      (params.model_fingerprint != engine_->model_fingerprint() ||
       params.calib_fingerprint != engine_->calibration_fingerprint())) {
    return absl::FailedPreconditionError("model or calibration fingerprint mismatch");
  }
  OSCARKV_RETURN_IF_ERROR(
      params.sampling.Validate(engine_->model().tokenizer().vocab_size()));
  if (active_.fetch_add(1) >= options_.max_concurrent) {
    active_.fetch_sub(1);
    return absl::ResourceExhaustedError("prefill worker busy: retry elsewhere");
  }
  struct Release {
    std::atomic<int>* a;
    ~Release() { a->fetch_sub(1); }
  } release{&active_};
  metrics_->active_requests.Set(active_.load());

  // A stop (the caller left) is counted apart from failures, and never retried.
  bool stopped = false;
  const engine::PrefillStopCheck stop_check = [&]() -> absl::Status {
    if (!params.stop_check) return absl::OkStatus();
    absl::Status s = params.stop_check();
    stopped = stopped || !s.ok();
    return s;
  };
  auto stop_error = [&](const absl::Status& s) {
    LOG(INFO) << params.request_id << ": prefill stopped: " << s;
    metrics_->cancelled_total.Increment();
    return Annotate(s, "prefill stopped");
  };
  if (absl::Status s = stop_check(); !s.ok()) return stop_error(s);

  PrefillOutput out;
  // 1. Prefix lookup and fetch.
  auto t0 = std::chrono::steady_clock::now();
  Prefix prefix;
  bool use_store = params.use_kvstore && store_ != nullptr && device_->shares_kvstore();
  if (use_store && params.prompt_logprobs < 0) {
    const std::vector<kvformat::BlockKey> keys = device_->ReusableKeys(params.tokens);
    if (!keys.empty()) {
      absl::StatusOr<Prefix> p = FetchPrefix(params, keys);
      if (p.ok()) {
        prefix = *std::move(p);
      } else {
        LOG(WARNING) << params.request_id << ": prefix fetch failed, computing in full: "
                     << p.status();
        // A store that did not answer the lookup would most likely hold the publish for its
        // whole deadline too; this request's blocks go to the decode worker only.
        if (absl::IsDeadlineExceeded(p.status()) || absl::IsUnavailable(p.status())) {
          use_store = false;
        }
      }
    }
  }
  out.matched_blocks = prefix.matched;
  out.timings.prefix_fetch_seconds = Since(t0);

  // 2. Prefill the rest.
  t0 = std::chrono::steady_clock::now();
  DevicePrefillOptions device_options;
  device_options.want_packed = params.want_packed && params.push_to.empty();
  device_options.prompt_logprobs = params.prompt_logprobs;
  device_options.stop_check = stop_check;
  absl::StatusOr<DevicePrefillResult> result =
      device_->Prefill(params.tokens, prefix.views, device_options);
  if (!result.ok() && stopped) return stop_error(result.status());
  if (!result.ok() && !prefix.views.empty()) {
    LOG(WARNING) << params.request_id << ": reused blocks refused (" << result.status()
                 << "), computing in full";
    prefix.views.clear();
    result = device_->Prefill(params.tokens, {}, device_options);
  }
  if (!result.ok() && stopped) return stop_error(result.status());
  if (!result.ok()) {
    metrics_->failures_total.Increment();
    return result.status();
  }
  out.timings.compute_seconds = Since(t0);
  out.reused_tokens = result->reused_tokens;
  out.computed_tokens = result->computed_tokens;
  out.prompt_logprobs = std::move(result->prompt_logprobs);

  // 3. Stage all blocks for the decode worker; publish the reusable ones to the store. A packed
  // handoff replaces the blocks (its device keeps the bytes).
  t0 = std::chrono::steady_clock::now();
  const std::string codec(engine_->codec().name);
  if (result->packed.has_value()) {
    out.packed = std::move(result->packed);
    out.timings.pack_seconds = out.packed->pack_seconds;
    out.timings.compute_seconds -= out.packed->pack_seconds;
    metrics_->published_bytes_total.WithLabels({codec, "decode_gpu"})
        .Increment(static_cast<double>(out.packed->bytes));
    metrics_->phase_seconds.WithLabels({"pack"}).Observe(out.timings.pack_seconds);
  }
  absl::StatusOr<StagedBlocks> staged =
      out.packed.has_value() ? StagedBlocks{} : publisher_->Stage(result->blocks);
  if (!staged.ok()) {
    metrics_->failures_total.Increment();
    return staged.status();
  }
  out.staged = *std::move(staged);
  metrics_->published_bytes_total.WithLabels({codec, "decode"})
      .Increment(static_cast<double>(out.staged.bytes));
  if (use_store) {
    absl::StatusOr<StorePublishStats> store = publisher_->PublishToStore(out.staged);
    if (store.ok()) {
      out.store = *store;
      metrics_->published_bytes_total.WithLabels({codec, "kvstore"})
          .Increment(static_cast<double>(store->written_bytes));
    } else {
      LOG(WARNING) << params.request_id << ": publishing to the kvstore failed: "
                   << store.status();
    }
  }
  if (!params.push_to.empty()) {
    absl::Status pushed = Push(out.staged, params.push_to);
    if (!pushed.ok()) {
      metrics_->failures_total.Increment();
      return Annotate(pushed, "pushing blocks to the decode worker");
    }
  }
  out.timings.transfer_seconds = Since(t0);

  // 4. First token (under min_tokens, none of the sampling's min_tokens_banned).
  engine::Sampler sampler(params.sampling);
  out.first_token = sampler.Sample(result->last_logits);
  if (params.logprobs >= 0) {
    out.first_token_logprobs =
        engine::ComputeLogprobs(result->last_logits, out.first_token, params.logprobs);
  }
  out.timings.total_seconds = Since(t_start);

  last_completed_unix_ns_.store(absl::ToUnixNanos(absl::Now()));
  metrics_->requests_total.Increment();
  metrics_->tokens_computed_total.Increment(static_cast<double>(out.computed_tokens));
  metrics_->tokens_reused_total.Increment(static_cast<double>(out.reused_tokens));
  metrics_->tokens_scored_total.Increment(static_cast<double>(out.prompt_logprobs.size()));
  metrics_->blocks_fetched_total.Increment(prefix.matched);
  metrics_->fetched_bytes_total.Increment(static_cast<double>(prefix.bytes));
  metrics_->phase_seconds.WithLabels({"prefix_fetch"}).Observe(out.timings.prefix_fetch_seconds);
  metrics_->phase_seconds.WithLabels({"compute"}).Observe(out.timings.compute_seconds);
  metrics_->phase_seconds.WithLabels({"transfer"}).Observe(out.timings.transfer_seconds);
  metrics_->phase_seconds.WithLabels({"total"}).Observe(out.timings.total_seconds);
  metrics_->outbox_bytes.Set(static_cast<double>(publisher_->outbox_bytes()));
  VLOG(1) << params.request_id << ": " << params.tokens.size() << " tokens, reused "
          << out.reused_tokens << ", computed " << out.computed_tokens << ", "
          << out.staged.blocks.size() << " blocks (" << out.staged.bytes << " bytes), stored "
          << out.store.written_blocks << " in " << out.timings.total_seconds << " s";
  return out;
}

}  // namespace oscarkv::prefill

#include "services/prefill/prefill_service.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "lib/rpc/logprobs_proto.h"
#include "lib/rpc/status_conversion.h"

namespace oscarkv::prefill {
namespace {

void SetKey(const kvformat::BlockKey& k, oscarkv::common::v1::BlockKey* out) {
  out->set_lo(k.lo);
  out->set_hi(k.hi);
}

}  // namespace

grpc::Status PrefillService::Prefill(grpc::ServerContext* ctx, const v1::PrefillRequest* req,
                                     v1::PrefillResponse* resp) {
  const auto t0 = std::chrono::steady_clock::now();
  if (draining_.load()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "draining");
  PrefillParams p;
  for (const auto& l : req->decode_target().block_locations()) {
    p.push_to.push_back({l.endpoint_address(), l.backend(), l.remote_descriptor(), l.offset(),
                         l.length(), l.worker_id()});
  }
  p.request_id = req->request_id();
  p.session_id = req->session_id().value();
  p.tokens.assign(req->token_ids().begin(), req->token_ids().end());
  p.codec = req->codec();
  p.use_kvstore = req->publish_to_kvstore();
  p.sampling.temperature = req->sampling().temperature();
  p.sampling.top_p = req->sampling().top_p() == 0.0f ? 1.0f : req->sampling().top_p();
  p.sampling.top_k = static_cast<int>(req->sampling().top_k());
  p.sampling.seed = req->sampling().seed();
  for (const auto& [token, bias] : req->sampling().logit_bias()) {
    p.sampling.logit_bias.emplace_back(static_cast<int32_t>(token), bias);
  }
  p.sampling.min_tokens = static_cast<int>(std::min<uint32_t>(req->sampling().min_tokens(), 1));
  for (uint32_t t : req->sampling().stop_token_ids()) {
    p.sampling.min_tokens_banned.push_back(static_cast<int32_t>(t));
  }
  p.model_fingerprint = req->model().model_fingerprint();
  p.calib_fingerprint = req->model().calib_fingerprint();
  p.want_packed = req->offer_packed_kv();
  // gRPC marks the call cancelled when the caller cancels, its deadline passes or the server
  // shuts down: the prefill then stops at its next chunk instead of computing for nobody.
  p.stop_check = [ctx, this]() -> absl::Status {
    if (!ctx->IsCancelled()) return absl::OkStatus();
    if (ctx->deadline() <= std::chrono::system_clock::now()) {
      return absl::DeadlineExceededError("the prefill's deadline passed");
    }
    if (draining_.load()) {
      return absl::CancelledError(
          "cancelled while the prefill worker drains (its drain time ran out, or the caller left)");
    }
    return absl::CancelledError("the caller cancelled the prefill");
  };
  if (req->logprobs()) {
    if (req->top_logprobs() > engine::kMaxTopLogprobs) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("top_logprobs must be <= ", engine::kMaxTopLogprobs));
    }
    p.logprobs = static_cast<int>(req->top_logprobs());
  }
  if (req->prompt_logprobs()) {
    if (req->prompt_top_logprobs() > engine::kMaxTopLogprobs) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("prompt_top_logprobs must be <= ", engine::kMaxTopLogprobs));
    }
    p.prompt_logprobs = static_cast<int>(req->prompt_top_logprobs());
  }
  absl::StatusOr<PrefillOutput> out = engine_->Prefill(p);
  if (!out.ok()) return rpc::ToGrpcStatus(out.status());
  resp->set_request_id(req->request_id());
  resp->set_first_token(static_cast<uint32_t>(out->first_token));
  if (out->first_token_logprobs) {
    rpc::ToProto(*out->first_token_logprobs, resp->mutable_first_token_logprobs());
  }
  for (const engine::TokenLogprobs& t : out->prompt_logprobs) {
    rpc::ToProto(t, resp->add_prompt_logprobs());
  }
  resp->set_reused_tokens(static_cast<uint32_t>(out->reused_tokens));
  for (size_t i = 0; i < out->staged.blocks.size(); ++i) {
    const BlockInfo& b = out->staged.blocks[i];
    if (out->staged.reusable[i]) SetKey(b.key, resp->add_published_keys());
    oscarkv::common::v1::BlockDescriptor* d = resp->add_published_blocks();
    SetKey(b.key, d->mutable_key());
    SetKey(b.prev_key, d->mutable_prev_key());
    d->set_codec(b.codec);
    d->set_block_kind(b.block_kind);
    d->set_first_position(b.first_position);
    d->set_token_count(b.token_count);
    d->set_payload_bytes(b.payload_bytes);
    d->set_payload_checksum(b.payload_checksum);
    oscarkv::common::v1::BlockLocation* l = d->mutable_location();
    l->set_endpoint_address(b.location.peer_address);
    l->set_backend(b.location.backend);
    l->set_remote_descriptor(b.location.remote_descriptor);
    l->set_offset(b.location.offset);
    l->set_length(b.location.length);
    l->set_worker_id(b.location.worker_id);
  }
  if (out->packed.has_value()) {
    const PackedKvHandoff& h = *out->packed;
    oscarkv::common::v1::PackedKvDescriptor* d = resp->mutable_packed_kv();
    oscarkv::common::v1::BlockLocation* l = d->mutable_location();
    l->set_endpoint_address(engine_->endpoint_address());
    l->set_backend(engine_->backend_name());
    l->set_remote_descriptor(h.remote_descriptor);
    l->set_offset(h.offset);
    l->set_length(h.bytes);
    l->set_worker_id(engine_->worker_id());
    d->set_tokens(static_cast<uint32_t>(h.tokens));
    d->set_bytes(h.bytes);
    d->set_checksum(h.checksum);
    d->set_codec(static_cast<uint32_t>(engine_->serving_engine().codec().id));
    d->set_model_fingerprint(engine_->serving_engine().model_fingerprint());
    d->set_calib_fingerprint(engine_->serving_engine().calibration_fingerprint());
  }
  v1::PrefillTimings* t = resp->mutable_timings();
  t->set_pack_seconds(out->timings.pack_seconds);
  t->set_prefix_fetch_seconds(out->timings.prefix_fetch_seconds);
  t->set_compute_seconds(out->timings.compute_seconds);
  t->set_transfer_seconds(out->timings.transfer_seconds);
  t->set_total_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return grpc::Status::OK;
}

}  // namespace oscarkv::prefill

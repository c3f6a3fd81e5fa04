#include "services/decode/decode_service.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/rpc/logprobs_proto.h"
#include "lib/rpc/status_conversion.h"

namespace oscarkv::decode {

grpc::Status DecodeService::StartSequence(grpc::ServerContext*,
                                          const v1::StartSequenceRequest* req,
                                          v1::StartSequenceResponse* resp) {
  if (draining_.load()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "draining");
  StartParams p;
  p.request_id = req->request_id();
  p.session_id = req->session_id().value();
  p.codec = req->codec();
  p.model_fingerprint = req->model().model_fingerprint();
  p.calib_fingerprint = req->model().calib_fingerprint();
  p.max_new_tokens = req->max_new_tokens();
  if (req->has_packed_kv()) {
    const auto& d = req->packed_kv();
    PackedKvSource src;
    src.peer_address = d.location().endpoint_address();
    src.remote_descriptor = d.location().remote_descriptor();
    src.offset = d.location().offset();
    src.bytes = d.bytes();
    src.tokens = d.tokens();
    src.checksum = d.checksum();
    src.codec = d.codec();
    src.model_fingerprint = d.model_fingerprint();
    src.calib_fingerprint = d.calib_fingerprint();
    if (src.tokens != req->prompt_tokens()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "packed_kv.tokens differs from prompt_tokens");
    }
    p.packed = std::move(src);
    absl::StatusOr<StartResult> r = engine_->StartSequence(p);
    if (!r.ok()) return rpc::ToGrpcStatus(r.status());
    resp->set_sequence_id(r->sequence_id);
    return grpc::Status::OK;
  }
  const bool push = std::none_of(
      req->prompt_blocks().begin(), req->prompt_blocks().end(),
      [](const auto& d) { return d.has_location() && !d.location().endpoint_address().empty(); });
  if (push) {
    // Push: hand out one slot per prompt block; the prefill worker puts the blocks there.
    absl::StatusOr<ReceiveSlots> slots = engine_->PrepareReceive(p, req->prompt_tokens());
    if (!slots.ok()) return rpc::ToGrpcStatus(slots.status());
    resp->set_sequence_id(slots->sequence_id);
    for (const auto& [offset, length] : slots->slots) {
      oscarkv::common::v1::BlockLocation* l = resp->add_block_locations();
      l->set_endpoint_address(slots->endpoint_address);
      l->set_backend(slots->backend);
      l->set_remote_descriptor(slots->remote_descriptor);
      l->set_offset(offset);
      l->set_length(length);
    }
    return grpc::Status::OK;
  }
  for (const auto& d : req->prompt_blocks()) {
    if (!d.has_location() || d.location().endpoint_address().empty()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "either every prompt block carries a location (pull) or none (push)");
    }
    BlockSource s;
    s.peer_address = d.location().endpoint_address();
    s.remote_descriptor = d.location().remote_descriptor();
    s.offset = d.location().offset();
    s.bytes = kvformat::kBlockHeaderBytes + d.payload_bytes();
    s.key = {d.key().lo(), d.key().hi()};
    s.payload_checksum = d.payload_checksum();
    p.blocks.push_back(std::move(s));
  }
  absl::StatusOr<StartResult> r = engine_->StartSequence(p);
  if (!r.ok()) return rpc::ToGrpcStatus(r.status());
  resp->set_sequence_id(r->sequence_id);
  return grpc::Status::OK;
}

grpc::Status DecodeService::Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                                     grpc::ServerWriter<v1::GenerateResponse>* writer) {
  if (req->tail_token_ids_size() > 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "tail_token_ids must be empty: the prompt blocks cover the whole prompt");
  }
  // The batcher thread pushes; this thread writes to the stream.
  struct Channel {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<int32_t, std::optional<engine::TokenLogprobs>>> tokens;
    bool done = false;
    FinishReason reason = FinishReason::kLength;
    absl::Status status;
    bool consumer_gone = false;
  };
  auto ch = std::make_shared<Channel>();
  GenerateParams g;
  g.first_token = static_cast<int32_t>(req->first_token());
  for (uint32_t t : req->earlier_output_token_ids()) {
    if (t >= static_cast<uint32_t>(engine_->serving_engine().model().tokenizer().vocab_size())) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "earlier_output_token_ids outside the vocabulary");
    }
    g.earlier_tokens.push_back(static_cast<int32_t>(t));
  }
  g.max_new_tokens = static_cast<int>(req->max_new_tokens());
  for (uint32_t t : req->stop_token_ids()) g.stop_token_ids.push_back(static_cast<int32_t>(t));
  g.sampling.temperature = req->temperature();
  g.sampling.top_p = req->top_p() == 0.0f ? 1.0f : req->top_p();
  g.sampling.top_k = static_cast<int>(req->top_k());
  g.sampling.seed = req->seed();
  g.sampling.presence_penalty = req->presence_penalty();
  g.sampling.frequency_penalty = req->frequency_penalty();
  for (const auto& [token, bias] : req->logit_bias()) {
    g.sampling.logit_bias.emplace_back(static_cast<int32_t>(token), bias);
  }
  g.ignore_eos = req->ignore_eos();
  g.min_tokens = static_cast<int>(std::min<uint32_t>(req->min_tokens(), 1u << 30));
  if (req->logprobs()) {
    if (req->top_logprobs() > engine::kMaxTopLogprobs) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("top_logprobs must be <= ", engine::kMaxTopLogprobs));
    }
    g.logprobs = static_cast<int>(req->top_logprobs());
  }
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status s = engine_->Generate(
      req->sequence_id(), g,
      [ch](int32_t token, const engine::TokenLogprobs* logprobs) {
        std::lock_guard<std::mutex> lock(ch->mu);
        if (ch->consumer_gone) return false;
        ch->tokens.emplace_back(token, logprobs ? std::optional(*logprobs) : std::nullopt);
        ch->cv.notify_all();
        return true;
      },
      [ch](FinishReason reason, const absl::Status& status) {
        std::lock_guard<std::mutex> lock(ch->mu);
        ch->done = true;
        ch->reason = reason;
        ch->status = status;
        ch->cv.notify_all();
      });
  if (!s.ok()) return rpc::ToGrpcStatus(s);
  bool first = true;
  while (true) {
    v1::GenerateResponse msg;
    bool done = false;
    {
      std::unique_lock<std::mutex> lock(ch->mu);
      ch->cv.wait_for(lock, std::chrono::milliseconds(50),
                      [&] { return ch->done || !ch->tokens.empty(); });
      while (!ch->tokens.empty()) {
        const auto& [token, logprobs] = ch->tokens.front();
        msg.add_token_ids(static_cast<uint32_t>(token));
        if (logprobs) rpc::ToProto(*logprobs, msg.add_token_logprobs());
        ch->tokens.pop_front();
      }
      done = ch->done;
      if (done) {
        if (!ch->status.ok()) return rpc::ToGrpcStatus(ch->status);
        msg.set_finished(true);
        msg.set_finish_reason(FinishReasonName(ch->reason));
      }
    }
    if (ctx->IsCancelled()) {
      std::lock_guard<std::mutex> lock(ch->mu);
      ch->consumer_gone = true;
      engine_->Cancel(engine_->BatchIdOf(req->sequence_id()));
      // The batcher still calls on_done; `ch` is shared, so it may outlive this call.
      return grpc::Status(grpc::StatusCode::CANCELLED, "client cancelled");
    }
    if (msg.token_ids_size() == 0 && !done) continue;
    if (first && msg.token_ids_size() > 0) {
      msg.set_time_to_first_token_seconds(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      first = false;
    }
    if (!writer->Write(msg)) {
      std::lock_guard<std::mutex> lock(ch->mu);
      ch->consumer_gone = true;
      return grpc::Status(grpc::StatusCode::CANCELLED, "stream closed");
    }
    if (done) return grpc::Status::OK;
  }
}

grpc::Status DecodeService::EndTurn(grpc::ServerContext*, const v1::EndTurnRequest* req,
                                    v1::EndTurnResponse* resp) {
  absl::StatusOr<EndTurnResult> r =
      engine_->EndTurn(req->sequence_id(), req->keep(), req->keep_ttl_seconds());
  if (!r.ok()) return rpc::ToGrpcStatus(r.status());
  resp->set_kept_bytes(static_cast<uint64_t>(r->kept_bytes));
  resp->set_released_bytes(static_cast<uint64_t>(r->released_bytes));
  return grpc::Status::OK;
}

}  // namespace oscarkv::decode

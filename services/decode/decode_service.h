// gRPC adapter of oscarkv.decode.v1.DecodeService: proto ↔ DecodeEngine, status conversion,
// streaming. No policy lives here.
//
// StartSequence, pull: every prompt block descriptor carries a location (the prefill worker's
// outbox or the kvstore); the worker gets them through lib/transfer before answering.
// StartSequence, push: no descriptor carries a location (or there are none): the answer's
// block_locations give one slot per block of `prompt_tokens` (ceil(prompt_tokens / 64)) in a
// region registered with this worker's backend; the prefill worker puts the blocks there
// (PrefillRequest.decode_target), and the sequence is built from them at the first Generate.
// Generate: `max_new_tokens` counts the tokens streamed after `first_token` (which the caller
// already has); `tail_token_ids` must be empty (the prefill's blocks cover the whole prompt).
#ifndef OSCARKV_SERVICES_DECODE_DECODE_SERVICE_H_
#define OSCARKV_SERVICES_DECODE_DECODE_SERVICE_H_

#include <atomic>

#include "oscarkv/decode/v1/decode.grpc.pb.h"
#include "services/decode/decode_engine.h"

namespace oscarkv::decode {

// Thread-safe; `engine` is not owned and must outlive the service.
class DecodeService final : public oscarkv::decode::v1::DecodeService::Service {
 public:
  explicit DecodeService(DecodeEngine* engine) : engine_(engine) {}

  // While draining, new StartSequence calls get UNAVAILABLE.
  void SetDraining() { draining_.store(true); }

  grpc::Status StartSequence(grpc::ServerContext* ctx, const v1::StartSequenceRequest* req,
                             v1::StartSequenceResponse* resp) override;
  grpc::Status Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status EndTurn(grpc::ServerContext* ctx, const v1::EndTurnRequest* req,
                       v1::EndTurnResponse* resp) override;

 private:
  DecodeEngine* engine_;
  std::atomic<bool> draining_{false};
};

}  // namespace oscarkv::decode

#endif  // OSCARKV_SERVICES_DECODE_DECODE_SERVICE_H_

// gRPC adapter of oscarkv.prefill.v1.PrefillService: proto ↔ PrefillEngine, status conversion.
//
// Pull: PrefillResponse.published_blocks lists ALL the prompt's blocks, located in this worker's
// outbox; the caller hands them to the decode worker's StartSequence, which gets them through
// lib/transfer. Push: when decode_target.block_locations is set (from the decode worker's
// StartSequence for ceil(prompt_tokens / 64) blocks), every block is also put there before the
// answer. `publish_to_kvstore` turns on both the kvstore prefix lookup and the publishing of
// reusable blocks; published_keys lists the keys of those reusable blocks.
#ifndef OSCARKV_SERVICES_PREFILL_PREFILL_SERVICE_H_
#define OSCARKV_SERVICES_PREFILL_PREFILL_SERVICE_H_

#include <atomic>

#include "oscarkv/prefill/v1/prefill.grpc.pb.h"
#include "services/prefill/prefill_engine.h"

namespace oscarkv::prefill {

// Thread-safe; `engine` is not owned and must outlive the service.
class PrefillService final : public oscarkv::prefill::v1::PrefillService::Service {
 public:
  explicit PrefillService(PrefillEngine* engine) : engine_(engine) {}
  void SetDraining() { draining_.store(true); }

  grpc::Status Prefill(grpc::ServerContext* ctx, const v1::PrefillRequest* req,
                       v1::PrefillResponse* resp) override;

 private:
  PrefillEngine* engine_;
  std::atomic<bool> draining_{false};
};

}  // namespace oscarkv::prefill

#endif  // OSCARKV_SERVICES_PREFILL_PREFILL_SERVICE_H_

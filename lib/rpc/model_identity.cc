#include "lib/rpc/model_identity.h"

namespace oscarkv::rpc {

void FillModelIdentity(const engine::ServingEngine& engine,
                       oscarkv::common::v1::ModelIdentity* identity) {
  const model::ModelConfig& c = engine.model().config();
  identity->set_model_fingerprint(engine.model_fingerprint());
  identity->set_calib_fingerprint(engine.calibration_fingerprint());
  identity->set_block_tokens(static_cast<uint32_t>(engine.options().block_tokens));
  identity->set_layers(static_cast<uint32_t>(c.num_layers));
  identity->set_kv_heads(static_cast<uint32_t>(c.num_kv_heads));
  identity->set_head_dim(static_cast<uint32_t>(c.head_dim));
}

}  // namespace oscarkv::rpc

// What a worker tells the router about its model (ModelIdentity in its registration): blocks are
// exchangeable only between workers whose identities match.
#ifndef OSCARKV_LIB_RPC_MODEL_IDENTITY_H_
#define OSCARKV_LIB_RPC_MODEL_IDENTITY_H_

#include "lib/engine/serving_engine.h"
#include "oscarkv/common/v1/common.pb.h"

namespace oscarkv::rpc {

// Fingerprints, block size and KV shape of `engine`'s model and codec.
void FillModelIdentity(const engine::ServingEngine& engine,
                       oscarkv::common::v1::ModelIdentity* identity);

}  // namespace oscarkv::rpc

#endif  // OSCARKV_LIB_RPC_MODEL_IDENTITY_H_

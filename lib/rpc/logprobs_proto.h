// engine::TokenLogprobs -> oscarkv.common.v1.TokenLogprobs, as the prefill and decode workers
// send them (the router reads them with the token ids turned into text, router_backend).
#ifndef OSCARKV_LIB_RPC_LOGPROBS_PROTO_H_
#define OSCARKV_LIB_RPC_LOGPROBS_PROTO_H_

#include "lib/engine/logprobs.h"
#include "oscarkv/common/v1/common.pb.h"

namespace oscarkv::rpc {

void ToProto(const engine::TokenLogprobs& in, oscarkv::common::v1::TokenLogprobs* out);

}  // namespace oscarkv::rpc

#endif  // OSCARKV_LIB_RPC_LOGPROBS_PROTO_H_

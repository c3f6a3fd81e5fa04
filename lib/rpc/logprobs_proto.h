// engine::TokenLogprobs <-> oscarkv.common.v1.TokenLogprobs (the prefill and decode workers send
// them, the router reads them).
#ifndef OSCARKV_LIB_RPC_LOGPROBS_PROTO_H_
#define OSCARKV_LIB_RPC_LOGPROBS_PROTO_H_

#include "lib/engine/logprobs.h"
#include "oscarkv/common/v1/common.pb.h"

namespace oscarkv::rpc {

void ToProto(const engine::TokenLogprobs& in, oscarkv::common::v1::TokenLogprobs* out);

// `token` is the id the message belongs to (the proto does not repeat it). Extra entries of the
// longer parallel list are dropped.
engine::TokenLogprobs FromProto(const oscarkv::common::v1::TokenLogprobs& in, int32_t token);

}  // namespace oscarkv::rpc

#endif  // OSCARKV_LIB_RPC_LOGPROBS_PROTO_H_

#include "lib/rpc/logprobs_proto.h"

namespace oscarkv::rpc {

void ToProto(const engine::TokenLogprobs& in, oscarkv::common::v1::TokenLogprobs* out) {
  out->set_logprob(in.logprob);
  out->set_rank(static_cast<uint32_t>(in.rank));
  for (const auto& [id, logprob] : in.top) {
    out->add_top_token_ids(static_cast<uint32_t>(id));
    out->add_top_logprobs(logprob);
  }
}

}  // namespace oscarkv::rpc

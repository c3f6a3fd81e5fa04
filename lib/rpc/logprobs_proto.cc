#include "lib/rpc/logprobs_proto.h"

#include <algorithm>

namespace oscarkv::rpc {

void ToProto(const engine::TokenLogprobs& in, oscarkv::common::v1::TokenLogprobs* out) {
  out->set_logprob(in.logprob);
  for (const auto& [id, logprob] : in.top) {
    out->add_top_token_ids(static_cast<uint32_t>(id));
    out->add_top_logprobs(logprob);
  }
}

engine::TokenLogprobs FromProto(const oscarkv::common::v1::TokenLogprobs& in, int32_t token) {
  engine::TokenLogprobs out;
  out.token = token;
  out.logprob = in.logprob();
  const int n = std::min(in.top_token_ids_size(), in.top_logprobs_size());
  out.top.reserve(n);
  for (int i = 0; i < n; ++i) {
    out.top.emplace_back(static_cast<int32_t>(in.top_token_ids(i)), in.top_logprobs(i));
  }
  return out;
}

}  // namespace oscarkv::rpc

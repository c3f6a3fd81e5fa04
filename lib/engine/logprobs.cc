#include "lib/engine/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace oscarkv::engine {

TokenLogprobs ComputeLogprobs(std::span<const float> logits, int32_t token, int top_n) {
  auto value = [&](size_t i) {
    return std::isfinite(logits[i]) ? static_cast<double>(logits[i]) : -INFINITY;
  };
  double max = -INFINITY;
  for (size_t i = 0; i < logits.size(); ++i) max = std::max(max, value(i));
  double sum = 0;
  if (std::isfinite(max)) {
    for (size_t i = 0; i < logits.size(); ++i) sum += std::exp(value(i) - max);
  }
  // With every logit -inf the distribution is undefined; report -inf everywhere.
  const double log_z = std::isfinite(max) ? max + std::log(sum) : INFINITY;
  auto logprob = [&](size_t i) { return static_cast<float>(value(i) - log_z); };

  TokenLogprobs out;
  out.token = token;
  out.logprob = logprob(static_cast<size_t>(token));
  const size_t n = std::min(logits.size(), static_cast<size_t>(std::max(0, top_n)));
  if (n == 0) return out;
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) {
    return value(a) > value(b) || (value(a) == value(b) && a < b);
  });
  out.top.reserve(n);
  for (size_t i = 0; i < n; ++i) out.top.emplace_back(ids[i], logprob(ids[i]));
  return out;
}

}  // namespace oscarkv::engine

#include "lib/engine/logprobs.h"

#include <algorithm>
#include <cmath>

#include <Eigen/Core>

#include "lib/engine/finite_rows.h"
#include "lib/engine/vector_exp.h"

namespace oscarkv::engine {

namespace {

// Σ exp(x_i − shift) for all-finite x, shift >= max(x): libmvec's exp (vector_exp.h), summed in
// float over blocks of 512 and the blocks in double.
double SumExpShifted(std::span<const float> x, float shift) {
  constexpr size_t kBlock = 512;
  float exps[kBlock];
  double sum = 0;
  for (size_t at = 0; at < x.size(); at += kBlock) {
    const size_t n = std::min(kBlock, x.size() - at);
    ExpShifted(x.subspan(at, n), shift, 1.0f, std::span<float>(exps, n));
    sum += Eigen::Map<const Eigen::ArrayXf>(exps, static_cast<Eigen::Index>(n)).sum();
  }
  return sum;
}

}  // namespace

TokenLogprobs ComputeLogprobs(std::span<const float> logits, int32_t token, int top_n) {
  auto value = [&](size_t i) { return std::isfinite(logits[i]) ? logits[i] : -INFINITY; };
  const Eigen::Map<const Eigen::ArrayXf> all(logits.data(),
                                             static_cast<Eigen::Index>(logits.size()));
  const bool finite = AllFinite(logits);  // then both passes vectorise
  float max = -INFINITY;
  double sum = 0;
  if (finite) {
    max = all.maxCoeff();
    sum = SumExpShifted(logits, max);
  } else {
    for (size_t i = 0; i < logits.size(); ++i) max = std::max(max, value(i));
    if (std::isfinite(max)) {
      for (size_t i = 0; i < logits.size(); ++i) sum += std::exp(value(i) - max);
    }
  }
  // With every logit -inf the distribution is undefined; report -inf everywhere.
  const double log_z = std::isfinite(max) ? max + std::log(sum) : INFINITY;
  auto logprob = [&](size_t i) { return static_cast<float>(value(i) - log_z); };

  TokenLogprobs out;
  out.token = token;
  out.logprob = logprob(static_cast<size_t>(token));
  const float mine = value(static_cast<size_t>(token));
  if (finite) {
    out.rank = 1 + (all > mine).count();
  } else {
    for (size_t i = 0; i < logits.size(); ++i) out.rank += value(i) > mine;
  }
  const size_t n = std::min(logits.size(), static_cast<size_t>(std::max(0, top_n)));
  if (n == 0) return out;
  // The n best by (logit desc, id asc) in one pass: ids arrive ascending, so a logit equal to
  // the n-th best ranks after it, and most logits cost one compare. Finite logits go by blocks
  // of 64, a block whose (vectorised) max cannot enter the list skipped whole.
  std::vector<std::pair<float, int32_t>> best;
  best.reserve(n + 1);
  constexpr size_t kBlock = 64;
  for (size_t b0 = 0; b0 < logits.size(); b0 += kBlock) {
    const size_t b1 = std::min(logits.size(), b0 + kBlock);
    if (finite && best.size() == n &&
        !(all.segment(static_cast<Eigen::Index>(b0), static_cast<Eigen::Index>(b1 - b0))
              .maxCoeff() > best.back().first)) {
      continue;
    }
    for (size_t i = b0; i < b1; ++i) {
      const float v = value(i);
      if (best.size() == n && !(v > best.back().first)) continue;
      auto at = std::find_if(best.begin(), best.end(), [&](const auto& b) { return b.first < v; });
      best.insert(at, {v, static_cast<int32_t>(i)});
      if (best.size() > n) best.pop_back();
    }
  }
  out.top.reserve(n);
  for (const auto& [v, id] : best) out.top.emplace_back(id, logprob(static_cast<size_t>(id)));
  return out;
}

void AppendPromptLogprobs(std::span<const int32_t> prompt, int64_t first,
                          std::span<const float> logits, int64_t vocab, int top_n,
                          std::vector<TokenLogprobs>* out) {
  const int64_t rows = static_cast<int64_t>(logits.size()) / vocab;
  const int64_t scored = std::min<int64_t>(rows, static_cast<int64_t>(prompt.size()) - 1 - first);
  for (int64_t r = 0; r < scored; ++r) {
    out->push_back(ComputeLogprobs(logits.subspan(r * vocab, vocab),
                                   prompt[first + r + 1], top_n));
  }
}

}  // namespace oscarkv::engine

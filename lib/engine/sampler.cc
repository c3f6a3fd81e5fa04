#include "lib/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace oscarkv::engine {

absl::Status SamplingParams::Validate(int vocab_size) const {
  if (!(temperature >= 0.0f && temperature <= 100.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("temperature must be in [0, 100], got ",
                                                   temperature));
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", top_p));
  }
  if (top_k < 0) return absl::InvalidArgumentError("top_k must be >= 0");
  for (const auto& [name, value] :
       {std::pair{"presence_penalty", presence_penalty}, {"frequency_penalty", frequency_penalty}}) {
    if (!(value >= -2.0f && value <= 2.0f)) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be in [-2, 2], got ", value));
    }
  }
  if (min_tokens < 0) return absl::InvalidArgumentError("min_tokens must be >= 0");
  for (const auto& [token, bias] : logit_bias) {
    if (token < 0 || (vocab_size > 0 && token >= vocab_size)) {
      return absl::InvalidArgumentError(absl::StrCat("logit_bias token id ", token,
                                                     " is outside the vocabulary"));
    }
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit_bias of token ", token, " must be in [-100, 100], got ", bias));
    }
  }
  return absl::OkStatus();
}

int32_t Argmax(std::span<const float> logits) {
  int32_t best = 0;
  float best_v = -INFINITY;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float v = std::isfinite(logits[i]) ? logits[i] : -INFINITY;
    if (v > best_v) {
      best_v = v;
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

void Sampler::Observe(int32_t token) {
  ++generated_count_;
  if (penalized()) ++generated_[token];
}

int32_t Sampler::Sample(std::span<const float> logits) {
  const bool ban = generated_count_ < params_.min_tokens && !params_.min_tokens_banned.empty();
  if (!ban && params_.logit_bias.empty() && (!penalized() || generated_.empty())) {
    const int32_t token = SampleAdjusted(logits);
    Observe(token);
    return token;
  }
  adjusted_.assign(logits.begin(), logits.end());
  auto in_vocab = [&](int32_t token) {
    return token >= 0 && static_cast<size_t>(token) < adjusted_.size();
  };
  for (const auto& [token, bias] : params_.logit_bias) {
    if (in_vocab(token)) adjusted_[token] += bias;
  }
  for (const auto& [token, count] : generated_) {
    if (!in_vocab(token)) continue;
    adjusted_[token] -= static_cast<float>(count) * params_.frequency_penalty +
                        params_.presence_penalty;
  }
  if (ban) {
    for (int32_t token : params_.min_tokens_banned) {
      if (in_vocab(token)) adjusted_[token] = -INFINITY;
    }
  }
  const int32_t token = SampleAdjusted(adjusted_);
  Observe(token);
  return token;
}

int32_t Sampler::SampleAdjusted(std::span<const float> logits) {
  if (params_.temperature == 0.0f) return Argmax(logits);
  // Candidates sorted by logit (descending, then id), truncated by top-k.
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  auto value = [&](int32_t i) {
    return std::isfinite(logits[i]) ? static_cast<double>(logits[i]) : -INFINITY;
  };
  size_t keep = ids.size();
  if (params_.top_k > 0) keep = std::min(keep, static_cast<size_t>(params_.top_k));
  std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), [&](int32_t a, int32_t b) {
    return value(a) > value(b) || (value(a) == value(b) && a < b);
  });
  ids.resize(keep);
  // Softmax in float64 at the temperature.
  const double top = value(ids[0]);
  std::vector<double> p(ids.size());
  double sum = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    p[i] = std::exp((value(ids[i]) - top) / params_.temperature);
    sum += p[i];
  }
  // Nucleus: the smallest prefix with mass >= top_p.
  size_t n = ids.size();
  if (params_.top_p < 1.0f) {
    double mass = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      mass += p[i] / sum;
      if (mass >= params_.top_p) {
        n = i + 1;
        break;
      }
    }
  }
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += p[i];
  const double u = std::uniform_real_distribution<double>(0.0, total)(rng_);
  double acc = 0;
  for (size_t i = 0; i < n; ++i) {
    acc += p[i];
    if (u < acc) return ids[i];
  }
  return ids[n - 1];
}

}  // namespace oscarkv::engine

// Token sampling from a logits row: greedy (temperature 0) or temperature sampling with optional
// top-k and top-p (nucleus) filtering, reproducible for a given seed.
#ifndef OSCARKV_LIB_ENGINE_SAMPLER_H_
#define OSCARKV_LIB_ENGINE_SAMPLER_H_

#include <cstdint>
#include <random>
#include <span>

#include "absl/status/status.h"

namespace oscarkv::engine {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy (argmax, lowest id on ties); Default: 0
  float top_p = 1.0f;        // keep the smallest set with mass >= top_p; 1 = off; Default: 1
  int top_k = 0;             // keep the k most likely; 0 = off; Default: 0
  uint64_t seed = 0;         // RNG seed; Default: 0

  // @return kInvalidArgument for temperature < 0 or > 100, top_p outside (0, 1], top_k < 0.
  absl::Status Validate() const;
};

// Not thread-safe: one Sampler per sequence.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

  // Picks a token id from `logits` ([vocab], not modified). Greedy when temperature == 0.
  // Non-finite logits are treated as -inf. `logits` must not be empty.
  int32_t Sample(std::span<const float> logits);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

// Argmax, lowest index on ties (what greedy generation everywhere in oscarkv uses).
int32_t Argmax(std::span<const float> logits);

}  // namespace oscarkv::engine

#endif  // OSCARKV_LIB_ENGINE_SAMPLER_H_

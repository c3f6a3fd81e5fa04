// Token sampling from a logits row: greedy (temperature 0) or temperature sampling with optional
// top-k and top-p (nucleus) filtering, reproducible for a given seed: the draw for a sequence's
// k-th generated token depends only on (seed, k), so a generation split across processes (the
// first token sampled by the prefill, the rest by the decode worker, a resume after a cut) draws
// what one process would have. OpenAI's logit bias, and its presence and frequency penalties
// (which lower the logits of tokens already generated), apply before either.
#ifndef OSCARKV_LIB_ENGINE_SAMPLER_H_
#define OSCARKV_LIB_ENGINE_SAMPLER_H_

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"

namespace oscarkv::engine {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy (argmax, lowest id on ties); Default: 0
  float top_p = 1.0f;        // keep the smallest set with mass >= top_p; 1 = off; Default: 1
  int top_k = 0;             // keep the k most likely; 0 = off; Default: 0
  uint64_t seed = 0;         // keys the draws (with the token's index); Default: 0
  // OpenAI's penalties over the tokens generated so far: a token seen c times has its logit
  // lowered by c * frequency_penalty + (c > 0) * presence_penalty. 0 = off; Default: 0
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // OpenAI's logit_bias: added to the logits of these token ids (each bias in [-100, 100]; -100
  // in effect bans the token, 100 all but forces it). Default: none
  std::vector<std::pair<int32_t, float>> logit_bias;
  // vLLM's min_tokens: `min_tokens_banned` (e.g. end-of-generation ids) cannot be picked while
  // fewer than `min_tokens` tokens have been generated (Observe counts too). Default: 0
  int min_tokens = 0;
  std::vector<int32_t> min_tokens_banned;

  // @return kInvalidArgument for temperature < 0 or > 100, top_p outside (0, 1], top_k < 0,
  //         a penalty outside [-2, 2], a logit bias outside [-100, 100] or on an id outside
  //         [0, vocab_size) (vocab_size 0: the upper end unchecked; Sampler ignores such ids),
  //         min_tokens < 0.
  absl::Status Validate(int vocab_size = 0) const;
};

// Not thread-safe: one Sampler per sequence (it counts the sequence's generated tokens).
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params) : params_(params) {}

  // Picks a token id from `logits` ([vocab], not modified), after bias and penalties. Greedy when
  // temperature == 0. Non-finite logits are treated as -inf. `logits` must not be empty. The
  // picked token counts as generated for later penalties.
  int32_t Sample(std::span<const float> logits);

  // Counts `token` as generated without sampling it (one picked elsewhere, e.g. a completion's
  // first token, sampled by the prefill worker); the next Sample uses the next token's draw.
  void Observe(int32_t token);

  // Whether the next Sample is the argmax of the raw logits (greedy, no bias, penalty or ban in
  // force): then a token picked as Argmax elsewhere (e.g. on a GPU) and Observe'd is the same.
  bool IsPlainGreedy() const {
    return params_.temperature == 0.0f && params_.logit_bias.empty() && !penalized() &&
           !(generated_count_ < params_.min_tokens && !params_.min_tokens_banned.empty());
  }

 private:
  bool penalized() const {
    return params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f;
  }
  int32_t SampleAdjusted(std::span<const float> logits);  // logits already biased, penalized
  // Draws from `weight` (softmax numerators, unfiltered) by ascending id; `fallback` if all 0.
  int32_t DrawInIdOrder(std::span<const float> weight, int32_t fallback);
  // Uniform in [0, total) for the token now being sampled (index generated_count_).
  double Draw(double total) const;

  SamplingParams params_;
  std::unordered_map<int32_t, int> generated_;  // token -> times generated; only when penalized
  int generated_count_ = 0;                     // tokens generated (sampled or observed)
  std::vector<float> adjusted_;                 // scratch: the logits after bias and penalties
};

// Argmax, lowest index on ties (what greedy generation everywhere in oscarkv uses).
int32_t Argmax(std::span<const float> logits);

}  // namespace oscarkv::engine

#endif  // OSCARKV_LIB_ENGINE_SAMPLER_H_

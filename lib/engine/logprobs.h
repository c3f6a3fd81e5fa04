// Log-probabilities of a generated token under the model: the log-softmax of its logits row, at
// the token and at the most likely alternatives (what OpenAI's `logprobs` / `top_logprobs`
// return). The raw model distribution, before temperature, penalties and top-k / top-p.
#ifndef OSCARKV_LIB_ENGINE_LOGPROBS_H_
#define OSCARKV_LIB_ENGINE_LOGPROBS_H_

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace oscarkv::engine {

// The most alternatives a request may ask for (OpenAI's top_logprobs limit).
inline constexpr int kMaxTopLogprobs = 20;

struct TokenLogprobs {
  int32_t token = 0;
  float logprob = 0.0f;                           // log p(token), <= 0; -inf for a -inf logit
  int64_t rank = 1;  // 1 + the tokens with a larger logit (vLLM's rank; ties share the rank)
  std::vector<std::pair<int32_t, float>> top;     // most likely first, lowest id on ties
};

// `logits` non-empty, 0 <= token < logits.size(), 0 <= top_n; top_n is capped at the vocabulary.
// Non-finite logits count as -inf (as in Sampler). The normaliser sums float exps in float64.
TokenLogprobs ComputeLogprobs(std::span<const float> logits, int32_t token, int top_n);

// The logprobs of a prompt's own tokens, from one chunk of prefill logits (ServingEngine's
// ChunkLogitsSink): row r of `logits` ([rows, vocab]) follows prompt position first + r and
// scores prompt[first + r + 1]; the row after the prompt's last token scores nothing. Appends to
// `out` in position order, so chunks given in order leave out[i] = the logprobs of prompt[i + 1].
// Requires logits.size() a multiple of vocab and first + rows <= prompt.size().
void AppendPromptLogprobs(std::span<const int32_t> prompt, int64_t first,
                          std::span<const float> logits, int64_t vocab, int top_n,
                          std::vector<TokenLogprobs>* out);

}  // namespace oscarkv::engine

#endif  // OSCARKV_LIB_ENGINE_LOGPROBS_H_

// Needle-in-a-haystack prompts (quant.md E), built in one place so that `oscarkv eval --niah`
// (CPU, lib/eval/harness.cc) and `gpu_e2e_bench --mode niah` (GPU) test the same prompts for the
// same texts, contexts, depths, trials and seed.
//
// One case: a passkey sentence ("The secret pass key is 12345. Remember it. ...") planted in real
// text at a depth; its start lies in [64, T - 256 - |needle|] of the full sequence, so never in
// the BF16 sink (first 64 tokens) nor in the BF16 recent window (last 256). The prompt is
// prefilled; the question and then the passkey tokens are teacher-forced as decode steps. The
// full sequence (prompt + question + answer) is exactly the context length T.
#ifndef OSCARKV_LIB_EVAL_NIAH_H_
#define OSCARKV_LIB_EVAL_NIAH_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/model/tokenizer.h"

namespace oscarkv::eval {

// The default seed of the whole evaluation (EvalConfig::seed); NIAH draws from seed + 7.
inline constexpr uint64_t kDefaultEvalSeed = 20261129;

struct NiahOptions {
  std::vector<int> contexts = {2048, 4096, 8192};  // tokens per case; Default: 2k, 4k, 8k
  std::vector<int> depths = {10, 30, 50, 70, 90};  // needle depth, percent; Default: these
  int trials = 1;                                  // haystacks per (context, depth); Default: 1
  uint64_t seed = kDefaultEvalSeed;                // Default: kDefaultEvalSeed
};

struct NiahCase {
  int context = 0;  // prompt + question + answer tokens
  int depth_percent = 0;
  int trial = 0;
  int needle_position = 0;      // index in `prompt` of the needle's first token
  std::string passkey;          // five digits
  int text_index = 0;           // the haystack comes from texts[text_index] ...
  int64_t text_offset = 0;      // ... starting at this token
  std::vector<int32_t> prompt;  // haystack with the needle (prefilled)
  std::vector<int32_t> answer;  // tokens of " <passkey>" (scored)
};

struct NiahSet {
  std::vector<int32_t> question;  // asked after every prompt
  std::vector<NiahCase> cases;    // contexts x depths x trials, in that nesting order
};

// Builds every case from tokenized `texts` (tokenize with add_special = false and
// parse_special = false, as LoadText in harness.cc does). Deterministic in (texts, options):
// the passkey and the haystack offset are drawn in case order from one std::mt19937_64 seeded
// with options.seed + 7; the haystack text is texts[(trial + depth / 10) % texts.size()].
// @return kInvalidArgument for no texts, no contexts or depths, trials < 1, a depth outside
//   [0, 100], a context too short for the needle to avoid sink and recent window, or a text
//   shorter than the haystack + 512 tokens.
absl::StatusOr<NiahSet> BuildNiahCases(const model::Tokenizer& tokenizer,
                                       const std::vector<std::span<const int32_t>>& texts,
                                       const NiahOptions& options);

// Tokens fed as decode steps after `c.prompt`: the question, then all but the last answer
// token. Step k's logits predict the token after forced[k]; steps k >= |question| - 1 predict
// c.answer[k - (|question| - 1)].
std::vector<int32_t> NiahForcedTokens(const NiahSet& set, const NiahCase& c);

}  // namespace oscarkv::eval

#endif  // OSCARKV_LIB_EVAL_NIAH_H_

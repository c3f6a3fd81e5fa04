#include "lib/eval/niah.h"

#include <cmath>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace oscarkv::eval {

absl::StatusOr<NiahSet> BuildNiahCases(const model::Tokenizer& tokenizer,
                                       const std::vector<std::span<const int32_t>>& texts,
                                       const NiahOptions& options) {
  if (texts.empty()) return absl::InvalidArgumentError("NIAH needs at least one text");
  if (options.contexts.empty() || options.depths.empty() || options.trials < 1) {
    return absl::InvalidArgumentError("NIAH needs contexts, depths and trials >= 1");
  }
  for (int depth : options.depths) {
    if (depth < 0 || depth > 100) {
      return absl::InvalidArgumentError(absl::StrCat("NIAH depth ", depth, " not in [0, 100]"));
    }
  }
  NiahSet set;
  set.question =
      tokenizer.Encode("\n\nWhat is the secret pass key? The secret pass key is", false, false);
  // The draw order (passkey, then offset, case by case) is the CPU harness's since its first
  // NIAH results; changing it changes every prompt.
  std::mt19937_64 rng(options.seed + 7);
  for (int len : options.contexts) {
    for (int depth : options.depths) {
      for (int trial = 0; trial < options.trials; ++trial) {
        NiahCase c;
        c.context = len;
        c.depth_percent = depth;
        c.trial = trial;
        c.passkey = std::to_string(10000 + static_cast<int>(rng() % 90000));
        const std::vector<int32_t> needle = tokenizer.Encode(
            absl::StrCat(" The secret pass key is ", c.passkey,
                         ". Remember it. The secret pass key is ", c.passkey, ". "),
            false, false);
        c.answer = tokenizer.Encode(absl::StrCat(" ", c.passkey), false, false);
        const int qa = static_cast<int>(set.question.size() + c.answer.size());
        const int hay_len = len - qa - static_cast<int>(needle.size());
        // Needle start in [64, len - 256 - |needle|] (never in the sink or the recent window).
        const int lo = 64, hi = len - 256 - static_cast<int>(needle.size());
        if (hi <= lo || hay_len <= 0) {
          return absl::InvalidArgumentError(absl::StrCat("NIAH context ", len, " too short"));
        }
        c.needle_position = lo + static_cast<int>(std::lround((hi - lo) * depth / 100.0));
        c.text_index = static_cast<int>((trial + depth / 10) % texts.size());
        const std::span<const int32_t> text = texts[c.text_index];
        if (text.size() < static_cast<size_t>(hay_len) + 512) {
          return absl::InvalidArgumentError(
              absl::StrCat("text ", c.text_index, " too short for NIAH at context ", len));
        }
        const size_t start = 256 + rng() % (text.size() - hay_len - 256);
        c.text_offset = static_cast<int64_t>(start);
        c.prompt.reserve(static_cast<size_t>(hay_len) + needle.size());
        c.prompt.assign(text.begin() + start, text.begin() + start + c.needle_position);
        c.prompt.insert(c.prompt.end(), needle.begin(), needle.end());
        c.prompt.insert(c.prompt.end(), text.begin() + start + c.needle_position,
                        text.begin() + start + hay_len);
        set.cases.push_back(std::move(c));
      }
    }
  }
  return set;
}

std::vector<int32_t> NiahForcedTokens(const NiahSet& set, const NiahCase& c) {
  std::vector<int32_t> forced = set.question;
  if (!c.answer.empty()) forced.insert(forced.end(), c.answer.begin(), c.answer.end() - 1);
  return forced;
}

}  // namespace oscarkv::eval

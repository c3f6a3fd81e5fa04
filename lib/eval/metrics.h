// Metric math of the quality evaluation (quant.md E.2): next-token log-probabilities, KL between
// two next-token distributions, and percentile-bootstrap confidence intervals over windows.
// Pure functions, float64 accumulation, thread-compatible.
#ifndef OSCARKV_LIB_EVAL_METRICS_H_
#define OSCARKV_LIB_EVAL_METRICS_H_

#include <cstdint>
#include <span>
#include <vector>

namespace oscarkv::eval {

// log_softmax of one row of logits, in float64: out[i] = l[i] - logsumexp(l).
void LogSoftmax(std::span<const float> logits, std::vector<double>* out);

// KL(p || q) = sum_i p_i (log p_i - log q_i) for two log-probability rows of equal size.
// Exactly 0 when the rows are equal; >= 0 up to rounding.
double KlFromLogProbs(std::span<const double> log_p, std::span<const double> log_q);

// Index of the largest entry (first on ties).
int ArgMax(std::span<const double> row);
int ArgMax(std::span<const float> row);

// Per-position comparison of a codec's next-token distribution with the reference's, both given
// as logits rows, and the observed next token.
struct PositionScore {
  double nll_ref = 0;    // -log p_ref(next)
  double nll_codec = 0;  // -log p_codec(next)
  double kl = 0;         // KL(p_ref || p_codec)
  bool top1_agree = false;
};
PositionScore ScorePosition(std::span<const float> ref_logits, std::span<const float> codec_logits,
                            int32_t next_token);

// A mean with its 95% percentile-bootstrap interval.
struct Estimate {
  double mean = 0;
  double lo = 0;  // 2.5th percentile of the bootstrap means
  double hi = 0;  // 97.5th percentile
  int n = 0;      // samples (windows)
};

// Mean of `samples` and the percentile bootstrap of the mean: `resamples` resamples with
// replacement from a std::mt19937_64 seeded with `seed` (deterministic). With one sample (or
// all equal) lo == hi == mean. Empty input gives n = 0 and NaNs.
Estimate BootstrapMean(std::span<const double> samples, int resamples = 2000,
                       uint64_t seed = 20261129);

}  // namespace oscarkv::eval

#endif  // OSCARKV_LIB_EVAL_METRICS_H_

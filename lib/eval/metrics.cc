#include "lib/eval/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "lib/base/log.h"

namespace oscarkv::eval {

void LogSoftmax(std::span<const float> logits, std::vector<double>* out) {
  out->resize(logits.size());
  double mx = -std::numeric_limits<double>::infinity();
  for (float l : logits) mx = std::max(mx, static_cast<double>(l));
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - mx);
  const double lse = mx + std::log(sum);
  for (size_t i = 0; i < logits.size(); ++i) (*out)[i] = static_cast<double>(logits[i]) - lse;
}

double KlFromLogProbs(std::span<const double> log_p, std::span<const double> log_q) {
  CHECK(log_p.size() == log_q.size());
  double kl = 0;
  for (size_t i = 0; i < log_p.size(); ++i) {
    if (log_p[i] == log_q[i]) continue;  // exact zero for identical rows
    const double p = std::exp(log_p[i]);
    if (p == 0) continue;
    kl += p * (log_p[i] - log_q[i]);
  }
  return kl;
}

int ArgMax(std::span<const double> row) {
  return static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin());
}
int ArgMax(std::span<const float> row) {
  return static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin());
}

PositionScore ScorePosition(std::span<const float> ref_logits, std::span<const float> codec_logits,
                            int32_t next_token) {
  thread_local std::vector<double> lp, lq;
  LogSoftmax(ref_logits, &lp);
  LogSoftmax(codec_logits, &lq);
  PositionScore s;
  s.nll_ref = -lp[next_token];
  s.nll_codec = -lq[next_token];
  s.kl = KlFromLogProbs(lp, lq);
  s.top1_agree = ArgMax(ref_logits) == ArgMax(codec_logits);
  return s;
}

Estimate BootstrapMean(std::span<const double> samples, int resamples, uint64_t seed) {
  Estimate e;
  e.n = static_cast<int>(samples.size());
  if (samples.empty()) {
    e.mean = e.lo = e.hi = std::numeric_limits<double>::quiet_NaN();
    return e;
  }
  double sum = 0;
  for (double x : samples) sum += x;
  e.mean = sum / e.n;
  if (e.n == 1 || resamples <= 0) {
    e.lo = e.hi = e.mean;
    return e;
  }
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> pick(0, e.n - 1);
  std::vector<double> means(resamples);
  for (int r = 0; r < resamples; ++r) {
    double s = 0;
    for (int i = 0; i < e.n; ++i) s += samples[pick(rng)];
    means[r] = s / e.n;
  }
  std::sort(means.begin(), means.end());
  auto at = [&](double q) {
    const double pos = q * (resamples - 1);
    const int i = static_cast<int>(std::floor(pos));
    const int j = std::min(i + 1, resamples - 1);
    return means[i] + (pos - i) * (means[j] - means[i]);
  };
  e.lo = std::min(at(0.025), e.mean);
  e.hi = std::max(at(0.975), e.mean);
  return e;
}

}  // namespace oscarkv::eval

// WindowedRate: the rate of a growing count over the last few seconds, for a gauge.
//
// A rate computed between two scrapes depends on who scrapes: with two Prometheus servers (an HA
// pair) or a person reading /metrics, each scrape saw only the tokens since the previous one,
// often 0 while decoding. Samples taken on the service's own clock do not.
#ifndef OSCARKV_LIB_METRICS_WINDOWED_RATE_H_
#define OSCARKV_LIB_METRICS_WINDOWED_RATE_H_

#include <cstdint>
#include <deque>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace oscarkv::metrics {

class WindowedRate {
 public:
  explicit WindowedRate(absl::Duration window) : window_(window) {}

  // Records the count at `now` (called periodically, e.g. every second; times non-decreasing).
  void Sample(uint64_t count, absl::Time now);
  // Growth per second between the oldest sample within the window and the newest; 0 before
  // two samples.
  double PerSecond() const;

 private:
  const absl::Duration window_;
  mutable absl::Mutex mu_;
  std::deque<std::pair<absl::Time, uint64_t>> samples_ ABSL_GUARDED_BY(mu_);
};

}  // namespace oscarkv::metrics

#endif  // OSCARKV_LIB_METRICS_WINDOWED_RATE_H_

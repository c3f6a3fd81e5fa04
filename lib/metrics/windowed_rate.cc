#include "lib/metrics/windowed_rate.h"

namespace oscarkv::metrics {

void WindowedRate::Sample(uint64_t count, absl::Time now) {
  absl::MutexLock lock(&mu_);
  samples_.emplace_back(now, count);
  // Keep one sample at or before the window's start, so the rate spans the whole window.
  while (samples_.size() > 2 && now - samples_[1].first >= window_) samples_.pop_front();
}

double WindowedRate::PerSecond() const {
  absl::MutexLock lock(&mu_);
  if (samples_.size() < 2) return 0;
  const auto& [t0, c0] = samples_.front();
  const auto& [t1, c1] = samples_.back();
  const double seconds = absl::ToDoubleSeconds(t1 - t0);
  if (seconds <= 0 || c1 < c0) return 0;
  return static_cast<double>(c1 - c0) / seconds;
}

}  // namespace oscarkv::metrics

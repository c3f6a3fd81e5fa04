// A manually advanced clock for TTL and lease tests. Thread-safe. Header-only.
#ifndef OSCARKV_TESTS_TESTING_FAKE_CLOCK_H_
#define OSCARKV_TESTS_TESTING_FAKE_CLOCK_H_

#include <mutex>

#include "services/kvstore/clock.h"

namespace oscarkv::testing {

class FakeClock final : public kvstore::Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'000'000)) : now_(start) {}
  absl::Time Now() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ += d;
  }

 private:
  mutable std::mutex mu_;
  absl::Time now_;
};

}  // namespace oscarkv::testing

#endif  // OSCARKV_TESTS_TESTING_FAKE_CLOCK_H_

// Time source for TTLs and leases, injectable so tests control expiry (tests/testing/fake_clock.h).
#ifndef OSCARKV_SERVICES_KVSTORE_CLOCK_H_
#define OSCARKV_SERVICES_KVSTORE_CLOCK_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace oscarkv::kvstore {

class Clock {
 public:
  virtual ~Clock() = default;
  //! The current time. Thread-safe.
  virtual absl::Time Now() const = 0;
};

// The wall clock (absl::Now()).
class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  // A process-wide instance (never destroyed).
  static Clock* Get() {
    static RealClock* clock = new RealClock();
    return clock;
  }
};

}  // namespace oscarkv::kvstore

#endif  // OSCARKV_SERVICES_KVSTORE_CLOCK_H_

// Time as a dependency: components take a Clock so that tests can drive heartbeat timeouts and
// deadlines without sleeping.
#ifndef CROUPIER_SRC_COMMON_CLOCK_H_
#define CROUPIER_SRC_COMMON_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace croupier {

// Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  virtual void SleepFor(absl::Duration d) const = 0;
  // The real clock.
  static Clock* Real();
};

// A clock that moves only when told. Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::UnixEpoch() + absl::Hours(24)) : now_(start) {}
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  // Sleeping on a fake clock advances it, so code under test that sleeps does not hang.
  void SleepFor(absl::Duration d) const override { Advance(d); }
  void Advance(absl::Duration d) const {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  mutable absl::Time now_ ABSL_GUARDED_BY(mu_);
};

inline Clock* Clock::Real() {
  class RealClock final : public Clock {
   public:
    absl::Time Now() const override { return absl::Now(); }
    void SleepFor(absl::Duration d) const override { absl::SleepFor(d); }
  };
  static RealClock* clock = new RealClock();
  return clock;
}

}  // namespace croupier

#endif  // CROUPIER_SRC_COMMON_CLOCK_H_

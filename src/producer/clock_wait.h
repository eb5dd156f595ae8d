// Waiting on a mutex condition until a deadline measured by an injected Clock.
#ifndef CROUPIER_SRC_PRODUCER_CLOCK_WAIT_H_
#define CROUPIER_SRC_PRODUCER_CLOCK_WAIT_H_

#include <algorithm>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/common/clock.h"

namespace croupier::producer_internal {

// How often a waiter rechecks an injected (non-real) clock: such a clock moves without waking
// anyone, so the wait is cut into slices of real time.
inline constexpr absl::Duration kFakeClockSlice = absl::Milliseconds(2);

// Waits, holding `mu`, until `cond` holds or `clock` reaches `deadline`; returns whether `cond`
// holds. With the real clock this is one AwaitWithDeadline; with any other clock it polls the
// clock every kFakeClockSlice of real time.
inline bool AwaitUntil(absl::Mutex& mu, const absl::Condition& cond, const Clock& clock,
                       absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  if (&clock == Clock::Real()) return mu.AwaitWithDeadline(cond, deadline);
  while (true) {
    if (cond.Eval()) return true;
    const absl::Time now = clock.Now();
    if (now >= deadline) return false;
    if (mu.AwaitWithTimeout(cond, std::min(deadline - now, kFakeClockSlice))) return true;
  }
}

}  // namespace croupier::producer_internal

#endif  // CROUPIER_SRC_PRODUCER_CLOCK_WAIT_H_

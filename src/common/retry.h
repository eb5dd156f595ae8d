// The one retry loop of the codebase: call, and on a retryable error wait with exponential
// backoff and jitter, until success, a non-retryable error, or the deadline.
#ifndef CROUPIER_SRC_COMMON_RETRY_H_
#define CROUPIER_SRC_COMMON_RETRY_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "src/common/clock.h"

namespace croupier {

struct RetryOptions {
  absl::Duration initial_backoff = absl::Milliseconds(20);
  absl::Duration max_backoff = absl::Seconds(1);
  double multiplier = 2.0;
  // Which errors are worth another try. Default: UNAVAILABLE (the callee says retry) and
  // DEADLINE_EXCEEDED of a single attempt.
  std::function<bool(const absl::Status&)> retryable = nullptr;
  Clock* clock = nullptr;  // nullptr: Clock::Real()
  // Called when the retries have gone on for `say_after` without success, then every
  // `say_every`: how long so far, and the last error. A process that waits says what for.
  std::function<void(absl::Duration waited, const absl::Status& last)> still_waiting = nullptr;
  absl::Duration say_after = absl::Seconds(2);
  absl::Duration say_every = absl::Seconds(10);
};

// Calls fn until it returns OK or a non-retryable error, or until `deadline`. On giving up at the
// deadline it returns DEADLINE_EXCEEDED whose message says what was being done (`what`), how many
// attempts were made, and the last error. `fn` receives the attempt number, from 0.
absl::Status RetryWithBackoff(absl::string_view what, absl::Time deadline,
                              const std::function<absl::Status(int attempt)>& fn,
                              const RetryOptions& options = {});

}  // namespace croupier

#endif  // CROUPIER_SRC_COMMON_RETRY_H_

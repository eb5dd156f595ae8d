#include "src/common/retry.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"

namespace croupier {

absl::Status RetryWithBackoff(absl::string_view what, absl::Time deadline,
                              const std::function<absl::Status(int attempt)>& fn,
                              const RetryOptions& options) {
  Clock* clock = options.clock ? options.clock : Clock::Real();
  auto retryable = options.retryable ? options.retryable : [](const absl::Status& s) {
    return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
  };
  thread_local std::minstd_rand rng(std::random_device{}());
  absl::Duration backoff = options.initial_backoff;
  absl::Status last;
  const absl::Time start = clock->Now();
  absl::Time say_at = start + options.say_after;
  for (int attempt = 0;; ++attempt) {
    last = fn(attempt);
    if (last.ok() || !retryable(last)) return last;
    const absl::Time now = clock->Now();
    if (options.still_waiting && now >= say_at && now < deadline) {
      options.still_waiting(now - start, last);
      say_at = now + options.say_every;
    }
    absl::Duration left = deadline - now;
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat(what, ": gave up after ", attempt + 1,
                                                      " attempts; last error: ",
                                                      last.ToString()));
    }
    // Full jitter in [backoff/2, backoff], so that many clients do not retry in step.
    double jitter = 0.5 + 0.5 * std::uniform_real_distribution<double>(0, 1)(rng);
    clock->SleepFor(std::min(left, backoff * jitter));
    backoff = std::min(options.max_backoff, backoff * options.multiplier);
  }
}

}  // namespace croupier

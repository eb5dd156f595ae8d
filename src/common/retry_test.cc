#include "src/common/retry.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;

TEST(RetryTest, RetriesUnavailableUntilSuccess) {
  FakeClock clock;
  RetryOptions options;
  options.clock = &clock;
  int calls = 0;
  absl::Status s = RetryWithBackoff(
      "connecting", clock.Now() + absl::Seconds(10),
      [&](int attempt) {
        EXPECT_EQ(attempt, calls);
        return ++calls < 4 ? absl::UnavailableError("not yet") : absl::OkStatus();
      },
      options);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(calls, 4);
}

TEST(RetryTest, StopsAtANonRetryableError) {
  FakeClock clock;
  RetryOptions options;
  options.clock = &clock;
  int calls = 0;
  absl::Status s = RetryWithBackoff(
      "x", clock.Now() + absl::Seconds(10),
      [&](int) {
        ++calls;
        return absl::UnauthenticatedError("wrong token");
      },
      options);
  EXPECT_TRUE(absl::IsUnauthenticated(s));
  EXPECT_EQ(calls, 1);
}

TEST(RetryTest, GivesUpAtTheDeadlineNamingWhatAndTheLastError) {
  FakeClock clock;
  RetryOptions options;
  options.clock = &clock;
  absl::Time start = clock.Now();
  absl::Status s = RetryWithBackoff(
      "connecting to dispatcher 127.0.0.1:1", start + absl::Seconds(5),
      [&](int) { return absl::UnavailableError("connection refused"); }, options);
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("connecting to dispatcher 127.0.0.1:1: gave up after"));
  EXPECT_THAT(s.message(), HasSubstr("connection refused"));
  EXPECT_GE(clock.Now() - start, absl::Seconds(5));
  EXPECT_LT(clock.Now() - start, absl::Seconds(7));  // backoff is capped at 1 s
}

}  // namespace
}  // namespace croupier

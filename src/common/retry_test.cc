#include "src/common/retry.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;

// Retries on a fake clock: the backoff sleeps advance it at once.
class RetryTest : public ::testing::Test {
 protected:
  RetryTest() { options_.clock = &clock_; }

  FakeClock clock_;
  RetryOptions options_;
};

TEST_F(RetryTest, RetriesUnavailableUntilSuccess) {
  int calls = 0;
  absl::Status s = RetryWithBackoff(
      "connecting", clock_.Now() + absl::Seconds(10),
      [&](int attempt) {
        EXPECT_EQ(attempt, calls);
        return ++calls < 4 ? absl::UnavailableError("not yet") : absl::OkStatus();
      },
      options_);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(calls, 4);
}

TEST_F(RetryTest, StopsAtANonRetryableError) {
  int calls = 0;
  absl::Status s = RetryWithBackoff(
      "x", clock_.Now() + absl::Seconds(10),
      [&](int) {
        ++calls;
        return absl::UnauthenticatedError("wrong token");
      },
      options_);
  EXPECT_TRUE(absl::IsUnauthenticated(s));
  EXPECT_EQ(calls, 1);
}

TEST_F(RetryTest, GivesUpAtTheDeadlineNamingWhatAndTheLastError) {
  absl::Time start = clock_.Now();
  absl::Status s = RetryWithBackoff(
      "connecting to dispatcher 127.0.0.1:1", start + absl::Seconds(5),
      [&](int) { return absl::UnavailableError("connection refused"); }, options_);
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("connecting to dispatcher 127.0.0.1:1: gave up after"));
  EXPECT_THAT(s.message(), HasSubstr("connection refused"));
  EXPECT_GE(clock_.Now() - start, absl::Seconds(5));
  EXPECT_LT(clock_.Now() - start, absl::Seconds(7));  // backoff is capped at 1 s
}

}  // namespace
}  // namespace croupier

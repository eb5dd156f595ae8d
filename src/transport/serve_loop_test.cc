// RefusalLog: the first refusals of a kind are logged one by one, the rest summed up per interval.
#include "src/transport/serve_loop.h"

#include <string>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(RefusalLogTest, LogsAFewOfEachKindThenOneSummaryPerInterval) {
  absl::Time now = absl::FromUnixSeconds(1000);
  RefusalLog log("data server h:1", [&] { return now; });
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 1000; ++i) log.Note("10.0.0.7", "client 10.0.0.7:5", "wrong auth token");
  for (int i = 0; i < 2; ++i) log.Note("10.0.0.8", "client 10.0.0.8:6", "wrong auth token");
  for (int i = 0; i < 5; ++i) log.Note("10.0.0.7", "client 10.0.0.7:5", "no auth token");
  now += absl::Seconds(9);
  log.Flush();  // the interval has not ended: nothing summed up yet
  std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(Count(out, "refuses client 10.0.0.7:5: wrong auth token"), 3u) << out;
  EXPECT_EQ(Count(out, "refuses client 10.0.0.8:6: wrong auth token"), 2u) << out;
  EXPECT_EQ(Count(out, "refuses client 10.0.0.7:5: no auth token"), 3u) << out;
  EXPECT_THAT(out, HasSubstr("are only counted"));
  EXPECT_THAT(out, Not(HasSubstr("more connections")));

  ::testing::internal::CaptureStderr();
  now += absl::Seconds(1);
  log.Flush();
  log.Note("10.0.0.7", "client 10.0.0.7:5", "wrong auth token");  // a new interval
  out = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(out, HasSubstr("data server h:1 refused 997 more connections from 10.0.0.7 in the "
                             "last 10s: wrong auth token"));
  EXPECT_THAT(out, HasSubstr("refused 2 more connections from 10.0.0.7 in the last 10s: no auth "
                             "token"));
  EXPECT_THAT(out, Not(HasSubstr("more connections from 10.0.0.8")));  // none were held back
  EXPECT_EQ(Count(out, "refuses client 10.0.0.7:5: wrong auth token"), 1u) << out;
}

}  // namespace
}  // namespace croupier

#include "src/common/logging.h"

#include <fcntl.h>
#include <unistd.h>

#include <csignal>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace croupier {
namespace {

using ::testing::MatchesRegex;

TEST(LoggingTest, ParsesLevels) {
  EXPECT_EQ(ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_EQ(ParseLogLevel("info"), LogLevel::kInfo);
  EXPECT_EQ(ParseLogLevel("warn"), LogLevel::kWarning);
  EXPECT_EQ(ParseLogLevel("warning"), LogLevel::kWarning);
  EXPECT_EQ(ParseLogLevel("error"), LogLevel::kError);
  EXPECT_EQ(ParseLogLevel("loud"), std::nullopt);
}

TEST(LoggingTest, OneLinePerEventAndLevelsFilter) {
  const LogLevel saved = MinLogLevel();
  SetMinLogLevel(LogLevel::kWarning);
  ::testing::internal::CaptureStderr();
  Log(LogLevel::kInfo, "producer", "producer 3: dropped");
  Log(LogLevel::kWarning, "producer", "producer 3: first line\nsecond line\n");
  const std::string out = ::testing::internal::GetCapturedStderr();
  SetMinLogLevel(saved);
  EXPECT_THAT(out, MatchesRegex("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z W \\[producer\\] producer 3: "
                                "first line\\\\nsecond line\n"));
}

// With a log fd, the events go there (the Python module's pipe), and to stderr again once the fd
// fails (here: its reading end is closed) or is unset.
TEST(LoggingTest, EventsGoToTheLogFdAndBackToStderr) {
  ::signal(SIGPIPE, SIG_IGN);  // as Python sets it: a closed pipe is an error, not a death
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_NONBLOCK), 0);
  SetLogFd(fds[1]);
  ::testing::internal::CaptureStderr();
  Log(LogLevel::kWarning, "consumer", "to the pipe");
  char buffer[256] = {};
  const ssize_t n = ::read(fds[0], buffer, sizeof(buffer) - 1);
  ::close(fds[0]);
  Log(LogLevel::kWarning, "consumer", "reader gone");  // EPIPE: SIGPIPE is ignored, as in Python
  SetLogFd(-1);
  Log(LogLevel::kWarning, "consumer", "unset");
  const std::string err = ::testing::internal::GetCapturedStderr();
  ::close(fds[1]);
  ASSERT_GT(n, 0);
  EXPECT_THAT(std::string(buffer, n), ::testing::EndsWith(" W [consumer] to the pipe\n"));
  EXPECT_THAT(err, ::testing::HasSubstr("[consumer] reader gone"));
  EXPECT_THAT(err, ::testing::HasSubstr("[consumer] unset"));
  EXPECT_THAT(err, ::testing::Not(::testing::HasSubstr("to the pipe")));
}

}  // namespace
}  // namespace croupier

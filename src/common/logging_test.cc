#include "src/common/logging.h"

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

}  // namespace
}  // namespace croupier

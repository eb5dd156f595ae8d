#include "src/common/logging.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace croupier {
namespace {

LogLevel LevelFromEnv() {
  const char* v = std::getenv("CROUPIER_LOG_LEVEL");
  if (v == nullptr) return LogLevel::kInfo;
  std::string s(v);
  if (s == "debug") return LogLevel::kDebug;
  if (s == "warning") return LogLevel::kWarning;
  if (s == "error") return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<int>& MinLevel() {
  static std::atomic<int> level{static_cast<int>(LevelFromEnv())};
  return level;
}

}  // namespace

void SetMinLogLevel(LogLevel level) { MinLevel().store(static_cast<int>(level)); }
LogLevel MinLogLevel() { return static_cast<LogLevel>(MinLevel().load()); }

void Log(LogLevel level, absl::string_view component, absl::string_view message) {
  if (static_cast<int>(level) < MinLevel().load(std::memory_order_relaxed)) return;
  static constexpr char kLetters[] = {'D', 'I', 'W', 'E'};
  std::string line = absl::StrCat(
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()), " ",
      std::string(1, kLetters[static_cast<int>(level)]), " [", component, "] ", message, "\n");
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace croupier

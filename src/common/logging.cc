#include "src/common/logging.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace croupier {
namespace {

LogLevel LevelFromEnv() {
  const char* v = std::getenv("CROUPIER_LOG_LEVEL");
  if (v == nullptr) return LogLevel::kInfo;
  return ParseLogLevel(v).value_or(LogLevel::kInfo);
}

std::atomic<int> g_log_fd{-1};

std::atomic<int>& MinLevel() {
  static std::atomic<int> level{static_cast<int>(LevelFromEnv())};
  return level;
}

}  // namespace

std::optional<LogLevel> ParseLogLevel(absl::string_view name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warning" || name == "warn") return LogLevel::kWarning;
  if (name == "error") return LogLevel::kError;
  return std::nullopt;
}

void SetLogFd(int fd) { g_log_fd.store(fd < 0 ? -1 : fd); }

void SetMinLogLevel(LogLevel level) { MinLevel().store(static_cast<int>(level)); }
LogLevel MinLogLevel() { return static_cast<LogLevel>(MinLevel().load()); }

void Log(LogLevel level, absl::string_view component, absl::string_view message) {
  if (static_cast<int>(level) < MinLevel().load(std::memory_order_relaxed)) return;
  static constexpr char kLetters[] = {'D', 'I', 'W', 'E'};
  // One event, one line: a message that spans lines (an error from a library) is kept on one.
  std::string line = absl::StrCat(
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()), " ",
      std::string(1, kLetters[static_cast<int>(level)]), " [", component, "] ",
      absl::StrReplaceAll(absl::StripTrailingAsciiWhitespace(message), {{"\n", "\\n"}}), "\n");
  const int fd = g_log_fd.load(std::memory_order_relaxed);
  if (fd >= 0 && ::write(fd, line.data(), line.size()) >= 0) return;
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace croupier

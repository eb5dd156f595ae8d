// One-line log events on stderr: "2026-11-22T07:30:00.123Z W [component] message".
// Callers name the job, producer, consumer or file the event is about inside the message.
#ifndef CROUPIER_SRC_COMMON_LOGGING_H_
#define CROUPIER_SRC_COMMON_LOGGING_H_

#include "absl/strings/string_view.h"

namespace croupier {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Events below this level are dropped. The default comes from $CROUPIER_LOG_LEVEL
// (debug|info|warning|error), else info. Thread-safe.
void SetMinLogLevel(LogLevel level);
LogLevel MinLogLevel();

// Thread-safe: each event is written with one write() call, so lines never interleave.
void Log(LogLevel level, absl::string_view component, absl::string_view message);

}  // namespace croupier

#endif  // CROUPIER_SRC_COMMON_LOGGING_H_

// One-line log events on stderr: "2026-11-22T07:30:00.123Z W [component] message", one line
// per event (newlines inside a message are written as "\n"). Callers name the job, producer,
// consumer or file the event is about inside the message ("producer 3 ...", "job 'train': ...",
// "consumer 5 (rank 2 of job 'train') ...").
#ifndef CROUPIER_SRC_COMMON_LOGGING_H_
#define CROUPIER_SRC_COMMON_LOGGING_H_

#include <optional>

#include "absl/strings/string_view.h"

namespace croupier {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Events below this level are dropped. The default comes from $CROUPIER_LOG_LEVEL
// (debug|info|warning|error), else info; `croupier --log-level LEVEL` sets it. Thread-safe.
void SetMinLogLevel(LogLevel level);
LogLevel MinLogLevel();
// "debug", "info", "warning" (or "warn"), "error"; nullopt for anything else.
std::optional<LogLevel> ParseLogLevel(absl::string_view name);

// Where the events go: file descriptor `fd` (the Python module hands it a pipe that
// croupier.logs reads into Python's logging), or stderr for fd < 0 (the default). An event whose
// write to `fd` fails (a full non-blocking pipe, a closed one) goes to stderr instead. Thread-safe.
void SetLogFd(int fd);

// Thread-safe: each event is written with one write() call, so lines never interleave.
void Log(LogLevel level, absl::string_view component, absl::string_view message);

}  // namespace croupier

#endif  // CROUPIER_SRC_COMMON_LOGGING_H_

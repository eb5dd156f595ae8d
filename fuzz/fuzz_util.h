// Helpers shared by the fuzz targets: a scratch file per process, and a check that stops the
// fuzzer with a message (libFuzzer reports the abort as a crash and saves the input).
#ifndef CROUPIER_FUZZ_FUZZ_UTIL_H_
#define CROUPIER_FUZZ_FUZZ_UTIL_H_

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace croupier::fuzz {

// A property that must hold for every input; a failure is a bug worth a crash report.
#define FUZZ_CHECK(cond, what)                                            \
  do {                                                                    \
    if (!(cond)) {                                                        \
      std::fprintf(stderr, "FUZZ_CHECK failed: %s: %s\n", #cond, (what)); \
      std::abort();                                                       \
    }                                                                     \
  } while (0)

// True when `status` is an error, which must then be DATA_LOSS, the code of bad bytes (`what`
// names the check in the crash report): the target returns, the input refused.
inline bool RefusedAsDataLoss(const absl::Status& status, const char* what) {
  if (status.ok()) return false;
  FUZZ_CHECK(absl::IsDataLoss(status), what);
  return true;
}

// This process's scratch file: in $TMPDIR or /tmp, one per pid so that parallel fuzzers do not
// share it, removed at exit.
inline const std::string& ScratchPath() {
  // Never destroyed, so that the exit handler can still use it.
  static const std::string* const path = [] {
    const char* dir = std::getenv("TMPDIR");
    auto* p = new std::string(std::string(dir && *dir ? dir : "/tmp") + "/croupier_fuzz." +
                              std::to_string(getpid()));
    std::atexit([] { std::remove(ScratchPath().c_str()); });
    return p;
  }();
  return *path;
}

// Writes `bytes` to the scratch file and returns its path. Aborts if it cannot: that is not the
// input's fault, and skipping silently would make the fuzzer useless.
inline const std::string& WriteScratchFile(absl::string_view bytes) {
  const std::string& path = ScratchPath();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  FUZZ_CHECK(f != nullptr, path.c_str());
  FUZZ_CHECK(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size(), path.c_str());
  FUZZ_CHECK(std::fclose(f) == 0, path.c_str());
  return path;
}

}  // namespace croupier::fuzz

#endif  // CROUPIER_FUZZ_FUZZ_UTIL_H_

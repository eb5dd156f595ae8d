// absl::Mutex's deadlock detector, off in the programs users run.
//
// Debian's abseil is compiled without NDEBUG, so by default every absl::Mutex lock feeds its
// deadlock detector (a graph of lock orders, GraphCycles): 3.4% of the dispatcher's CPU under
// 3,000 hollow consumers (perf, 29 November), plus the locking it does itself. The unit tests keep
// it (they never call this); the croupier command and the Python module turn it off, unless
// CROUPIER_MUTEX_DEADLOCK_CHECK=1 asks to keep it (a lock-order report aborts the process).
#ifndef CROUPIER_SRC_COMMON_MUTEX_CHECKS_H_
#define CROUPIER_SRC_COMMON_MUTEX_CHECKS_H_

#include <cstdlib>
#include <cstring>

#include "absl/synchronization/mutex.h"

namespace croupier {

// Call once, first thing, before any other thread starts (the Python module calls it when it is
// imported: a trainer's other threads, if any, hold no absl::Mutex of croupier's yet).
inline void ReleaseMutexChecks() {
  const char* keep = std::getenv("CROUPIER_MUTEX_DEADLOCK_CHECK");
  if (keep != nullptr && std::strcmp(keep, "1") == 0) return;
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace croupier

#endif  // CROUPIER_SRC_COMMON_MUTEX_CHECKS_H_

// The check that `make tsan` can see what it must: built only in a ThreadSanitizer build, run by
// ctest twice. `tsan_canary locked` hands data between threads only through absl::Mutex,
// absl::CondVar and absl::Notification and must pass without a report: with an abseil that TSan
// cannot see (Debian's, uninstrumented) it fails, so a passing `make tsan` shows that the
// instrumented abseil of scripts/tsan_abseil.sh was loaded. `tsan_canary racy` writes the same
// counter from two threads without a lock and must be reported: it shows that reports are on.
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace {

constexpr int kRounds = 10000;

int Locked() {
  absl::Mutex mu;
  absl::CondVar cv;
  long counter = 0;  // Guarded by mu.
  bool ready = false;  // Guarded by mu.
  long handed = 0;  // Written before Notify, read after WaitForNotification.
  absl::Notification done;
  std::thread writer([&] {
    for (int i = 0; i < kRounds; ++i) {
      absl::MutexLock lock(&mu);
      ++counter;
    }
    {
      absl::MutexLock lock(&mu);
      ready = true;
      cv.Signal();
    }
    handed = 42;
    done.Notify();
  });
  for (int i = 0; i < kRounds; ++i) {
    absl::MutexLock lock(&mu);
    ++counter;
  }
  {
    absl::MutexLock lock(&mu);
    while (!ready) cv.Wait(&mu);
  }
  done.WaitForNotification();
  const long seen = handed;
  writer.join();
  std::printf("counter %ld, handed %ld\n", counter, seen);
  return counter == 2 * kRounds && seen == 42 ? 0 : 1;
}

int Racy() {
  long counter = 0;
  std::thread writer([&] {
    for (int i = 0; i < kRounds; ++i) ++counter;
  });
  for (int i = 0; i < kRounds; ++i) ++counter;
  writer.join();
  std::printf("counter %ld (no report means ThreadSanitizer is off)\n", counter);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "locked") == 0) return Locked();
  if (argc == 2 && std::strcmp(argv[1], "racy") == 0) return Racy();
  std::fprintf(stderr, "usage: tsan_canary locked|racy\n");
  return 2;
}

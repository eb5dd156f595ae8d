// What a client has asked of the store, counted as it goes, for logs, status and tests.
#ifndef CROUPIER_SRC_S3_S3_STATS_H_
#define CROUPIER_SRC_S3_S3_STATS_H_

#include <atomic>
#include <cstdint>
#include <string>

namespace croupier::s3 {

// A snapshot. Plain value.
struct S3Stats {
  uint64_t requests = 0;   // attempts sent, retries included
  uint64_t bytes = 0;      // object bytes received by ranged GETs that succeeded
  uint64_t retries = 0;    // attempts that failed and were tried again
  uint64_t throttles = 0;  // of those, the store's requests to slow down (503 SlowDown, 429)
  uint64_t failures = 0;   // requests that failed for good (a NOT_FOUND answer is not one)
  uint64_t ranges = 0;     // ranges asked of ReadRanges (GetRanges), each served by some GET

  std::string ToString()
      const;  // "requests=.. bytes=.. retries=.. throttles=.. failures=.. ranges=.."
};

// Thread-safe: relaxed atomic counters.
class S3Counters {
 public:
  void AddRequest() { requests_.fetch_add(1, std::memory_order_relaxed); }
  void AddBytes(uint64_t n) { bytes_.fetch_add(n, std::memory_order_relaxed); }
  void AddRetry(bool throttle) {
    retries_.fetch_add(1, std::memory_order_relaxed);
    if (throttle) throttles_.fetch_add(1, std::memory_order_relaxed);
  }
  void AddFailure() { failures_.fetch_add(1, std::memory_order_relaxed); }
  void AddRanges(uint64_t n) { ranges_.fetch_add(n, std::memory_order_relaxed); }
  S3Stats Snapshot() const;

 private:
  std::atomic<uint64_t> requests_{0}, bytes_{0}, retries_{0}, throttles_{0}, failures_{0},
      ranges_{0};
};

}  // namespace croupier::s3

#endif  // CROUPIER_SRC_S3_S3_STATS_H_

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
  // Ranges read from the copy that a process of the producer fetched before (shared_reads.h),
  // and their bytes: requests and bytes not asked of the store.
  uint64_t shared = 0;
  uint64_t shared_bytes = 0;

  // "requests=.. bytes=.. retries=.. throttles=.. failures=.. ranges=.. shared=.. shared_bytes=.."
  std::string ToString() const;
};

// Thread-safe: relaxed atomic counters. Each count is added to `also` too, when given (which
// must outlive these counters).
class S3Counters {
 public:
  explicit S3Counters(S3Counters* also = nullptr) : also_(also) {}
  S3Counters(const S3Counters&) = delete;
  S3Counters& operator=(const S3Counters&) = delete;

  void AddRequest() {
    requests_.fetch_add(1, std::memory_order_relaxed);
    if (also_ != nullptr) also_->AddRequest();
  }
  void AddBytes(uint64_t n) {
    bytes_.fetch_add(n, std::memory_order_relaxed);
    if (also_ != nullptr) also_->AddBytes(n);
  }
  void AddRetry(bool throttle) {
    retries_.fetch_add(1, std::memory_order_relaxed);
    if (throttle) throttles_.fetch_add(1, std::memory_order_relaxed);
    if (also_ != nullptr) also_->AddRetry(throttle);
  }
  void AddFailure() {
    failures_.fetch_add(1, std::memory_order_relaxed);
    if (also_ != nullptr) also_->AddFailure();
  }
  void AddRanges(uint64_t n) {
    ranges_.fetch_add(n, std::memory_order_relaxed);
    if (also_ != nullptr) also_->AddRanges(n);
  }
  void AddShared(uint64_t bytes) {
    shared_.fetch_add(1, std::memory_order_relaxed);
    shared_bytes_.fetch_add(bytes, std::memory_order_relaxed);
    if (also_ != nullptr) also_->AddShared(bytes);
  }
  S3Stats Snapshot() const;

 private:
  // Lock-free, so that they count across processes in shared memory (ProcessS3Counters).
  static_assert(std::atomic<uint64_t>::is_always_lock_free);
  std::atomic<uint64_t> requests_{0}, bytes_{0}, retries_{0}, throttles_{0}, failures_{0},
      ranges_{0}, shared_{0}, shared_bytes_{0};
  S3Counters* const also_;
};

// The counters that every S3Client of this process adds to besides its own: what this process,
// and every process forked from it without an exec, asked of object stores. They live in a page
// shared with those children (MAP_SHARED, mapped when the library loads, before any fork), so
// that a map job's worker processes, which read a ParquetSource's objects, count in their
// producer's metrics (croupier_s3_*). Never deleted.
S3Counters& ProcessS3Counters();

}  // namespace croupier::s3

#endif  // CROUPIER_SRC_S3_S3_STATS_H_

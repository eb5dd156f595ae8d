#include "src/s3/s3_stats.h"

#include <sys/mman.h>

#include <new>

#include "absl/strings/str_cat.h"

namespace croupier::s3 {

std::string S3Stats::ToString() const {
  return absl::StrCat("requests=", requests, " bytes=", bytes, " retries=", retries,
                      " throttles=", throttles, " failures=", failures, " ranges=", ranges,
                      " shared=", shared, " shared_bytes=", shared_bytes);
}

S3Stats S3Counters::Snapshot() const {
  S3Stats s;
  s.requests = requests_.load(std::memory_order_relaxed);
  s.bytes = bytes_.load(std::memory_order_relaxed);
  s.retries = retries_.load(std::memory_order_relaxed);
  s.throttles = throttles_.load(std::memory_order_relaxed);
  s.failures = failures_.load(std::memory_order_relaxed);
  s.ranges = ranges_.load(std::memory_order_relaxed);
  s.shared = shared_.load(std::memory_order_relaxed);
  s.shared_bytes = shared_bytes_.load(std::memory_order_relaxed);
  return s;
}

namespace {

S3Counters* MapShared() {
  void* page = ::mmap(nullptr, sizeof(S3Counters), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  // Without the mapping (no memory for one page), this process counts alone.
  if (page == MAP_FAILED) return new S3Counters();
  return new (page) S3Counters();
}

// Mapped as the library loads, so that it exists before any fork: a child forked earlier than
// the first call would map a page of its own.
[[maybe_unused]] S3Counters& process_counters = ProcessS3Counters();

}  // namespace

S3Counters& ProcessS3Counters() {
  static S3Counters* const counters = MapShared();
  return *counters;
}

}  // namespace croupier::s3

#include "src/s3/s3_stats.h"

#include "absl/strings/str_cat.h"

namespace croupier::s3 {

std::string S3Stats::ToString() const {
  return absl::StrCat("requests=", requests, " bytes=", bytes, " retries=", retries,
                      " throttles=", throttles, " failures=", failures, " ranges=", ranges);
}

S3Stats S3Counters::Snapshot() const {
  S3Stats s;
  s.requests = requests_.load(std::memory_order_relaxed);
  s.bytes = bytes_.load(std::memory_order_relaxed);
  s.retries = retries_.load(std::memory_order_relaxed);
  s.throttles = throttles_.load(std::memory_order_relaxed);
  s.failures = failures_.load(std::memory_order_relaxed);
  s.ranges = ranges_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace croupier::s3

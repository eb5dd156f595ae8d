// The threads an S3Client runs ranged GETs on, for ReadRanges: at most `threads` requests of the
// client in flight at once, whoever asked; the rest wait in order.
#ifndef CROUPIER_SRC_S3_FETCH_POOL_H_
#define CROUPIER_SRC_S3_FETCH_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace croupier::s3 {

// Thread-safe. The threads start on the first Run; the destructor runs what is queued and joins
// them (each request is bounded by the client's deadline).
class FetchPool {
 public:
  explicit FetchPool(int threads) : size_(threads < 1 ? 1 : threads) {}
  ~FetchPool();
  FetchPool(const FetchPool&) = delete;
  FetchPool& operator=(const FetchPool&) = delete;

  void Run(std::function<void()> work) ABSL_LOCKS_EXCLUDED(mu_);
  int size() const { return size_; }

 private:
  void Loop();

  const int size_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace croupier::s3

#endif  // CROUPIER_SRC_S3_FETCH_POOL_H_

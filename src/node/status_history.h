// The last minutes of the dispatcher's figures, one sample a second, for the web page's charts
// (GET /api/history): per job, the consumers' batches/s and mean input-bound share; over the
// producers, their batches/s and buffer fill; the number of producers and the recommended one.
#ifndef CROUPIER_SRC_NODE_STATUS_HISTORY_H_
#define CROUPIER_SRC_NODE_STATUS_HISTORY_H_

#include <cstddef>
#include <deque>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/croupier.pb.h"

namespace croupier {

// Thread-safe.
class StatusHistory {
 public:
  explicit StatusHistory(size_t max_samples = 600) : max_samples_(max_samples) {}

  // Adds the sample of `status` taken at `now`, dropping the oldest beyond max_samples.
  void Add(absl::Time now, const v1::StatusResponse& status);

  // {"samples": [{"t": unix seconds, "jobs": {"NAME": {"batches_per_second": x,
  // "input_bound": y, "consumers": n}}, "producer_batches_per_second": x, "buffer_fill": y,
  // "producers": n, "recommended_producers": n}, ...]}, oldest first. buffer_fill is the
  // producers' buffered bytes over their capacity, in all; producers counts them all.
  std::string ToJson() const;

 private:
  struct JobSample {
    double batches_per_second = 0;
    double input_bound = 0;  // the mean over its connected consumers
    int consumers = 0;
  };
  struct Sample {
    absl::Time when;
    std::map<std::string, JobSample> jobs;
    double producer_batches_per_second = 0;
    double buffer_fill = 0;
    int producers = 0;
    uint32_t recommended = 0;
  };

  const size_t max_samples_;
  mutable absl::Mutex mu_;
  std::deque<Sample> samples_ ABSL_GUARDED_BY(mu_);
};

}  // namespace croupier

#endif  // CROUPIER_SRC_NODE_STATUS_HISTORY_H_

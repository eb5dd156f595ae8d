// The name of one batch: global batch `batch` of epoch `epoch` of job `job`. What a consumer asks a
// producer for, and what producers hold and serve.
#ifndef CROUPIER_SRC_JOB_BATCH_KEY_H_
#define CROUPIER_SRC_JOB_BATCH_KEY_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace croupier {

// Names one global batch of one epoch of one job.
struct BatchKey {
  std::string job;
  uint64_t epoch = 0;
  uint64_t batch = 0;

  template <typename H>
  friend H AbslHashValue(H h, const BatchKey& k) {
    return H::combine(std::move(h), k.job, k.epoch, k.batch);
  }
  bool operator==(const BatchKey&) const = default;
};

// "batch G of job 'J' epoch E", for errors and logs.
inline std::string Describe(const BatchKey& key) {
  return absl::StrCat("batch ", key.batch, " of job '", key.job, "' epoch ", key.epoch);
}

// "epoch E batches [first, first + num)", for errors and logs.
inline std::string DescribeBatches(uint64_t epoch, uint64_t first, uint64_t num) {
  return absl::StrCat("epoch ", epoch, " batches [", first, ", ", first + num, ")");
}

}  // namespace croupier

#endif  // CROUPIER_SRC_JOB_BATCH_KEY_H_

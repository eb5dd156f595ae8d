// Which global batches each epoch of a job deals, and to whom. The one place that maps a
// consumer's (epoch, step) to global batches; the dispatcher and the consumer both use it.
//
// An epoch deals global batches [FirstBatch, EndBatch) of its plan, a whole number of rounds of
// num_consumers: rank r takes FirstBatch + step * num_consumers + r as its step `step`. Every
// epoch deals [0, batches_per_epoch), except when the job resumes another job's checkpoint with a
// different number of consumers (JobSpec.start_epoch, start_batch): epochs before start_epoch deal
// nothing, and start_epoch deals from start_batch, the next global batch of the checkpoint, to
// the last whole round of the new number of consumers.
#ifndef CROUPIER_SRC_DISPATCHER_DEAL_H_
#define CROUPIER_SRC_DISPATCHER_DEAL_H_

#include <algorithm>
#include <cstdint>

#include "proto/croupier.pb.h"

namespace croupier::deal {

inline uint64_t FirstBatch(const v1::JobInfo& job, uint64_t epoch) {
  const v1::JobSpec& spec = job.spec();
  if (epoch < spec.start_epoch()) return job.batches_per_epoch();
  if (epoch == spec.start_epoch()) return std::min(spec.start_batch(), job.batches_per_epoch());
  return 0;
}

inline uint64_t StepsInEpoch(const v1::JobInfo& job, uint64_t epoch) {
  const uint64_t n = job.spec().num_consumers();
  if (n == 0) return 0;
  return (job.batches_per_epoch() - FirstBatch(job, epoch)) / n;
}

inline uint64_t EndBatch(const v1::JobInfo& job, uint64_t epoch) {
  return FirstBatch(job, epoch) + StepsInEpoch(job, epoch) * job.spec().num_consumers();
}

// The global batch rank `rank` takes at `step` of `epoch`.
inline uint64_t GlobalBatch(const v1::JobInfo& job, uint64_t epoch, uint64_t step, uint32_t rank) {
  return FirstBatch(job, epoch) + step * job.spec().num_consumers() + rank;
}

}  // namespace croupier::deal

#endif  // CROUPIER_SRC_DISPATCHER_DEAL_H_

// How a consumer gets its batches from the producers: it asks the dispatcher where a batch is
// (Peers' Locate cache) and fetches it over the data plane, retrying through producer failures.
// The three ways: one step of a dealt job, a group of steps in one go, and first_come's any
// ready batch. Knows nothing of positions or heartbeats (position_reporter.h).
#ifndef CROUPIER_SRC_CONSUMER_BATCH_FETCHER_H_
#define CROUPIER_SRC_CONSUMER_BATCH_FETCHER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "croupier/batch.h"
#include "src/consumer/peers.h"
#include "src/job/job.h"

namespace croupier {

// Thread-safe (the prefetcher's workers call it at once).
class BatchFetcher {
 public:
  // `closed`, once notified, makes every fetch return CANCELLED; not owned, must outlive this.
  BatchFetcher(Peers* peers, JobConfig job, uint32_t rank, absl::Duration timeout,
               const absl::Notification* closed)
      : peers_(peers), job_(std::move(job)), rank_(rank), timeout_(timeout), closed_(closed) {}

  // Dealt: this rank's step `step` of `epoch` (global batch JobConfig::GlobalBatch), from the
  // producer holding its task, asking the dispatcher again when that producer no longer has it
  // or is gone, until `deadline`: then DEADLINE_EXCEEDED naming the job, epoch, step, global
  // batch and the last producer tried.
  absl::StatusOr<Batch> FetchStep(uint64_t epoch, uint64_t step, absl::Time deadline);

  // Dealt: steps [first, first + count) in one go, each batch handed to land(k, batch) (step
  // first + k) the moment it arrives. The runs of consecutive steps whose batches the same
  // producer holds (as far as the cached locations say) are fetched with one pipelined call
  // each. A batch that fails there, or whose task is not assigned yet, is not landed: the caller
  // fetches it again with FetchStep (its retries, its questions to the dispatcher) when the
  // trainer reaches it. Retrying it here would hold the batches fetched with it from the
  // trainer, and so its acknowledgements, which may be what the assignment of its task waits for.
  void FetchSteps(uint64_t epoch, uint64_t first, uint32_t count,
                  absl::FunctionRef<void(uint32_t, absl::StatusOr<Batch>)> land);

  // first_come: any ready batch of `epoch` from any producer holding its tasks; OUT_OF_RANGE
  // once the epoch is finished; DEADLINE_EXCEEDED after the timeout without one.
  absl::StatusOr<Batch> FetchAny(uint64_t epoch);

  const JobConfig& job() const { return job_; }

 private:
  bool closed() const { return closed_->HasBeenNotified(); }
  // A client for `address`, or the error that ends the fetch: a refused certificate or token, or
  // a TLS mismatch, which retrying cannot help (UNAVAILABLE otherwise: try again).
  absl::StatusOr<DataClient*> ClientFor(const std::string& address);

  Peers* const peers_;
  const JobConfig job_;
  const uint32_t rank_;
  const absl::Duration timeout_;
  const absl::Notification* const closed_;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_CONSUMER_BATCH_FETCHER_H_

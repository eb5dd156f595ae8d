// What makes the batches of an addressable job: batch g of epoch e holds the records that the
// epoch plan (croupier/plan.h) names for it, read from the job's source and, for a Python source,
// transformed. One implementation per source kind: TfrecordBatchMaker (tfrecord_maker.h) reads
// and decodes TFRecord files in C++; FunctionBatchMaker (function_maker.h) hands the records'
// indexes to a function (the Python producer's workers); OpeningMaker (opening_maker.h) stands
// for a files job's maker while it is opened off the heartbeat thread. TaskRunner makes every
// task's batches through this interface, whatever the source.
#ifndef CROUPIER_SRC_PRODUCER_BATCH_MAKER_H_
#define CROUPIER_SRC_PRODUCER_BATCH_MAKER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "croupier/batch.h"
#include "croupier/plan.h"
#include "proto/croupier.pb.h"
#include "src/job/codec.h"
#include "src/job/job.h"

namespace croupier {

// The contract every maker keeps: the same (epoch, batch) always gives bit-identical bytes,
// whichever instance or thread makes it and whenever. That is what lets any producer remake a
// batch a failed one held, and a resumed job continue exactly.
//
// Thread-safe: Make may run on many threads at once.
class BatchMaker {
 public:
  virtual ~BatchMaker() = default;
  BatchMaker(const BatchMaker&) = delete;
  BatchMaker& operator=(const BatchMaker&) = delete;

  // Global batch `batch` of epoch `epoch`: the records EpochPlan(plan, epoch).BatchRecords(batch),
  // made by MakeRecords. Errors are prefixed with "job 'J' epoch E batch G: "; OUT_OF_RANGE for a
  // batch or epoch past the job's end; the rest as MakeRecords gives them, except NOT_FOUND
  // (an input file that is gone), which becomes DATA_LOSS: on the data plane NOT_FOUND means
  // "this producer does not hold the batch", which a consumer answers by asking elsewhere until
  // its deadline, while the error that names the missing file must reach the rank.
  absl::StatusOr<Batch> Make(uint64_t epoch, uint64_t batch) const;

  const v1::JobInfo& job() const { return job_; }
  const JobConfig& config() const { return config_; }
  const std::string& job_name() const { return config_.name; }
  const PlanSpec& plan_spec() const { return config_.plan; }
  // Global batches per epoch.
  uint64_t batches_per_epoch() const { return config_.batches_per_epoch; }
  // How the TCP data plane compresses this job's batches.
  Codec compression() const { return config_.compression; }

  // What the producer holding the tasks (TaskRunner) tells its maker, so that a maker that reads
  // ahead of use can read what comes next and nothing else. WillMake: the producer was given
  // `task` and will ask for its batches (after those of the tasks given before it, mostly).
  // WontMake: it will not ask for the batches of `task` it has not made (the task was taken
  // away); what was read ahead for them can go. A task may be given again after WontMake.
  //
  // Both return at once: they may only name work for the maker's own threads. They are called
  // on the producer's heartbeat thread (under the TaskRunner's lock), which must never wait on
  // a file or a store: no open, no read, no request. They change no batch's bytes, and Make
  // answers the same whether or not they were called. By default they do nothing.
  // TfrecordBatchMaker fetches a task's records from an object store ahead (tfrecord_maker.h).
  virtual void WillMake(const v1::Task& /*task*/) const {}
  virtual void WontMake(const v1::Task& /*task*/) const {}

  // Whether the producer may keep this maker for the job's next tasks. An OpeningMaker whose
  // opening failed says no (opening_maker.h), so that the next task opens the job again.
  virtual bool Reusable() const { return true; }

 protected:
  // `config` must be ParseJobConfig(job) with a plan that agrees with the job (CheckedConfig).
  BatchMaker(v1::JobInfo job, JobConfig config);

  // The typed job of `job`, checked against the epoch plan this build computes:
  // FAILED_PRECONDITION if they disagree on the batches per epoch (another plan version);
  // INVALID_ARGUMENT naming the job for a bad setting.
  static absl::StatusOr<JobConfig> CheckedConfig(const v1::JobInfo& job);

  // The batch of records `ids` (global record indexes, in batch order; their count is the batch
  // size) as global batch `batch` of `epoch`. Errors name the record (its index, and its file and
  // byte offset where it has one) and the feature; Make prefixes the batch.
  virtual absl::StatusOr<Batch> MakeRecords(uint64_t epoch, uint64_t batch,
                                            absl::Span<const uint64_t> ids) const = 0;

 private:
  // Makes the batches of the maker it opened with that maker's MakeRecords.
  friend class OpeningMaker;

  const v1::JobInfo job_;
  const JobConfig config_;
};

// Makes the batch maker of a job, for the jobs a producer is given. Errors name the job.
using MakerFactory =
    std::function<absl::StatusOr<std::shared_ptr<const BatchMaker>>(const v1::JobInfo& job)>;

// The maker of a job whose own maker could not be made (an input file deleted, say): every batch
// fails with `error`. A producer holds the tasks it is given with it, so that the rank that needs
// one of their batches is told why, instead of hearing that no producer holds it until its
// deadline. Errors as ParseJobConfig's for a job that cannot even be planned.
absl::StatusOr<std::shared_ptr<const BatchMaker>> FailingMaker(const v1::JobInfo& job,
                                                               absl::Status error);

// `status` with `prefix` before its message: how a maker names the batch or record an error is
// about.
absl::Status Prefixed(const absl::Status& status, absl::string_view prefix);

}  // namespace croupier

#endif  // CROUPIER_SRC_PRODUCER_BATCH_MAKER_H_

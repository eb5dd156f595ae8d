// A BatchMaker whose records come from a function: the producer of an addressable Python source
// (a map-style dataset, Parquet files) hands the plan's record indexes to its workers, which read,
// transform and collate them (python/croupier/produce.py).
#ifndef CROUPIER_SRC_PRODUCER_FUNCTION_MAKER_H_
#define CROUPIER_SRC_PRODUCER_FUNCTION_MAKER_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "croupier/batch.h"
#include "proto/croupier.pb.h"
#include "src/producer/batch_maker.h"

namespace croupier {

// Makes global batch `batch` of `epoch` from the records `ids` (global record indexes, in batch
// order). It must give the same bytes for the same arguments every time, on any producer: what a
// batch holds is a function of the plan. Called on many threads at once. The batch holds one
// record per id, or, in a job with skip_failing_records, at least one: those that did not fail.
using RecordsFunction = std::function<absl::StatusOr<Batch>(uint64_t epoch, uint64_t batch,
                                                            absl::Span<const uint64_t> ids)>;

// Thread-safe if the function is.
class FunctionBatchMaker final : public BatchMaker {
 public:
  // INVALID_ARGUMENT naming the job for a bad setting or a null function; FAILED_PRECONDITION
  // if the job's batches per epoch disagree with this build's plan.
  static absl::StatusOr<std::unique_ptr<FunctionBatchMaker>> Create(const v1::JobInfo& job,
                                                                    RecordsFunction make);

 private:
  FunctionBatchMaker(v1::JobInfo job, JobConfig config, RecordsFunction make)
      : BatchMaker(std::move(job), std::move(config)), make_(std::move(make)) {}
  absl::StatusOr<Batch> MakeRecords(uint64_t epoch, uint64_t batch,
                                    absl::Span<const uint64_t> ids) const override;

  const RecordsFunction make_;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_PRODUCER_FUNCTION_MAKER_H_

#include "src/producer/function_maker.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/common/status_macros.h"

namespace croupier {

absl::StatusOr<std::unique_ptr<FunctionBatchMaker>> FunctionBatchMaker::Create(
    const v1::JobInfo& job, RecordsFunction make) {
  if (!make) {
    return absl::InvalidArgumentError(
        absl::StrCat("job '", job.spec().name(), "': no function makes its batches"));
  }
  ASSIGN_OR_RETURN(JobConfig config, CheckedConfig(job));
  return std::unique_ptr<FunctionBatchMaker>(
      new FunctionBatchMaker(job, std::move(config), std::move(make)));
}

absl::StatusOr<Batch> FunctionBatchMaker::MakeRecords(uint64_t epoch, uint64_t batch,
                                                      absl::Span<const uint64_t> ids) const {
  absl::StatusOr<Batch> made = make_(epoch, batch, ids);
  if (!made.ok()) return made;
  // With skip_failing_records the function leaves out the records that failed, never all.
  const bool fewer_allowed = config().skip_failing_records && made->num_records() > 0;
  if (made->num_records() > ids.size() ||
      (made->num_records() < ids.size() && !fewer_allowed)) {
    return absl::InternalError(absl::StrCat("the batch holds ", made->num_records(),
                                            " records; the plan names ", ids.size()));
  }
  return made;
}

}  // namespace croupier

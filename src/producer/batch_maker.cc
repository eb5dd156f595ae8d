#include "src/producer/batch_maker.h"

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/common/status_macros.h"

namespace croupier {
namespace {

class FailingBatchMaker final : public BatchMaker {
 public:
  FailingBatchMaker(v1::JobInfo job, JobConfig config, absl::Status error)
      : BatchMaker(std::move(job), std::move(config)), error_(std::move(error)) {}

  static absl::StatusOr<std::shared_ptr<const BatchMaker>> Create(const v1::JobInfo& job,
                                                                  absl::Status error) {
    ASSIGN_OR_RETURN(JobConfig config, CheckedConfig(job));
    return std::shared_ptr<const BatchMaker>(
        new FailingBatchMaker(job, std::move(config), std::move(error)));
  }

 protected:
  absl::StatusOr<Batch> MakeRecords(uint64_t, uint64_t, absl::Span<const uint64_t>) const override {
    return error_;
  }

 private:
  const absl::Status error_;
};

}  // namespace

absl::Status Prefixed(const absl::Status& status, absl::string_view prefix) {
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

absl::StatusOr<std::shared_ptr<const BatchMaker>> FailingMaker(const v1::JobInfo& job,
                                                               absl::Status error) {
  return FailingBatchMaker::Create(job, std::move(error));
}

BatchMaker::BatchMaker(v1::JobInfo job, JobConfig config)
    : job_(std::move(job)), config_(std::move(config)) {}

absl::StatusOr<JobConfig> BatchMaker::CheckedConfig(const v1::JobInfo& job) {
  ASSIGN_OR_RETURN(JobConfig config, ParseJobConfig(job));
  const std::string prefix = absl::StrCat("job '", config.name, "': ");
  if (config.plan.num_consumers == 0) config.plan.num_consumers = 1;
  if (absl::Status valid = ValidatePlanSpec(config.plan); !valid.ok()) {
    return Prefixed(valid, prefix);
  }
  ASSIGN_OR_RETURN(EpochPlan plan, EpochPlan::Create(config.plan, 0));
  if (config.batches_per_epoch == 0) config.batches_per_epoch = plan.num_batches();
  // A dispatcher's JobInfo always has tasks of whole rounds (it refuses one without on replay);
  // an empty count here is a default, as the others above, not a division by zero later
  // (JobConfig::TaskStart).
  if (config.batches_per_task == 0) config.batches_per_task = config.plan.num_consumers;
  if (config.batches_per_epoch != plan.num_batches()) {
    return absl::FailedPreconditionError(absl::StrCat(
        prefix, "the job plans ", config.batches_per_epoch, " batches per epoch but this producer ",
        "plans ", plan.num_batches(), " (plan version ", kPlanVersion, ")"));
  }
  return config;
}

absl::StatusOr<Batch> BatchMaker::Make(uint64_t epoch, uint64_t batch) const {
  const std::string prefix =
      absl::StrCat("job '", job_name(), "' epoch ", epoch, " batch ", batch, ": ");
  if (config_.num_epochs != 0 && epoch >= config_.num_epochs) {
    return absl::OutOfRangeError(
        absl::StrCat(prefix, "the job has ", config_.num_epochs, " epochs"));
  }
  if (batch >= batches_per_epoch()) {
    return absl::OutOfRangeError(
        absl::StrCat(prefix, "an epoch of the job has ", batches_per_epoch(), " batches"));
  }
  auto plan = EpochPlan::Create(config_.plan, epoch);
  if (!plan.ok()) return Prefixed(plan.status(), prefix);
  std::vector<uint64_t> ids(config_.plan.batch_size);
  plan->BatchRecords(batch, absl::MakeSpan(ids));
  absl::StatusOr<Batch> made = MakeRecords(epoch, batch, ids);
  if (absl::IsNotFound(made.status())) {
    return absl::DataLossError(absl::StrCat(prefix, made.status().message()));
  }
  if (!made.ok()) return Prefixed(made.status(), prefix);
  return made;
}

}  // namespace croupier

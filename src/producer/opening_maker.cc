#include "src/producer/opening_maker.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/status_macros.h"

namespace croupier {

absl::StatusOr<std::shared_ptr<const OpeningMaker>> OpeningMaker::Start(const v1::JobInfo& job,
                                                                        MakerFactory open) {
  ASSIGN_OR_RETURN(JobConfig config, CheckedConfig(job));
  std::shared_ptr<OpeningMaker> maker(new OpeningMaker(job, std::move(config)));
  // The thread uses the maker, never owns it: the last owner's destructor joins it.
  OpeningMaker* raw = maker.get();
  maker->opening_ = std::thread([raw, open = std::move(open)] { raw->Open(open); });
  return std::shared_ptr<const OpeningMaker>(std::move(maker));
}

OpeningMaker::OpeningMaker(v1::JobInfo job, JobConfig config)
    : BatchMaker(std::move(job), std::move(config)) {}

OpeningMaker::~OpeningMaker() {
  if (opening_.joinable()) opening_.join();
}

void OpeningMaker::Open(const MakerFactory& open) {
  absl::StatusOr<std::shared_ptr<const BatchMaker>> made = open(job());
  absl::Status status = made.status();
  if (made.ok() && (*made == nullptr || (*made)->job_name() != job_name() ||
                    (*made)->batches_per_epoch() != batches_per_epoch())) {
    status = absl::InternalError(absl::StrCat("job '", job_name(),
                                              "': its maker was opened for another job or plan"));
  }
  absl::MutexLock lock(&mu_);
  if (status.ok()) {
    maker_ = *std::move(made);
    // What the producer said while the maker was opened, in the order it said it.
    for (const Told& t : told_) {
      if (t.will) {
        maker_->WillMake(t.task);
      } else {
        maker_->WontMake(t.task);
      }
    }
  }
  told_.clear();
  status_ = std::move(status);
  opened_ = true;
}

absl::Status OpeningMaker::WaitOpened(absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithDeadline(absl::Condition(&opened_), deadline)) {
    return absl::UnavailableError(
        absl::StrCat("job '", job_name(), "': its batch maker is still being opened"));
  }
  return status_;
}

bool OpeningMaker::Reusable() const {
  absl::MutexLock lock(&mu_);
  return !opened_ || status_.ok();
}

void OpeningMaker::WillMake(const v1::Task& task) const {
  absl::MutexLock lock(&mu_);
  if (!opened_) {
    told_.push_back({true, task});
  } else if (maker_ != nullptr) {
    maker_->WillMake(task);
  }
}

void OpeningMaker::WontMake(const v1::Task& task) const {
  absl::MutexLock lock(&mu_);
  if (!opened_) {
    told_.push_back({false, task});
  } else if (maker_ != nullptr) {
    maker_->WontMake(task);
  }
}

absl::StatusOr<Batch> OpeningMaker::MakeRecords(uint64_t epoch, uint64_t batch,
                                                absl::Span<const uint64_t> ids) const {
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&opened_));
    if (!status_.ok()) return status_;
  }
  return static_cast<const BatchMaker&>(*maker_).MakeRecords(epoch, batch, ids);
}

}  // namespace croupier

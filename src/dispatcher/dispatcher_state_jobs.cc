// DispatcherState: the end of a job's life, i.e. its state (done, running, idle) and its deletion
// (JobDeleted).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/dispatcher/dispatcher_state.h"

namespace croupier {

bool DispatcherState::IsDone(const Job& job) {
  const uint64_t epochs = job.config.num_epochs;
  if (epochs == 0) return false;
  if (job.exhausted() && job.outstanding.empty()) return true;
  // A dealt job is also done once every rank stands at the end: the cursor may still be short of
  // the end when tasks were never cut because every rank resumed past them.
  if (!job.config.dealt() || job.rank_positions.size() < job.config.num_consumers()) return false;
  const TaskKey end(epochs - 1, job.config.StepsInEpoch(epochs - 1));
  return std::all_of(job.rank_positions.begin(), job.rank_positions.end(),
                     [&end](const auto& rank_position) { return rank_position.second >= end; });
}

v1::JobState DispatcherState::StateOf(const Job& job, uint32_t live_consumers) {
  if (IsDone(job)) return v1::JOB_STATE_DONE;
  return live_consumers > 0 ? v1::JOB_STATE_RUNNING : v1::JOB_STATE_IDLE;
}

std::map<std::string, uint32_t, std::less<>> DispatcherState::ConsumersByJob() const {
  std::map<std::string, uint32_t, std::less<>> out;
  for (const auto& [id, c] : consumers_) ++out[c.job];
  return out;
}

absl::Status DispatcherState::ApplyJobDeleted(const journal::JobDeleted& u) {
  auto it = jobs_.find(u.job());
  if (it == jobs_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("journal update does not fit the state: job_deleted of job '", u.job(),
                     "', which is unknown"));
  }
  if (const auto holders = ConsumersByJob(); holders.contains(u.job())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "journal update does not fit the state: job '", u.job(),
        "' cannot be deleted: ", holders.find(u.job())->second, " consumers hold ranks of it"));
  }
  for (const auto& [id, p] : producers_) {
    if (p.source_job == u.job()) {
      return absl::FailedPreconditionError(
          absl::StrCat("journal update does not fit the state: job '", u.job(),
                       "' cannot be deleted: producer ", id, " is its source"));
    }
  }
  const Job& job = it->second;
  for (const auto& [key, o] : job.outstanding) {
    if (o.producer_id != 0) {
      producers_[o.producer_id].tasks.erase(o.task_id);
      tasks_.erase(o.task_id);
    } else {
      orphans_.erase(OrphanKey{key.first, key.second, u.job()});
    }
  }
  const size_t index = job.sequence;
  jobs_.erase(it);
  job_order_.erase(job_order_.begin() + static_cast<std::ptrdiff_t>(index));
  // New tasks go to the jobs in turn after last_cut_job_: after the deleted one's predecessor,
  // the turn passes to its successor, as it would have.
  if (last_cut_job_ == u.job()) last_cut_job_ = index == 0 ? "" : job_order_[index - 1];
  for (size_t i = index; i < job_order_.size(); ++i) jobs_.find(job_order_[i])->second.sequence = i;
  return absl::OkStatus();
}

}  // namespace croupier

// DispatcherImpl: a job's end. Its summary (state and counts, for GetStatus and GetJob), its
// deletion (DeleteJob), and the expiry of done jobs after the retention (Tick).
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/dispatcher/dispatcher_impl.h"
#include "src/dispatcher/locate.h"
#include "src/job/job_settings.h"
#include "src/job/token_job.h"

namespace croupier {

v1::JobSummary DispatcherImpl::SummaryLocked(const DispatcherState::Job& job,
                                             uint32_t live_consumers, absl::Time now) const {
  const v1::JobSpec& spec = job.info->spec();
  v1::JobSummary out;
  out.set_name(spec.name());
  out.set_state(DispatcherState::StateOf(job, live_consumers));
  out.set_source(spec.source());
  out.set_mode(spec.mode());
  out.set_num_consumers(spec.num_consumers());
  out.set_num_epochs(spec.num_epochs());
  out.set_num_records(job.info->num_records());
  out.set_num_files(job.info->files_size());
  out.set_batches_per_epoch(job.info->batches_per_epoch());
  out.set_steps_per_epoch(job.info->steps_per_epoch());
  out.set_consumers(live_consumers);
  out.set_tasks_outstanding(job.outstanding.size());
  out.set_tasks_finished(job.tasks_finished);
  out.set_batches_finished(job.batches_finished);
  out.set_cursor_epoch(job.next_epoch);
  out.set_seconds_to_expiry(-1);
  *out.mutable_producer_advice() = JobAdviceLocked(job);
  out.set_padding_fraction(TokenPaddingFraction(*job.info));
  if (out.state() == v1::JOB_STATE_DONE) {
    // Tick() notes the time; until it has, the job has been done for no time yet.
    auto it = done_since_.find(spec.name());
    const absl::Duration done = it == done_since_.end() ? absl::ZeroDuration() : now - it->second;
    out.set_seconds_done(absl::ToDoubleSeconds(done));
    if (options_.job_retention != absl::InfiniteDuration()) {
      out.set_seconds_to_expiry(
          std::max(0.0, absl::ToDoubleSeconds(options_.job_retention - done)));
    }
  }
  return out;
}

absl::StatusOr<v1::DeleteJobResponse> DispatcherImpl::DeleteJobUnsynced(
    const v1::DeleteJobRequest& request) {
  absl::MutexLock lock(&mu_);
  return DeleteJobLocked(request.name(), request.force(), "on request");
}

absl::StatusOr<v1::DeleteJobResponse> DispatcherImpl::DeleteJobLocked(const std::string& name,
                                                                      bool force,
                                                                      absl::string_view why) {
  const DispatcherState::Job* job = state_.FindJob(name);
  if (job == nullptr) return UnknownJobError(state_, name);
  std::vector<uint64_t> consumers, sources;
  std::vector<std::string> holders;
  for (const auto& [id, c] : state_.consumers()) {
    if (c.job != name) continue;
    consumers.push_back(id);
    holders.push_back(absl::StrCat("consumer ", id, " (rank ", c.rank, ")"));
  }
  if (!consumers.empty() && !force) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", name, "' is read by ", absl::StrJoin(holders, ", "),
                     "; stop them first, or delete with force (croupier job delete --force), "
                     "which removes them"));
  }
  for (const auto& [id, p] : state_.producers()) {
    if (p.source_job == name) sources.push_back(id);
  }
  v1::DeleteJobResponse response;
  *response.mutable_job() = SummaryLocked(*job, consumers.size(), clock_->Now());
  const std::string reason = absl::StrCat("job '", name, "' deleted");
  for (uint64_t id : consumers) RETURN_IF_ERROR(RemoveConsumerLocked(id, reason));
  for (uint64_t id : sources) RETURN_IF_ERROR(RemoveProducerLocked(id, reason));
  // The owned tasks left (none once its last consumer left, which orphans them): their
  // producers drop them at their next heartbeat.
  job = state_.FindJob(name);
  std::vector<std::pair<uint64_t, uint64_t>> owned;  // (producer, task)
  for (const auto& [key, o] : job->outstanding) {
    if (o.producer_id != 0) owned.emplace_back(o.producer_id, o.task_id);
  }
  const size_t outstanding = job->outstanding.size();
  journal::Update update;
  update.mutable_job_deleted()->set_job(name);
  RETURN_IF_ERROR(ApplyLocked(update));
  for (const auto& [producer, task] : owned) producer_info_[producer].revoked.push_back(task);
  // A job of the same name created later is another job: producers must be sent its JobInfo.
  for (auto& [id, info] : producer_info_) info.jobs_sent.erase(name);
  done_since_.erase(name);
  job_advisors_.erase(name);  // a job of the same name created later is measured afresh
  response.set_consumers_removed(consumers.size());
  response.set_producers_removed(sources.size());
  response.set_tasks_revoked(outstanding);
  Log(LogLevel::kInfo, "dispatcher",
      absl::StrCat("deleted job '", name, "' (", why, ", state ",
                   JobStateName(response.job().state()), "): ", consumers.size(), " consumers and ",
                   sources.size(), " source producers removed, ", outstanding,
                   " outstanding tasks dropped"));
  return response;
}

void DispatcherImpl::ExpireDoneJobsLocked(absl::Time now) {
  const auto readers = state_.ConsumersByJob();
  std::vector<std::string> expired;
  for (const std::string& name : state_.job_order()) {
    const DispatcherState::Job& job = *state_.FindJob(name);
    if (!DispatcherState::IsDone(job)) {
      done_since_.erase(name);
      continue;
    }
    // First seen done now (a job replayed done: at the first Tick after the start).
    const absl::Time since = done_since_.try_emplace(name, now).first->second;
    if (options_.job_retention == absl::InfiniteDuration() || readers.contains(name)) continue;
    if (now - since >= options_.job_retention) expired.push_back(name);
  }
  for (const std::string& name : expired) {
    absl::StatusOr<v1::DeleteJobResponse> deleted = DeleteJobLocked(
        name, /*force=*/false,
        absl::StrCat("done for ", absl::FormatDuration(now - done_since_[name]),
                     ", past the retention of ", absl::FormatDuration(options_.job_retention)));
    if (!deleted.ok()) Log(LogLevel::kError, "dispatcher", deleted.status().ToString());
  }
}

}  // namespace croupier

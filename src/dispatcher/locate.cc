#include "src/dispatcher/locate.h"


#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/dispatcher/task_assignment.h"

namespace croupier {

absl::Status UnknownJobError(const DispatcherState& state, absl::string_view name) {
  const std::vector<std::string>& jobs = state.job_order();
  return absl::NotFoundError(absl::StrCat(
      "job '", name, "' is unknown (",
      jobs.empty() ? "there are no jobs" : absl::StrCat("jobs: ", absl::StrJoin(jobs, ", ")), ")"));
}

absl::StatusOr<v1::LocateResponse> LocateTasks(const DispatcherState& state,
                                               const v1::LocateRequest& request) {
  const DispatcherState::Job* job = state.FindJob(request.job());
  if (job == nullptr) return UnknownJobError(state, request.job());
  const v1::JobInfo& info = *job->info;
  const uint64_t epochs = info.spec().num_epochs();
  const uint64_t epoch = request.epoch();
  if (epochs > 0 && epoch >= epochs) {
    return absl::OutOfRangeError(absl::StrCat("epoch ", epoch, " is past the end: job '",
                                              request.job(), "' has ", epochs, " epochs"));
  }
  if (request.num_batches() == 0) {
    return absl::InvalidArgumentError("Locate needs num_batches >= 1");
  }
  const uint64_t total = info.batches_per_epoch();
  if (request.first_batch() >= total || request.num_batches() > total - request.first_batch()) {
    return absl::OutOfRangeError(absl::StrCat(
        "batches [", request.first_batch(), ", ", request.first_batch() + request.num_batches(),
        ") of epoch ", epoch, " are past the end of the epoch: job '", request.job(), "' has ",
        total, " batches per epoch"));
  }

  const uint64_t per_task = info.batches_per_task();
  const uint64_t end = request.first_batch() + request.num_batches();
  // The whole tasks covering the range: [pos, limit). Tasks are cut from the epoch's first batch
  // (src/job/job.h) on; batches before it are not dealt in this epoch.
  const uint64_t first = job->config.FirstBatch(epoch);
  if (request.first_batch() < first) {
    return absl::OutOfRangeError(absl::StrCat(
        "batch ", request.first_batch(), " of epoch ", epoch, " is not dealt: job '",
        request.job(), "' resumes at batch ", first, " of epoch ", epoch));
  }
  const uint64_t limit = std::min(
      job->config.EndBatch(epoch), first + (end - first + per_task - 1) / per_task * per_task);
  uint64_t pos = first + (request.first_batch() - first) / per_task * per_task;
  v1::LocateResponse response;
  while (pos < limit) {
    v1::TaskLocation* loc = response.add_tasks();
    v1::Task* task = loc->mutable_task();
    task->set_job(request.job());
    task->set_epoch(epoch);
    task->set_first_batch(pos);
    auto it = job->outstanding.lower_bound({epoch, pos});
    if (it != job->outstanding.end() && it->first == DispatcherState::TaskKey(epoch, pos)) {
      const DispatcherState::Outstanding& o = it->second;
      task->set_task_id(o.task_id);
      task->set_num_batches(o.num_batches);
      if (o.producer_id != 0) {
        loc->set_producer_address(state.FindProducer(o.producer_id)->data_address);
      } else {
        loc->set_waiting_for(WhyNotAssigned(state, *job, epoch, pos));
      }
      pos += o.num_batches;
      continue;
    }
    // A run of tasks nobody holds: finished if cut, else not cut yet. It stops at the next
    // outstanding task and, if finished, at the cursor.
    uint64_t run_end = limit;
    if (it != job->outstanding.end() && it->first.first == epoch) {
      run_end = std::min(run_end, it->first.second);
    }
    const bool finished = job->IsCut(epoch, pos);
    if (finished && job->next_epoch == epoch) run_end = std::min(run_end, job->next_batch);
    task->set_num_batches(run_end - pos);
    loc->set_finished(finished);
    if (!finished) loc->set_waiting_for(WhyNotAssigned(state, *job, epoch, pos));
    pos = run_end;
  }
  auto next = job->outstanding.lower_bound({epoch, 0});
  const bool none_outstanding = next == job->outstanding.end() || next->first.first != epoch;
  response.set_epoch_finished(job->next_epoch > epoch && none_outstanding);
  return response;
}

}  // namespace croupier

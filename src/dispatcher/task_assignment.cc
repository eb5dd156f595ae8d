#include "src/dispatcher/task_assignment.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace croupier {
namespace {

v1::Task MakeTask(const DispatcherState& state, const std::string& job, uint64_t epoch,
                  uint64_t first, uint64_t num) {
  v1::Task task;
  task.set_task_id(state.next_task_id());
  task.set_job(job);
  task.set_epoch(epoch);
  task.set_first_batch(first);
  task.set_num_batches(num);
  return task;
}

// Whether `producer` can make the batches of `job`'s task starting at `first_batch` of `epoch`: a
// Python job's tasks come from its own sources (JobConfig::SourceOf), a map job's from any
// producer registered for it. A draining producer makes nothing new.
bool CanMake(const DispatcherState::Producer& producer, const DispatcherState::Job& job,
             uint64_t epoch, uint64_t first_batch) {
  if (producer.draining) return false;
  if (!job.config.made_by_sources()) return producer.source_job.empty();
  return producer.source_job == job.name() &&
         (job.config.map() || job.config.SourceOf(epoch, first_batch) == producer.source_index);
}

// Whether `producer` should get a task of `job` now: one it can make, of a job that is not idle
// (a new job is not: producers start on it before its consumers come).
bool Wanted(const DispatcherState& state, const DispatcherState::Producer& producer,
            const DispatcherState::Job& job, uint64_t epoch, uint64_t first_batch) {
  return CanMake(producer, job, epoch, first_batch) && !job.idle;
}

}  // namespace

std::optional<v1::Task> NextTask(const DispatcherState& state,
                                 const DispatcherState::Producer& producer) {
  for (const DispatcherState::OrphanKey& o : state.orphans()) {
    const DispatcherState::Job& job = *state.FindJob(o.job);
    if (!Wanted(state, producer, job, o.epoch, o.first_batch)) continue;
    const auto& outstanding = job.outstanding.at({o.epoch, o.first_batch});
    return MakeTask(state, o.job, o.epoch, o.first_batch, outstanding.num_batches);
  }
  const std::vector<std::string>& order = state.job_order();
  if (order.empty()) return std::nullopt;
  size_t start = 0;
  if (const DispatcherState::Job* last = state.FindJob(state.last_cut_job())) {
    start = last->sequence + 1;
  }
  for (size_t i = 0; i < order.size(); ++i) {
    const DispatcherState::Job& job = *state.FindJob(order[(start + i) % order.size()]);
    if (job.exhausted() || !Wanted(state, producer, job, job.next_epoch, job.next_batch)) continue;
    const uint64_t end = job.config.TaskEnd(job.next_epoch, job.next_batch);
    return MakeTask(state, job.name(), job.next_epoch, job.next_batch, end - job.next_batch);
  }
  return std::nullopt;
}

std::string WhyNotAssigned(const DispatcherState& state, const DispatcherState::Job& job,
                           uint64_t epoch, uint64_t first_batch) {
  if (job.idle) return absl::StrCat("job '", job.name(), "' is idle: no consumer holds a rank");
  std::vector<std::string> busy;
  for (const auto& [id, producer] : state.producers()) {
    if (!CanMake(producer, job, epoch, first_batch)) continue;
    std::string holds = absl::StrCat("producer ", id, " at ", producer.data_address, " holds ",
                                     producer.tasks.size(), " tasks");
    if (!producer.tasks.empty()) {
      if (const v1::Task* t = state.FindTask(*producer.tasks.begin())) {
        absl::StrAppend(&holds, ", the first batches [", t->first_batch(), ", ",
                        t->first_batch() + t->num_batches(), ") of job '", t->job(), "' epoch ",
                        t->epoch());
      }
    }
    busy.push_back(std::move(holds));
  }
  if (busy.empty()) {
    if (job.config.map()) {
      return absl::StrCat("no producer of map job '", job.name(),
                          "' is registered: start croupier.produce() for it");
    }
    if (job.config.python()) {
      return absl::StrCat("source ", job.config.SourceOf(epoch, first_batch), " of job '",
                          job.name(), "' (croupier.serve) is not registered");
    }
    return absl::StrCat("no producer is registered (", state.producers().size(),
                        " producers serve only Python jobs): start croupier producer");
  }
  return absl::StrCat("every producer that can make it is busy and has not taken its task yet (",
                      absl::StrJoin(busy, "; "), ")");
}

}  // namespace croupier

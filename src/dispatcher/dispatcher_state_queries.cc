// DispatcherState: everything but Apply, i.e. the read-only queries and the dump.
#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/dispatcher/dispatcher_state.h"
#include "src/job/batch_key.h"

namespace croupier {

bool DispatcherState::Job::exhausted() const {
  return info->spec().num_epochs() > 0 && next_epoch >= info->spec().num_epochs();
}

bool DispatcherState::Job::IsCut(uint64_t epoch, uint64_t batch) const {
  return TaskKey(epoch, batch) < TaskKey(next_epoch, next_batch);
}

std::vector<DispatcherState::TaskKey> DispatcherState::TasksToReopen(const Job& job,
                                                                     uint64_t epoch,
                                                                     uint64_t step) {
  const JobConfig& config = job.config;
  std::vector<TaskKey> out;
  const TaskKey cursor(job.next_epoch, job.next_batch);
  TaskKey key = FirstUndeliveredTask(job, epoch, step);
  // A position in an epoch that deals nothing (before a resumed job's start_epoch, or that epoch
  // when its last round was dealt already): from the next task, since that epoch has none.
  if (key.second >= config.EndBatch(key.first)) key = NextTaskKey(config, key);
  if (!(key < cursor)) return out;
  auto it = job.outstanding.lower_bound(key);
  // Every task from the position to the cursor still outstanding (as when consumers register
  // while the job's first tasks are made): counted, not visited, so that a registration costs
  // the same whatever the number of tasks cut. Every outstanding task is before the cursor. The
  // count needs every epoch after the first to deal, as any job the dispatcher accepts does;
  // otherwise the walk below decides alone.
  if (config.StepsInEpoch(config.start_epoch + 1) > 0) {
    const uint64_t tasks =
        config.TaskOrdinal(cursor.first, cursor.second) - config.TaskOrdinal(key.first, key.second);
    const uint64_t outstanding =
        it == job.outstanding.begin()
            ? job.outstanding.size()
            : static_cast<uint64_t>(std::distance(it, job.outstanding.end()));
    if (tasks == outstanding) return out;
  }
  // Otherwise each task to the cursor, beside the outstanding ones in the same order.
  for (; key < cursor; key = NextTaskKey(config, key)) {
    while (it != job.outstanding.end() && it->first < key) ++it;
    if (it != job.outstanding.end() && it->first == key) continue;
    out.push_back(key);
  }
  return out;
}

std::optional<DispatcherState::TaskKey> DispatcherState::FinishedTaskOf(const Job& job,
                                                                        uint64_t epoch,
                                                                        uint64_t batch) {
  const JobConfig& config = job.config;
  if (batch < config.FirstBatch(epoch) || batch >= config.EndBatch(epoch)) return std::nullopt;
  const TaskKey key = TaskHolding(config, epoch, batch);
  if (!job.IsCut(key.first, key.second) || job.outstanding.contains(key)) return std::nullopt;
  return key;
}

DispatcherState::TaskKey DispatcherState::NextTaskKey(const JobConfig& job, TaskKey key) {
  key.second = job.TaskEnd(key.first, key.second);
  // Past an epoch's last task, or at an epoch that deals nothing: the next epoch's first task.
  while (key.second >= job.EndBatch(key.first)) {
    key.first += 1;
    key.second = job.FirstBatch(key.first);
    if (job.StepsInEpoch(key.first) > 0 || key.first > job.start_epoch) break;
  }
  return key;
}

DispatcherState::TaskKey DispatcherState::FirstUndeliveredTask(const Job& job, uint64_t epoch,
                                                               uint64_t step) {
  const JobConfig& config = job.config;
  const uint64_t batch = config.FirstBatch(epoch) + step * config.num_consumers();
  if (batch >= config.EndBatch(epoch)) return TaskKey(epoch + 1, config.FirstBatch(epoch + 1));
  return TaskHolding(config, epoch, batch);
}

DispatcherState::TaskKey DispatcherState::TaskHolding(const JobConfig& job, uint64_t epoch,
                                                      uint64_t batch) {
  return TaskKey(epoch, job.TaskStart(epoch, batch));
}

std::optional<DispatcherState::TaskKey> DispatcherState::DeliveredFrontier(const Job& job) const {
  if (!job.config.dealt()) return std::nullopt;
  const uint32_t n = job.info->spec().num_consumers();
  if (job.rank_positions.size() < n) return std::nullopt;
  return *job.positions.begin();
}

std::vector<std::pair<DispatcherState::TaskKey, DispatcherState::Outstanding>>
DispatcherState::TasksBefore(const Job& job, uint64_t epoch, uint64_t step) {
  // Tasks are whole rounds of N batches (batches_per_task and batches_per_epoch are multiples of
  // N), so a task ending at batch b ends at step b / N; outstanding tasks end in key order.
  const uint64_t n = job.info->spec().num_consumers();
  std::vector<std::pair<TaskKey, Outstanding>> out;
  for (const auto& [key, o] : job.outstanding) {
    const uint64_t first = job.config.FirstBatch(key.first);
    const uint64_t end_step = (key.second + o.num_batches - first + n - 1) / n;
    if (TaskKey(key.first, end_step) > TaskKey(epoch, step)) break;
    out.emplace_back(key, o);
  }
  return out;
}

absl::Status DispatcherState::CheckPosition(const Job& job, uint64_t epoch, uint64_t step) {
  const v1::JobSpec& spec = job.info->spec();
  const uint64_t epochs = spec.num_epochs();
  if (epochs > 0 && (epoch > epochs || (epoch == epochs && step > 0))) {
    return absl::InvalidArgumentError(absl::StrCat("position epoch ", epoch, " step ", step,
                                                   " is past the end of job '", spec.name(),
                                                   "', which has ", epochs, " epochs"));
  }
  const uint64_t max_step =
      job.config.dealt() ? job.config.StepsInEpoch(epoch) : job.config.batches_per_epoch;
  if (step > max_step) {
    return absl::InvalidArgumentError(absl::StrCat(
        "position epoch ", epoch, " step ", step, " is past the end of the epoch: job '",
        spec.name(), "' has ", max_step,
        !job.config.dealt()                                 ? std::string(" batches per epoch")
        : max_step == job.info->steps_per_epoch() ? std::string(" steps per epoch")
                                                 : absl::StrCat(" steps in epoch ", epoch)));
  }
  return absl::OkStatus();
}

DispatcherState::Job* DispatcherState::MutableJob(absl::string_view name) {
  auto it = jobs_.find(name);
  return it == jobs_.end() ? nullptr : &it->second;
}

const DispatcherState::Job* DispatcherState::FindJob(absl::string_view name) const {
  auto it = jobs_.find(name);
  return it == jobs_.end() ? nullptr : &it->second;
}

const DispatcherState::Producer* DispatcherState::FindProducer(uint64_t id) const {
  auto it = producers_.find(id);
  return it == producers_.end() ? nullptr : &it->second;
}

const DispatcherState::Consumer* DispatcherState::FindConsumer(uint64_t id) const {
  auto it = consumers_.find(id);
  return it == consumers_.end() ? nullptr : &it->second;
}

bool DispatcherState::HasConsumers(absl::string_view job) const {
  return consumers_of_.find(job) != consumers_of_.end();
}

const DispatcherState::Consumer* DispatcherState::ConsumerAt(absl::string_view job,
                                                             uint32_t rank) const {
  auto it = consumer_at_.find(std::make_pair(std::string(job), rank));
  return it == consumer_at_.end() ? nullptr : &consumers_.find(it->second)->second;
}

const DispatcherState::Producer* DispatcherState::ProducerAt(absl::string_view data_address) const {
  auto it = producer_at_.find(data_address);
  return it == producer_at_.end() ? nullptr : &producers_.find(it->second)->second;
}

const v1::Task* DispatcherState::FindTask(uint64_t task_id) const {
  auto it = tasks_.find(task_id);
  return it == tasks_.end() ? nullptr : &it->second;
}

std::string DispatcherState::DebugString() const {
  std::string out =
      absl::StrCat("next ids: producer ", next_producer_id(), " consumer ", next_consumer_id(),
                   " task ", next_task_id(), "\nlast cut job: '", last_cut_job_, "'\n");
  for (const std::string& name : job_order_) {
    const Job& j = jobs_.find(name)->second;
    absl::StrAppend(&out, "job ", j.sequence, " {", j.info->ShortDebugString(), "} cursor ",
                    j.next_epoch, "/", j.next_batch, " finished ", j.tasks_finished, "/",
                    j.batches_finished, j.idle ? " idle" : "", "\n");
    for (const auto& [key, o] : j.outstanding) {
      absl::StrAppend(&out, "  outstanding ", DescribeBatches(key.first, key.second, o.num_batches),
                      " task ", o.task_id, " producer ", o.producer_id, "\n");
    }
    for (const auto& [rank, p] : j.rank_positions) {
      absl::StrAppend(&out, "  rank ", rank, " at ", p.first, "/", p.second, "\n");
    }
  }
  for (const auto& [id, p] : producers_) {
    absl::StrAppend(&out, "producer ", id, " ", p.data_address, " tasks [",
                    absl::StrJoin(p.tasks, ","), "]", p.draining ? " draining" : "", "\n");
  }
  for (const auto& [id, t] : tasks_) absl::StrAppend(&out, "task {", t.ShortDebugString(), "}\n");
  for (const OrphanKey& o : orphans_) {
    absl::StrAppend(&out, "orphan '", o.job, "' epoch ", o.epoch, " batch ", o.first_batch, "\n");
  }
  for (const auto& [id, c] : consumers_) {
    absl::StrAppend(&out, "consumer ", id, " '", c.job, "' rank ", c.rank, " at ", c.epoch, "/",
                    c.step, "\n");
  }
  return out;
}

}  // namespace croupier

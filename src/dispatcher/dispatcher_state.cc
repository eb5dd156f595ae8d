// DispatcherState::Apply: one handler per kind of journal update. Each checks everything before it
// changes anything, so a refused update leaves the state as it was. The queries and the dump are
// in dispatcher_state_queries.cc, a job's end (state, deletion) in dispatcher_state_jobs.cc.
#include "src/dispatcher/dispatcher_state.h"

#include <tuple>

#include "absl/strings/str_cat.h"
#include "croupier/plan.h"
#include "src/job/batch_key.h"

namespace croupier {
namespace {

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed journal update: ", what));
}

absl::Status DoesNotFit(absl::string_view what) {
  return absl::FailedPreconditionError(
      absl::StrCat("journal update does not fit the state: ", what));
}

}  // namespace

absl::Status DispatcherState::Apply(const journal::Update& update) {
  if (!snapshot_jobs_.empty() && !update.has_snapshot_job() && !update.has_snapshot_end()) {
    return DoesNotFit("a snapshot's jobs without its snapshot_end");
  }
  switch (update.kind_case()) {
    case journal::Update::kJobCreated:
      return ApplyJobCreated(update.job_created());
    case journal::Update::kProducerRegistered:
      return ApplyProducerRegistered(update.producer_registered());
    case journal::Update::kProducerRemoved:
      return ApplyProducerRemoved(update.producer_removed());
    case journal::Update::kProducerDraining:
      return ApplyProducerDraining(update.producer_draining());
    case journal::Update::kTaskAssigned:
      return ApplyTaskAssigned(update.task_assigned());
    case journal::Update::kTaskFinished:
      return ApplyTaskFinished(update.task_finished());
    case journal::Update::kConsumerRegistered:
      return ApplyConsumerRegistered(update.consumer_registered());
    case journal::Update::kConsumerAcknowledged:
      return ApplyConsumerAcknowledged(update.consumer_acknowledged());
    case journal::Update::kConsumerRemoved:
      return ApplyConsumerRemoved(update.consumer_removed());
    case journal::Update::kTasksDelivered:
      return ApplyTasksDelivered(update.tasks_delivered());
    case journal::Update::kTasksReopened:
      return ApplyTasksReopened(update.tasks_reopened());
    case journal::Update::kJobIdle:
      return ApplyJobIdle(update.job_idle());
    case journal::Update::kTaskRemade:
      return ApplyTaskRemade(update.task_remade());
    case journal::Update::kJobDeleted:
      return ApplyJobDeleted(update.job_deleted());
    case journal::Update::kSnapshotJob:
      return ApplySnapshotJob(update.snapshot_job());
    case journal::Update::kSnapshotEnd:
      return ApplySnapshotEnd(update.snapshot_end());
    case journal::Update::KIND_NOT_SET:
      break;
  }
  return Malformed("no kind set");
}

absl::Status DispatcherState::ApplyJobCreated(const journal::JobCreated& u) {
  const v1::JobInfo& info = u.job();
  const v1::JobSpec& spec = info.spec();
  if (spec.name().empty()) return Malformed("job_created without a job name");
  if (jobs_.contains(spec.name())) {
    return DoesNotFit(absl::StrCat("job '", spec.name(), "' exists already"));
  }
  if (u.plan_version() != static_cast<uint32_t>(kPlanVersion)) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", spec.name(), "' was created with plan version ", u.plan_version(),
                     ", but this dispatcher computes plan version ", kPlanVersion,
                     ": its batches would hold other records"));
  }
  absl::StatusOr<JobConfig> config = ParseJobConfig(info);
  if (!config.ok()) return Malformed(config.status().message());
  const uint64_t n = spec.num_consumers();
  if (n == 0 || info.batches_per_epoch() == 0 || info.batches_per_epoch() % n != 0 ||
      info.steps_per_epoch() != info.batches_per_epoch() / n || info.batches_per_task() == 0 ||
      info.batches_per_task() % n != 0) {
    return Malformed(absl::StrCat(
        "job '", spec.name(), "' has inconsistent counts: ", spec.num_consumers(), " consumers, ",
        info.batches_per_epoch(), " batches and ", info.steps_per_epoch(), " steps per epoch, ",
        info.batches_per_task(), " batches per task"));
  }
  Job job;
  job.info = std::make_shared<const v1::JobInfo>(info);
  job.config = *std::move(config);
  // A job resuming another's checkpoint starts its cursor there (JobConfig::FirstBatch).
  job.next_epoch = spec.start_epoch();
  job.next_batch = job.config.FirstBatch(spec.start_epoch());
  job.sequence = job_order_.size();
  job_order_.push_back(spec.name());
  jobs_.emplace(spec.name(), std::move(job));
  return absl::OkStatus();
}

absl::Status DispatcherState::ApplyProducerRegistered(const journal::ProducerRegistered& u) {
  if (u.producer_id() != next_producer_id()) {
    return DoesNotFit(absl::StrCat("producer id ", u.producer_id(), " out of order; expected ",
                                   next_producer_id()));
  }
  if (u.data_address().empty()) return Malformed("producer_registered without a data address");
  if (u.draining()) return Malformed("producer_registered draining outside a snapshot");
  if (const Producer* holder = ProducerAt(u.data_address())) {
    return DoesNotFit(
        absl::StrCat("address ", u.data_address(), " is held by producer ", holder->id));
  }
  if (!u.source_job().empty()) {
    const Job* job = FindJob(u.source_job());
    if (job == nullptr || !job->config.made_by_sources()) {
      return DoesNotFit(absl::StrCat("producer ", u.producer_id(), " is the source of '",
                                     u.source_job(), "', which is not a python or map job"));
    }
    if (u.source_index() >= std::max<uint32_t>(1, job->info->spec().source_count())) {
      return DoesNotFit(absl::StrCat("job '", u.source_job(), "' has no source ",
                                     u.source_index()));
    }
  }
  Producer p;
  p.id = u.producer_id();
  p.data_address = u.data_address();
  p.source_job = u.source_job();
  p.source_index = u.source_index();
  AddProducer(std::move(p));
  last_producer_id_ = u.producer_id();
  return absl::OkStatus();
}

absl::Status DispatcherState::ApplyProducerRemoved(const journal::ProducerRemoved& u) {
  auto it = producers_.find(u.producer_id());
  if (it == producers_.end()) {
    return DoesNotFit(absl::StrCat("producer ", u.producer_id(), " is unknown"));
  }
  for (uint64_t task_id : std::set<uint64_t>(it->second.tasks)) OrphanTask(task_id);
  EraseProducer(it);
  return absl::OkStatus();
}

absl::Status DispatcherState::ApplyProducerDraining(const journal::ProducerDraining& u) {
  auto it = producers_.find(u.producer_id());
  if (it == producers_.end()) {
    return DoesNotFit(absl::StrCat("producer ", u.producer_id(), " is unknown"));
  }
  Producer& producer = it->second;
  if (producer.draining) {
    return DoesNotFit(absl::StrCat("producer ", u.producer_id(), " drains already"));
  }
  const std::set<uint64_t> kept(u.kept_tasks().begin(), u.kept_tasks().end());
  for (uint64_t task_id : kept) {
    if (!producer.tasks.contains(task_id)) {
      return DoesNotFit(absl::StrCat("producer ", u.producer_id(), " keeps task ", task_id,
                                     ", which it does not own"));
    }
  }
  for (uint64_t task_id : std::set<uint64_t>(producer.tasks)) {
    if (!kept.contains(task_id)) OrphanTask(task_id);
  }
  producer.draining = true;
  return absl::OkStatus();
}

void DispatcherState::OrphanTask(uint64_t task_id) {
  auto t = tasks_.find(task_id);
  const v1::Task& task = t->second;
  Outstanding& o = MutableJob(task.job())->outstanding[{task.epoch(), task.first_batch()}];
  producers_[o.producer_id].tasks.erase(task_id);
  o.task_id = 0;
  o.producer_id = 0;
  orphans_.insert(OrphanKey{task.epoch(), task.first_batch(), task.job()});
  tasks_.erase(t);
}

absl::Status DispatcherState::ApplyJobIdle(const journal::JobIdle& u) {
  Job* job = MutableJob(u.job());
  if (job == nullptr) {
    return DoesNotFit(absl::StrCat("job_idle of job '", u.job(), "', which is unknown"));
  }
  if (HasConsumers(u.job())) {
    return DoesNotFit(absl::StrCat("job '", u.job(), "' is not idle: a consumer holds a rank"));
  }
  std::vector<uint64_t> owned;
  for (const auto& [key, o] : job->outstanding) {
    if (o.producer_id != 0) owned.push_back(o.task_id);
  }
  for (uint64_t task_id : owned) OrphanTask(task_id);
  job->idle = true;
  return absl::OkStatus();
}

absl::Status DispatcherState::ApplyTaskAssigned(const journal::TaskAssigned& u) {
  const v1::Task& task = u.task();
  if (task.task_id() != next_task_id()) {
    return DoesNotFit(
        absl::StrCat("task id ", task.task_id(), " out of order; expected ", next_task_id()));
  }
  auto producer = producers_.find(u.producer_id());
  if (producer == producers_.end()) {
    return DoesNotFit(absl::StrCat("task ", task.task_id(), " goes to producer ", u.producer_id(),
                                   ", which is unknown"));
  }
  if (producer->second.draining) {
    return DoesNotFit(absl::StrCat("task ", task.task_id(), " goes to producer ", u.producer_id(),
                                   ", which drains"));
  }
  Job* job = MutableJob(task.job());
  if (job == nullptr) {
    return DoesNotFit(
        absl::StrCat("task ", task.task_id(), " is of job '", task.job(), "', which is unknown"));
  }
  if (task.num_batches() == 0) return Malformed(absl::StrCat("task ", task.task_id(), " is empty"));
  const TaskKey key(task.epoch(), task.first_batch());
  auto orphan = job->outstanding.find(key);
  const bool is_orphan = orphan != job->outstanding.end() && orphan->second.producer_id == 0 &&
                         orphan->second.num_batches == task.num_batches();
  const bool is_next =
      !is_orphan && !job->exhausted() && key == TaskKey(job->next_epoch, job->next_batch) &&
      task.first_batch() + task.num_batches() ==
          job->config.TaskEnd(job->next_epoch, job->next_batch);
  if (!is_orphan && !is_next) {
    return DoesNotFit(absl::StrCat(
        "task ", task.task_id(), " of job '", task.job(), "' covers ",
        DescribeBatches(task.epoch(), task.first_batch(), task.num_batches()),
        ", which is neither an orphan nor the job's next task",
        job->exhausted()
            ? " (every epoch is cut already)"
            : absl::StrCat(" (epoch ", job->next_epoch, " batch ", job->next_batch, ")")));
  }
  if (is_orphan) {
    orphans_.erase(OrphanKey{task.epoch(), task.first_batch(), task.job()});
    orphan->second.task_id = task.task_id();
    orphan->second.producer_id = u.producer_id();
  } else {
    job->outstanding[key] = Outstanding{task.num_batches(), task.task_id(), u.producer_id()};
    std::tie(job->next_epoch, job->next_batch) =
        NextTaskKey(job->config, TaskKey(job->next_epoch, job->next_batch));
    last_cut_job_ = task.job();
  }
  tasks_[task.task_id()] = task;
  producer->second.tasks.insert(task.task_id());
  last_task_id_ = task.task_id();
  return absl::OkStatus();
}

absl::Status DispatcherState::ApplyTaskFinished(const journal::TaskFinished& u) {
  auto it = tasks_.find(u.task_id());
  if (it == tasks_.end()) {
    return DoesNotFit(absl::StrCat("task ", u.task_id(), " is not outstanding"));
  }
  const v1::Task& task = it->second;
  Job* job = MutableJob(task.job());
  const TaskKey key(task.epoch(), task.first_batch());
  const uint64_t owner = job->outstanding.at(key).producer_id;
  if (owner != u.producer_id()) {
    return DoesNotFit(absl::StrCat("task ", u.task_id(), " is owned by producer ", owner, ", not ",
                                   u.producer_id()));
  }
  FinishTask(*job, key);
  return absl::OkStatus();
}

void DispatcherState::FinishTask(Job& job, const TaskKey& key) {
  auto o = job.outstanding.find(key);
  ++job.tasks_finished;
  job.batches_finished += o->second.num_batches;
  if (o->second.producer_id == 0) {
    orphans_.erase(OrphanKey{key.first, key.second, job.name()});
  } else {
    producers_[o->second.producer_id].tasks.erase(o->second.task_id);
    tasks_.erase(o->second.task_id);
  }
  job.outstanding.erase(o);
}

absl::Status DispatcherState::ApplyTasksReopened(const journal::TasksReopened& u) {
  Job* job = MutableJob(u.job());
  if (job == nullptr) {
    return DoesNotFit(absl::StrCat("tasks_reopened of job '", u.job(), "', which is unknown"));
  }
  if (absl::Status s = CheckPosition(*job, u.epoch(), u.step()); !s.ok()) return s;
  for (const TaskKey& key : TasksToReopen(*job, u.epoch(), u.step())) ReopenTask(*job, key);
  return absl::OkStatus();
}

absl::Status DispatcherState::ApplyTaskRemade(const journal::TaskRemade& u) {
  Job* job = MutableJob(u.job());
  if (job == nullptr) {
    return DoesNotFit(absl::StrCat("task_remade of job '", u.job(), "', which is unknown"));
  }
  const std::optional<TaskKey> key = FinishedTaskOf(*job, u.epoch(), u.first_batch());
  if (!job->config.dealt() || !key || key->second != u.first_batch()) {
    return DoesNotFit(absl::StrCat("task_remade of job '", u.job(), "' epoch ", u.epoch(),
                                   " batch ", u.first_batch(),
                                   ", which is not the start of a finished task"));
  }
  ReopenTask(*job, *key);
  return absl::OkStatus();
}

void DispatcherState::ReopenTask(Job& job, const TaskKey& key) {
  job.outstanding[key] = Outstanding{job.config.TaskEnd(key.first, key.second) - key.second, 0, 0};
  orphans_.insert(OrphanKey{key.first, key.second, job.name()});
}

absl::Status DispatcherState::ApplyTasksDelivered(const journal::TasksDelivered& u) {
  Job* job = MutableJob(u.job());
  if (job == nullptr) {
    return DoesNotFit(absl::StrCat("tasks_delivered of job '", u.job(), "', which is unknown"));
  }
  const std::optional<TaskKey> frontier = DeliveredFrontier(*job);
  if (!frontier || TaskKey(u.epoch(), u.step()) > *frontier) {
    return DoesNotFit(absl::StrCat(
        "job '", u.job(), "': epoch ", u.epoch(), " step ", u.step(),
        " is not delivered to every rank (",
        frontier
            ? absl::StrCat("the frontier is epoch ", frontier->first, " step ", frontier->second)
            : "no frontier: a first_come job, or a rank without a consumer",
        ")"));
  }
  for (const auto& [key, o] : TasksBefore(*job, u.epoch(), u.step())) FinishTask(*job, key);
  const TaskKey cursor = FirstUndeliveredTask(*job, u.epoch(), u.step());
  if (cursor > TaskKey(job->next_epoch, job->next_batch)) {
    job->next_epoch = cursor.first;
    job->next_batch = cursor.second;
  }
  return absl::OkStatus();
}

absl::Status DispatcherState::ApplyConsumerRegistered(const journal::ConsumerRegistered& u) {
  if (u.consumer_id() != next_consumer_id()) {
    return DoesNotFit(absl::StrCat("consumer id ", u.consumer_id(), " out of order; expected ",
                                   next_consumer_id()));
  }
  const Job* job = FindJob(u.job());
  if (job == nullptr) {
    return DoesNotFit(
        absl::StrCat("consumer ", u.consumer_id(), " is of job '", u.job(), "', which is unknown"));
  }
  if (u.rank() >= job->info->spec().num_consumers()) {
    return Malformed(absl::StrCat("consumer ", u.consumer_id(), " has rank ", u.rank(), " of job '",
                                  u.job(), "', which has ", job->info->spec().num_consumers(),
                                  " consumers"));
  }
  if (const Consumer* holder = ConsumerAt(u.job(), u.rank())) {
    return DoesNotFit(absl::StrCat("rank ", u.rank(), " of job '", u.job(),
                                   "' is held by consumer ", holder->id));
  }
  if (absl::Status s = CheckPosition(*job, u.epoch(), u.step()); !s.ok()) return s;
  AddConsumer(Consumer{u.consumer_id(), u.job(), u.rank(), u.epoch(), u.step(), u.lease()});
  Job* mutable_job = MutableJob(u.job());
  SetRankPosition(*mutable_job, u.rank(), TaskKey(u.epoch(), u.step()));
  mutable_job->idle = false;
  last_consumer_id_ = u.consumer_id();
  return absl::OkStatus();
}

absl::Status DispatcherState::ApplyConsumerAcknowledged(const journal::ConsumerAcknowledged& u) {
  auto it = consumers_.find(u.consumer_id());
  if (it == consumers_.end()) {
    return DoesNotFit(absl::StrCat("consumer ", u.consumer_id(), " is unknown"));
  }
  if (absl::Status s = CheckPosition(*FindJob(it->second.job), u.epoch(), u.step()); !s.ok()) {
    return s;
  }
  it->second.epoch = u.epoch();
  it->second.step = u.step();
  SetRankPosition(*MutableJob(it->second.job), it->second.rank, TaskKey(u.epoch(), u.step()));
  return absl::OkStatus();
}

absl::Status DispatcherState::ApplyConsumerRemoved(const journal::ConsumerRemoved& u) {
  auto it = consumers_.find(u.consumer_id());
  if (it == consumers_.end()) {
    return DoesNotFit(absl::StrCat("consumer ", u.consumer_id(), " is unknown"));
  }
  EraseConsumer(it);
  return absl::OkStatus();
}

void DispatcherState::AddConsumer(Consumer consumer) {
  consumer_at_[{consumer.job, consumer.rank}] = consumer.id;
  ++consumers_of_[consumer.job];
  const uint64_t id = consumer.id;
  consumers_[id] = std::move(consumer);
}

void DispatcherState::EraseConsumer(std::map<uint64_t, Consumer>::iterator it) {
  consumer_at_.erase({it->second.job, it->second.rank});
  auto count = consumers_of_.find(it->second.job);
  if (--count->second == 0) consumers_of_.erase(count);
  consumers_.erase(it);
}

void DispatcherState::AddProducer(Producer producer) {
  producer_at_[producer.data_address] = producer.id;
  const uint64_t id = producer.id;
  producers_[id] = std::move(producer);
}

void DispatcherState::EraseProducer(std::map<uint64_t, Producer>::iterator it) {
  producer_at_.erase(it->second.data_address);
  producers_.erase(it);
}

void DispatcherState::SetRankPosition(Job& job, uint32_t rank, TaskKey position) {
  auto [it, added] = job.rank_positions.try_emplace(rank, position);
  if (!added) {
    job.positions.erase(job.positions.find(it->second));
    it->second = position;
  }
  job.positions.insert(position);
}

}  // namespace croupier

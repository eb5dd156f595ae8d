#include "src/producer/task_runner.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/job/batch_key.h"

namespace croupier {
namespace {

// How long a worker waiting for buffer room sleeps before looking again at which batch is next
// (room changes wake it sooner).
constexpr absl::Duration kRoomRecheck = absl::Milliseconds(100);
// The least time between two scans for stale batches (EvictStaleLocked).
constexpr absl::Duration kEvictScanGap = absl::Milliseconds(50);

using State = HeldTask::State;

// Where global batch `batch` of `epoch` falls in a dealt job's deal: its rank, and its position
// (epoch, step) as one ordered number.
struct Dealt {
  uint32_t rank = 0;
  uint64_t position = 0;
};
Dealt DealtOf(const JobConfig& config, uint64_t epoch, uint64_t batch) {
  const uint64_t n = std::max<uint64_t>(1, config.num_consumers());
  const uint64_t first = config.FirstBatch(epoch);
  const uint64_t offset = batch >= first ? batch - first : 0;
  return Dealt{static_cast<uint32_t>(offset % n),
               epoch * (config.steps_per_epoch + 1) + offset / n};
}

}  // namespace

TaskRunner::TaskRunner(Options options)
    : options_(options),
      clock_(options.clock != nullptr ? options.clock : Clock::Real()),
      buffer_(options.buffer_bytes, clock_) {
  int threads = options_.threads;
  if (threads <= 0) threads = std::max(1u, std::thread::hardware_concurrency());
  {
    absl::MutexLock lock(&mu_);
    threads_ = threads;
  }
  absl::MutexLock lock(&join_mu_);
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { Work(); });
}

TaskRunner::~TaskRunner() { Shutdown(); }

void TaskRunner::Shutdown() {
  absl::MutexLock join_lock(&join_mu_);
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
  }
  buffer_.Cancel(absl::UnavailableError("the producer is shutting down"));
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

absl::Status TaskRunner::AddTask(const v1::Task& task, std::shared_ptr<const BatchMaker> maker) {
  const std::string name = absl::StrCat("task ", task.task_id(), " of job '", task.job(), "'");
  if (maker == nullptr) return absl::InvalidArgumentError(name + ": no batch maker");
  if (maker->job_name() != task.job()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": the batch maker is of job '", maker->job_name(), "'"));
  }
  if (task.num_batches() == 0 || task.first_batch() >= maker->batches_per_epoch() ||
      task.num_batches() > maker->batches_per_epoch() - task.first_batch()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": batches [", task.first_batch(), ", +", task.num_batches(),
        ") are not a non-empty range inside the epoch's ", maker->batches_per_epoch(), " batches"));
  }
  const uint64_t num_epochs = maker->job().spec().num_epochs();
  if (num_epochs != 0 && task.epoch() >= num_epochs) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": epoch ", task.epoch(), " but the job has ", num_epochs));
  }
  auto held = std::make_shared<HeldTask>(task, std::move(maker));
  absl::MutexLock lock(&mu_);
  if (shutdown_) return absl::UnavailableError("the producer is shutting down");
  for (const auto& other : tasks_) {
    if (other->id() == task.task_id()) {
      return absl::AlreadyExistsError(absl::StrCat(name, " is held already"));
    }
    if (other->Overlaps(task)) {
      return absl::InvalidArgumentError(
          absl::StrCat(held->Describe(), " overlaps ", other->Describe()));
    }
  }
  // A new task supersedes a retained finished one of the same id or batches.
  std::erase_if(retained_, [&](const std::shared_ptr<HeldTask>& old) {
    return old->id() == task.task_id() || old->Overlaps(task);
  });
  // Its maker may start reading ahead for it now (it only names the work: BatchMaker::WillMake),
  // while the tasks before it are made. Under the lock, so that a RevokeTask comes after it.
  held->maker()->WillMake(task);
  tasks_.push_back(std::move(held));
  return absl::OkStatus();
}

bool TaskRunner::RevokeTask(uint64_t task_id) {
  absl::MutexLock lock(&mu_);
  auto matches = [task_id](const std::shared_ptr<HeldTask>& t) { return t->id() == task_id; };
  std::erase(finished_, task_id);
  if (std::erase_if(retained_, matches) > 0) return true;
  auto it = std::find_if(tasks_.begin(), tasks_.end(), matches);
  if (it == tasks_.end()) return false;
  std::shared_ptr<HeldTask> task = std::move(*it);
  tasks_.erase(it);
  task->Revoke();
  task->maker()->WontMake(task->task());  // what was read ahead for it goes
  const absl::Status revoked =
      absl::NotFoundError(absl::StrCat(task->Describe(), " was revoked from this producer"));
  for (uint64_t i = 0; i < task->size(); ++i) {
    if (task->state(i) == State::kMaking || task->state(i) == State::kReady) {
      buffer_.Discard(task->Key(i), revoked);
    }
  }
  MaybeEndEpochLocked(task->task().job(), task->task().epoch());
  return true;
}

std::vector<uint64_t> TaskRunner::TakeFinishedTasks() {
  absl::MutexLock lock(&mu_);
  // Made tasks kept for ranks that do not ask: at the cap, what is stale goes, so that the slots
  // free up (the workers evict when they lack buffer room).
  if (AtMadeTaskCapLocked()) EvictStaleLocked();
  return std::exchange(finished_, {});
}

bool TaskRunner::AtMadeTaskCapLocked() const {
  return tasks_.size() >= uint64_t{options_.max_tasks} + options_.max_made_tasks;
}

uint32_t TaskRunner::FreeTaskSlots() const {
  absl::MutexLock lock(&mu_);
  if (AtMadeTaskCapLocked()) return 0;
  uint32_t making = 0;
  for (const auto& t : tasks_) making += t->Unmade() > 0 ? 1 : 0;
  return making >= options_.max_tasks ? 0 : options_.max_tasks - making;
}

void TaskRunner::FinishLocked(std::shared_ptr<HeldTask> task) {
  auto it = std::find(tasks_.begin(), tasks_.end(), task);
  if (it == tasks_.end()) return;  // finished or revoked already
  task->Drop();
  finished_.push_back(task->id());
  retained_.push_back(task);
  tasks_.erase(it);
  while (retained_.size() > options_.retain_finished_tasks) retained_.pop_front();
}

void TaskRunner::MarkFailedLocked(const BatchKey& key) {
  for (const auto& t : tasks_) {
    if (!t->Covers(key)) continue;
    if (t->Fail(key.batch - t->first())) FinishLocked(t);
    return;
  }
}

void TaskRunner::NoteServedLocked(const HeldTask& task, const BatchKey& key) {
  const JobConfig& config = task.maker()->config();
  if (!config.dealt()) return;
  std::vector<RankServed>& ranks = served_[key.job];
  ranks.resize(std::max<size_t>(1, config.num_consumers()));
  const Dealt at = DealtOf(config, key.epoch, key.batch);
  RankServed& rank = ranks[at.rank];
  if (!rank.any || at.position > rank.position) rank.position = at.position;
  rank.any = true;
}

bool TaskRunner::StaleLocked(const HeldTask& task, uint64_t index, absl::Time now) const {
  if (task.state(index) != State::kReady) return false;
  if (now - task.ready_since(index) < options_.stale_after) return false;
  const JobConfig& config = task.maker()->config();
  if (!config.dealt()) return false;  // first_come: any consumer takes any batch
  auto it = served_.find(task.task().job());
  if (it == served_.end()) return false;
  const Dealt at = DealtOf(config, task.task().epoch(), task.first() + index);
  const std::vector<RankServed>& ranks = it->second;
  if (at.rank < ranks.size() && ranks[at.rank].any && ranks[at.rank].position > at.position) {
    return true;  // its rank went past it (served elsewhere, or it went on without it)
  }
  const uint64_t rounds = std::max<uint64_t>(
      1, config.batches_per_task / std::max<uint64_t>(1, config.num_consumers()));
  for (const RankServed& rank : ranks) {
    if (rank.any && rank.position >= at.position + rounds) return true;  // a task behind
  }
  return false;
}

uint64_t TaskRunner::EvictStaleLocked() {
  const absl::Time now = clock_->Now();
  // A full buffer is the normal state of a producer faster than its consumers: its workers look
  // for room every kRoomRecheck, and a scan each time would cost a full pass over the held
  // batches. One scan per kEvictScanGap is enough for batches that wait stale_after anyway.
  if (now < last_evict_scan_ + kEvictScanGap) return 0;
  last_evict_scan_ = now;
  uint64_t evicted = 0;
  std::vector<std::shared_ptr<HeldTask>> done;
  for (const auto& t : tasks_) {
    if (t->Ready() == 0) continue;
    for (uint64_t i = 0; i < t->size(); ++i) {
      if (!StaleLocked(*t, i, now)) continue;
      const BatchKey key = t->Key(i);
      buffer_.Discard(key, absl::NotFoundError(absl::StrCat(Describe(key), " was evicted")));
      ++evicted;
      if (t->Evict(i)) done.push_back(t);
    }
  }
  for (const auto& t : done) FinishLocked(t);
  batches_evicted_ += evicted;
  return evicted;
}

std::vector<uint64_t> TaskRunner::HeldTasks() const {
  absl::MutexLock lock(&mu_);
  std::vector<uint64_t> ids;
  for (const auto& t : tasks_) ids.push_back(t->id());
  return ids;
}

std::vector<uint64_t> TaskRunner::MadeTasks() const {
  absl::MutexLock lock(&mu_);
  std::vector<uint64_t> ids;
  for (const auto& t : tasks_) {
    if (t->Unmade() == 0) ids.push_back(t->id());
  }
  return ids;
}

absl::Status TaskRunner::AddTask(const v1::Task& task, const v1::JobInfo& job) {
  std::shared_ptr<const BatchMaker> maker;
  {
    absl::MutexLock lock(&makers_mu_);
    auto it = makers_.find(job.spec().name());
    if (it != makers_.end() && it->second->Reusable()) {
      maker = it->second;
    } else {
      if (!options_.makers) {
        return absl::FailedPreconditionError(absl::StrCat(
            "job '", job.spec().name(), "': this producer has no way to make its batches"));
      }
      absl::StatusOr<std::shared_ptr<const BatchMaker>> made = options_.makers(job);
      if (made.ok()) {
        maker = *made;
        makers_[job.spec().name()] = maker;
      } else if (absl::IsFailedPrecondition(made.status()) ||
                 absl::IsInvalidArgument(made.status())) {
        return made.status();  // this producer cannot make the job at all: another may
      } else {
        // The job's input failed (a file gone or unreadable): held all the same, with a maker
        // that fails each batch with the reason, so that the rank that needs a batch learns
        // why (the file's name) rather than that no producer holds it. Not kept: the job's
        // next task tries the factory again.
        Log(LogLevel::kError, "producer",
            absl::StrCat("task ", task.task_id(), ": ", made.status().ToString(),
                         "; its batches fail with that error"));
        absl::StatusOr<std::shared_ptr<const BatchMaker>> failing =
            FailingMaker(job, made.status());
        if (!failing.ok()) return made.status();  // a job that cannot even be planned
        maker = *failing;
      }
    }
  }
  return AddTask(task, std::move(maker));
}

v1::ProducerStats TaskRunner::Report() const {
  const Stats stats = this->stats();
  v1::ProducerStats s =
      ToProducerStats({stats.buffered_bytes, stats.buffer_capacity_bytes, stats.batches_made,
                       stats.batches_served, stats.bytes_served});
  s.set_make_seconds(stats.make_seconds);
  s.set_threads(stats.threads);
  s.set_records_skipped(stats.records_skipped);
  s.set_batches_evicted(stats.batches_evicted);
  return s;
}

TaskRunner::Stats TaskRunner::stats() const {
  const BatchBuffer::Stats buffer = buffer_.stats();
  absl::MutexLock lock(&mu_);
  Stats s;
  s.buffered_bytes = buffer.bytes;
  s.peak_buffered_bytes = buffer.peak_bytes;
  s.buffer_capacity_bytes = buffer.capacity_bytes;
  s.batches_made = batches_made_;
  s.make_failures = make_failures_;
  s.records_skipped = records_skipped_;
  s.batches_served = batches_served_;
  s.bytes_served = bytes_served_;
  s.tasks_held = tasks_.size();
  s.batches_evicted = batches_evicted_;
  s.waiting_requests = buffer.waiters;
  s.make_seconds = make_seconds_;
  s.threads = threads_;
  return s;
}

// ---- The workers.

std::optional<TaskRunner::Claim> TaskRunner::NextClaimableLocked() {
  for (const auto& t : tasks_) {
    const std::optional<uint64_t> next = t->NextPending();
    if (!next) continue;
    // The earliest batch not started. Until a batch of its job has given a size to reserve, the
    // job's batches are made one at a time.
    if (probing_.contains(t->task().job())) return std::nullopt;
    Claim claim;
    claim.task = t;
    claim.index = *next;
    return claim;
  }
  return std::nullopt;
}

bool TaskRunner::WorkOrShutdownLocked() { return shutdown_ || NextClaimableLocked().has_value(); }

void TaskRunner::Work() {
  while (true) {
    Claim claim;
    bool claimed = false;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &TaskRunner::WorkOrShutdownLocked));
      if (shutdown_) return;
      claim = *NextClaimableLocked();
      const std::string& job = claim.task->task().job();
      auto estimate = estimates_.find(job);
      claim.probe = estimate == estimates_.end();
      claim.reserved = claim.probe ? 0 : estimate->second;
      // Claiming and reserving under one lock keeps reservations in batch order. No room: what
      // no rank is coming for makes way for what they are.
      claimed = buffer_.TryReserve(claim.reserved) ||
                (EvictStaleLocked() > 0 && buffer_.TryReserve(claim.reserved));
      if (claimed) {
        claim.task->SetMaking(claim.index);
        if (claim.probe) probing_.insert(job);
      }
    }
    if (!claimed) {
      // UNAVAILABLE after shutdown: the loop then sees shutdown_.
      buffer_.AwaitRoom(claim.reserved, clock_->Now() + kRoomRecheck).IgnoreError();
      continue;
    }
    const BatchKey key = claim.task->Key(claim.index);
    Made made = TimedMake(*claim.task->maker(), key.epoch, key.batch);
    absl::MutexLock lock(&mu_);
    FinishClaimLocked(claim, std::move(made));
  }
}

void TaskRunner::FinishClaimLocked(const Claim& claim, Made timed) {
  HeldTask& task = *claim.task;
  const BatchKey key = task.Key(claim.index);
  if (claim.probe) probing_.erase(key.job);
  RecordMadeLocked(timed, /*log=*/true);
  absl::StatusOr<Batch>& made = timed.batch;
  if (made.ok()) {
    uint64_t& estimate = estimates_[key.job];
    estimate = std::max<uint64_t>(estimate, made->bytes().size());
  }
  if (task.dropped() || task.state(claim.index) != State::kMaking) {
    buffer_.Unreserve(claim.reserved);
    return;
  }
  const bool failed = !made.ok();
  if (buffer_.PutReserved(key, std::move(made), claim.reserved)) {
    MarkHandedLocked(task, claim.index);  // went straight to a waiting request
    if (failed) MarkFailedLocked(key);
  } else {
    task.SetReady(claim.index, clock_->Now());
  }
}

TaskRunner::Made TaskRunner::TimedMake(const BatchMaker& maker, uint64_t epoch,
                                       uint64_t batch) const {
  // Real time, not clock_: this measures work, and the fake clocks of tests do not move by it.
  const absl::Time start = absl::Now();
  if (options_.test_make_delay > absl::ZeroDuration()) absl::SleepFor(options_.test_make_delay);
  Made made{maker.Make(epoch, batch)};
  made.planned_records = maker.plan_spec().batch_size;
  made.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return made;
}

void TaskRunner::RecordMadeLocked(const Made& timed, bool log) {
  make_seconds_ += timed.seconds;
  const absl::StatusOr<Batch>& made = timed.batch;
  if (made.ok()) {
    ++batches_made_;
    if (made->num_records() < timed.planned_records) {
      records_skipped_ += timed.planned_records - made->num_records();
    }
    return;
  }
  ++make_failures_;
  if (log) {
    // The status names the job, epoch and batch already.
    Log(LogLevel::kError, "producer", made.status().ToString());
  }
}

}  // namespace croupier

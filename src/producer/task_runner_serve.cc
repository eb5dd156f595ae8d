// TaskRunner's BatchSource side: the requests of the data server. The tasks and the workers are
// in task_runner.cc.
#include <optional>

#include "absl/strings/str_cat.h"
#include "src/job/batch_key.h"
#include "src/producer/task_runner.h"

namespace croupier {
namespace {

using State = HeldTask::State;

absl::Status RevokedError(const HeldTask& task) {
  return absl::NotFoundError(absl::StrCat(task.Describe(), " was revoked from this producer"));
}

}  // namespace

std::shared_ptr<HeldTask> TaskRunner::FindLocked(const BatchKey& key) const {
  for (const auto& t : tasks_) {
    if (t->Covers(key)) return t;
  }
  for (const auto& t : retained_) {
    if (t->Covers(key)) return t;
  }
  return nullptr;
}

void TaskRunner::MarkHandedLocked(HeldTask& task, uint64_t index) {
  if (task.Hand(index) && !task.HasUnhanded()) {
    MaybeEndEpochLocked(task.task().job(), task.task().epoch());
  }
}

void TaskRunner::MaybeEndEpochLocked(const std::string& job, uint64_t epoch) {
  for (const auto& t : tasks_) {
    if (t->task().job() == job && t->task().epoch() == epoch && t->HasUnhanded()) return;
  }
  buffer_.FailAnyWaiters(job, epoch,
                         absl::OutOfRangeError(absl::StrCat("producer has no more batches of job '",
                                                            job, "' epoch ", epoch)));
}

absl::StatusOr<Batch> TaskRunner::MakeNow(const BatchMaker& maker, uint64_t epoch, uint64_t batch,
                                          bool first) {
  Made made = TimedMake(maker, epoch, batch);
  absl::MutexLock lock(&mu_);
  RecordMadeLocked(made, first);
  return std::move(made.batch);
}

absl::StatusOr<Batch> TaskRunner::GetBatch(const BatchKey& key, absl::Time deadline) {
  std::shared_ptr<HeldTask> task;
  std::optional<BatchBuffer::Ticket> ticket;
  bool first = false;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return absl::UnavailableError("the producer is shutting down");
    task = FindLocked(key);
    if (task == nullptr) {
      return absl::NotFoundError(absl::StrCat("producer does not hold ", Describe(key)));
    }
    const uint64_t index = key.batch - task->first();
    switch (task->state(index)) {
      case State::kPending:  // not reached yet: made here rather than waited for
        first = true;
        MarkHandedLocked(*task, index);
        break;
      case State::kMaking:  // registered under mu_, so the worker's delivery cannot be missed
        ticket.emplace(buffer_.Expect(key));
        break;
      case State::kReady: {
        std::optional<absl::StatusOr<Batch>> got = buffer_.TryTake(key);
        if (!got) return absl::UnavailableError("the producer is shutting down");
        MarkHandedLocked(*task, index);
        if (!got->ok()) MarkFailedLocked(key);
        return *std::move(got);
      }
      case State::kHanded:  // handed out before: a retry, remade here
      case State::kServed:
      case State::kEvicted:  // dropped unserved: made again here
        MarkHandedLocked(*task, index);
        break;
    }
  }
  if (ticket) {
    auto got = buffer_.Wait(*std::move(ticket), deadline);
    if (!got.ok()) return std::move(got).status();
    return std::move(got->second);
  }
  absl::StatusOr<Batch> made = MakeNow(*task->maker(), key.epoch, key.batch, first);
  absl::MutexLock lock(&mu_);
  // Revoked while it was being made: the dispatcher may have given the task to another producer
  // (in first_come, whose batches go to whoever asks) or deleted its job, so it is not handed out,
  // as a worker's batch is not.
  if (task->revoked()) return RevokedError(*task);
  if (!made.ok()) MarkFailedLocked(key);
  return made;
}

absl::StatusOr<std::pair<uint64_t, Batch>> TaskRunner::GetAnyBatch(absl::string_view job,
                                                                   uint64_t epoch,
                                                                   absl::Time deadline) {
  const std::string job_name(job);
  std::shared_ptr<HeldTask> task;
  uint64_t index = 0;
  std::optional<BatchBuffer::Ticket> ticket;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return absl::UnavailableError("the producer is shutting down");
    std::vector<std::shared_ptr<HeldTask>> mine;
    for (const auto& t : tasks_) {
      if (t->task().job() == job_name && t->task().epoch() == epoch && t->HasUnhanded()) {
        mine.push_back(t);
      }
    }
    if (mine.empty()) {
      return absl::OutOfRangeError(
          absl::StrCat("producer has no more batches of job '", job_name, "' epoch ", epoch));
    }
    // A made batch first.
    if (auto got = buffer_.TryTakeAny(job_name, epoch)) {
      for (const auto& t : mine) {
        if (t->Covers(BatchKey{job_name, epoch, got->first})) {
          MarkHandedLocked(*t, got->first - t->first());
        }
      }
      if (!got->second.ok()) {
        MarkFailedLocked(BatchKey{job_name, epoch, got->first});
        return std::move(got->second).status();
      }
      return std::make_pair(got->first, *std::move(got->second));
    }
    // Else one nobody has started, made here.
    for (const auto& t : mine) {
      if (const std::optional<uint64_t> next = t->NextPending()) {
        task = t;
        index = *next;
        MarkHandedLocked(*t, index);
        break;
      }
    }
    if (task == nullptr) {
      // Else wait for one of those the workers are making; registered under mu_, so that neither
      // a delivery nor the end of the epoch (MaybeEndEpochLocked) can be missed.
      ticket.emplace(buffer_.ExpectAny(job_name, epoch));
    }
  }
  if (ticket) return buffer_.Wait(*std::move(ticket), deadline);
  const uint64_t batch = task->first() + index;
  absl::StatusOr<Batch> made = MakeNow(*task->maker(), epoch, batch, /*first=*/true);
  absl::MutexLock lock(&mu_);
  if (task->revoked()) return RevokedError(*task);  // as in GetBatch
  if (!made.ok()) {
    MarkFailedLocked(BatchKey{job_name, epoch, batch});
    return std::move(made).status();
  }
  return std::make_pair(batch, *std::move(made));
}

bool TaskRunner::Ready(const BatchKey& key) {
  absl::MutexLock lock(&mu_);
  if (shutdown_) return false;
  for (const auto& t : tasks_) {
    if (t->Covers(key)) return t->state(key.batch - t->first()) == State::kReady;
  }
  return false;
}

void TaskRunner::OnServed(const BatchKey& key, uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  ++batches_served_;
  bytes_served_ += bytes;
  // One lookup: a held task, else a retained done one (a late remake), else nothing (revoked).
  const std::shared_ptr<HeldTask> found = FindLocked(key);
  if (found == nullptr) return;
  NoteServedLocked(*found, key);
  if (found->dropped()) return;  // done already: retained for late requests only
  HeldTask& task = *found;
  const uint64_t index = key.batch - task.first();
  if (task.state(index) == State::kReady) {
    // Served by a remake: the buffered copy is not needed.
    buffer_.Discard(key, absl::NotFoundError(Describe(key) + " was served already"));
  }
  MarkHandedLocked(task, index);
  if (task.Serve(index)) FinishLocked(found);  // done
}

Codec TaskRunner::CompressionOf(absl::string_view job) {
  absl::MutexLock lock(&mu_);
  // A job's tasks all share its spec; the first one found answers.
  for (const auto& task : tasks_) {
    if (task->maker()->job_name() == job) {
      return task->maker()->compression();
    }
  }
  for (const auto& task : retained_) {
    if (task->maker()->job_name() == job) {
      return task->maker()->compression();
    }
  }
  return Codec::kNone;
}

}  // namespace croupier

#include "src/producer/sequential_source.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace croupier {
namespace {

absl::Status ShutDown() { return absl::UnavailableError("the producer is shutting down"); }

bool Before(const v1::Task& a, const v1::Task& b) {
  return std::make_pair(a.epoch(), a.first_batch() + a.num_batches()) <=
         std::make_pair(b.epoch(), b.first_batch());
}

}  // namespace

SequentialSource::SequentialSource(Options options) : options_(options) {
  stats_.buffer_capacity_bytes = options.buffer_bytes;
}

SequentialSource::~SequentialSource() { Shutdown(); }

absl::Status SequentialSource::AddTask(const v1::Task& task) {
  absl::MutexLock lock(&mu_);
  if (shutdown_) return ShutDown();
  if (task.num_batches() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("task ", task.task_id(), " is empty"));
  }
  for (const Held& h : held_) {
    if (h.task.task_id() == task.task_id()) {
      return absl::AlreadyExistsError(absl::StrCat("task ", task.task_id(), " is held already"));
    }
  }
  // Tasks are held in (epoch, batch) order. One that comes before held ones is a task an earlier
  // source left unfinished (it died): it goes in its place, and the feeder goes back for it
  // (croupier.serve re-iterates the epoch when its source can, and fails those batches naming the
  // loss when it cannot).
  auto at = held_.end();
  for (auto it = held_.begin(); it != held_.end(); ++it) {
    const bool before = Before(task, it->task);
    if (it->task.job() != task.job() || (!before && !Before(it->task, task))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "task ", task.task_id(), " (job '", task.job(), "' epoch ", task.epoch(),
          " batches [", task.first_batch(), ", ", task.first_batch() + task.num_batches(),
          ")) overlaps held task ", it->task.task_id(), " or is of another job"));
    }
    if (before && at == held_.end()) at = it;
  }
  Held h;
  h.task = task;
  h.slots.resize(task.num_batches());
  held_.insert(at, std::move(h));
  const std::pair<uint64_t, uint64_t> end(task.epoch(), task.first_batch() + task.num_batches());
  if (!last_end_ || *last_end_ < end) last_end_ = end;
  changed_.SignalAll();
  return absl::OkStatus();
}

void SequentialSource::ReleaseLocked(Slot& slot) {
  if (slot.made.has_value() && slot.made->ok()) {
    stats_.buffered_bytes -= (*slot.made)->bytes().size();
  }
  slot.made.reset();
}

bool SequentialSource::RevokeTask(uint64_t task_id) {
  absl::MutexLock lock(&mu_);
  for (auto it = held_.begin(); it != held_.end(); ++it) {
    if (it->task.task_id() != task_id) continue;
    for (Slot& s : it->slots) ReleaseLocked(s);
    held_.erase(it);
    changed_.SignalAll();
    return true;
  }
  return false;
}

std::vector<uint64_t> SequentialSource::TakeFinishedTasks() {
  absl::MutexLock lock(&mu_);
  return std::exchange(finished_, {});
}

std::vector<uint64_t> SequentialSource::HeldTasks() const {
  absl::MutexLock lock(&mu_);
  std::vector<uint64_t> ids;
  for (const Held& h : held_) ids.push_back(h.task.task_id());
  return ids;
}

std::optional<std::pair<uint64_t, uint64_t>> SequentialSource::LastTaskEnd() const {
  absl::MutexLock lock(&mu_);
  return last_end_;
}

uint32_t SequentialSource::FreeTaskSlots() const {
  absl::MutexLock lock(&mu_);
  return held_.size() >= options_.max_tasks ? 0
                                            : options_.max_tasks - static_cast<uint32_t>(held_.size());
}

SequentialSource::Stats SequentialSource::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

v1::ProducerStats SequentialSource::Report() const {
  const Stats stats = this->stats();
  return ToProducerStats({stats.buffered_bytes, stats.buffer_capacity_bytes, stats.batches_made,
                          stats.batches_served, stats.bytes_served});
}

void SequentialSource::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
  changed_.SignalAll();
}

SequentialSource::Held* SequentialSource::FindLocked(const BatchKey& key) {
  for (Held& h : held_) {
    if (h.Covers(key)) return &h;
  }
  return nullptr;
}

SequentialSource::Held* SequentialSource::NextUnsuppliedLocked() {
  for (Held& h : held_) {
    if (h.supplied < h.slots.size()) return &h;
  }
  return nullptr;
}

absl::Status SequentialSource::NotHeld(const BatchKey& key) const {
  return absl::NotFoundError(absl::StrCat(
      "producer does not hold ", Describe(key),
      " (a Python source makes each batch once; it was served already or is not assigned here)"));
}

absl::StatusOr<BatchKey> SequentialSource::NextSlot(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  while (true) {
    if (shutdown_) return ShutDown();
    Held* h = NextUnsuppliedLocked();
    const bool room = stats_.buffered_bytes == 0 || stats_.buffered_bytes < options_.buffer_bytes;
    if (h != nullptr && room) {
      return BatchKey{h->task.job(), h->task.epoch(), h->task.first_batch() + h->supplied};
    }
    if (changed_.WaitWithDeadline(&mu_, deadline) && absl::Now() >= deadline) {
      return absl::DeadlineExceededError("no batch to supply: no task is held, or the buffer "
                                         "is full");
    }
  }
}

absl::Status SequentialSource::Put(const BatchKey& key, absl::StatusOr<Batch> batch) {
  absl::MutexLock lock(&mu_);
  if (shutdown_) return ShutDown();
  Held* h = NextUnsuppliedLocked();
  if (h == nullptr || !h->Covers(key) || key.batch != h->task.first_batch() + h->supplied) {
    if (FindLocked(key) == nullptr) return absl::OkStatus();  // revoked meanwhile: dropped
    return absl::FailedPreconditionError(
        absl::StrCat(Describe(key), " is not the next batch to supply"));
  }
  Slot& slot = h->slots[h->supplied++];
  if (batch.ok()) {
    stats_.buffered_bytes += batch->bytes().size();
    ++stats_.batches_made;
  }
  slot.made = std::move(batch);
  changed_.SignalAll();
  return absl::OkStatus();
}

absl::StatusOr<Batch> SequentialSource::GetBatch(const BatchKey& key, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  while (true) {
    if (shutdown_) return ShutDown();
    Held* h = FindLocked(key);
    if (h == nullptr) return NotHeld(key);
    Slot& slot = h->slots[key.batch - h->task.first_batch()];
    if (slot.served) return NotHeld(key);
    if (slot.made.has_value()) {
      slot.handed = true;
      return *slot.made;
    }
    if (changed_.WaitWithDeadline(&mu_, deadline) && absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(Describe(key), " was not supplied by the Python source in time"));
    }
  }
}

absl::StatusOr<std::pair<uint64_t, Batch>> SequentialSource::GetAnyBatch(absl::string_view job,
                                                                         uint64_t epoch,
                                                                         absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  while (true) {
    if (shutdown_) return ShutDown();
    bool more = false;
    for (Held& h : held_) {
      if (h.task.job() != job || h.task.epoch() != epoch) continue;
      for (uint64_t i = 0; i < h.slots.size(); ++i) {
        Slot& s = h.slots[i];
        if (s.handed || s.served) continue;
        if (!s.made.has_value()) {
          more = true;
          continue;
        }
        s.handed = true;
        if (!s.made->ok()) return s.made->status();
        return std::make_pair(h.task.first_batch() + i, **s.made);
      }
    }
    if (!more) {
      return absl::OutOfRangeError(absl::StrCat("no more batches of job '", job, "' epoch ",
                                                epoch, " here"));
    }
    if (changed_.WaitWithDeadline(&mu_, deadline) && absl::Now() >= deadline) {
      return absl::DeadlineExceededError("no batch became ready in time");
    }
  }
}

void SequentialSource::OnServed(const BatchKey& key, uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  ++stats_.batches_served;
  stats_.bytes_served += bytes;
  for (auto it = held_.begin(); it != held_.end(); ++it) {
    if (!it->Covers(key)) continue;
    Slot& slot = it->slots[key.batch - it->task.first_batch()];
    if (slot.served) return;
    slot.served = true;
    ReleaseLocked(slot);
    if (++it->served == it->slots.size()) {
      finished_.push_back(it->task.task_id());
      held_.erase(it);
    }
    changed_.SignalAll();
    return;
  }
}

}  // namespace croupier

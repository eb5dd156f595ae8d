#include "src/producer/batch_buffer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/producer/clock_wait.h"

namespace croupier {

// One registered wait. Every field is guarded by the buffer's mu_.
struct BatchBuffer::Ticket::Waiter {
  BatchKey key;      // for a keyed wait; job and epoch only for an any-wait
  bool any = false;  // a TakeAny/ExpectAny wait
  std::optional<absl::StatusOr<std::pair<uint64_t, Batch>>> result;
};

namespace {

absl::StatusOr<std::pair<uint64_t, Batch>> WithIndex(uint64_t index, absl::StatusOr<Batch> batch) {
  if (!batch.ok()) return std::move(batch).status();
  return std::make_pair(index, *std::move(batch));
}

uint64_t SizeOf(const absl::StatusOr<Batch>& batch) {
  return batch.ok() ? batch->bytes().size() : 0;
}

}  // namespace

BatchBuffer::BatchBuffer(uint64_t capacity_bytes, Clock* clock)
    : capacity_(capacity_bytes), clock_(clock != nullptr ? clock : Clock::Real()) {}

BatchBuffer::~BatchBuffer() = default;

bool BatchBuffer::FitsLocked(uint64_t bytes) const {
  const uint64_t used = bytes_ + reserved_;
  return used == 0 || (used <= capacity_ && bytes <= capacity_ - used);
}

absl::Status BatchBuffer::Put(const BatchKey& key, absl::StatusOr<Batch> batch,
                              absl::Time deadline) {
  const uint64_t size = SizeOf(batch);
  absl::MutexLock lock(&mu_);
  auto fits_or_cancelled = [this, size]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !cancelled_.ok() || FitsLocked(size);
  };
  if (!producer_internal::AwaitUntil(mu_, absl::Condition(&fits_or_cancelled), *clock_, deadline)) {
    return absl::DeadlineExceededError(
        absl::StrCat("no room for ", Describe(key), " (", size, " bytes) in the producer buffer (",
                     bytes_, " of ", capacity_, " bytes held) by the deadline"));
  }
  if (!cancelled_.ok()) return cancelled_;
  DeliverOrStoreLocked(key, std::move(batch));
  return absl::OkStatus();
}

absl::StatusOr<Batch> BatchBuffer::Take(const BatchKey& key, absl::Time deadline) {
  auto got = Wait(Expect(key), deadline);
  if (!got.ok()) return std::move(got).status();
  return std::move(got->second);
}

absl::StatusOr<std::pair<uint64_t, Batch>> BatchBuffer::TakeAny(absl::string_view job,
                                                                uint64_t epoch,
                                                                absl::Time deadline) {
  return Wait(ExpectAny(job, epoch), deadline);
}

void BatchBuffer::Cancel(absl::Status status) {
  if (status.ok()) status = absl::CancelledError("batch buffer cancelled");
  absl::MutexLock lock(&mu_);
  if (!cancelled_.ok()) return;
  cancelled_ = status;
  for (auto& [key, waiters] : key_waiters_) {
    for (auto& w : waiters) w->result = status;
  }
  for (auto& [je, waiters] : any_waiters_) {
    for (auto& w : waiters) w->result = status;
  }
  key_waiters_.clear();
  any_waiters_.clear();
  entries_.clear();
  stored_.clear();
  bytes_ = 0;
}

BatchBuffer::Stats BatchBuffer::stats() const {
  absl::MutexLock lock(&mu_);
  Stats s;
  s.bytes = bytes_;
  s.reserved_bytes = reserved_;
  for (const auto& [key, waiters] : key_waiters_) s.waiters += waiters.size();
  for (const auto& [je, waiters] : any_waiters_) s.waiters += waiters.size();
  s.capacity_bytes = capacity_;
  s.count = entries_.size();
  s.peak_bytes = peak_bytes_;
  return s;
}

bool BatchBuffer::TryReserve(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  if (!cancelled_.ok() || !FitsLocked(bytes)) return false;
  reserved_ += bytes;
  return true;
}

absl::Status BatchBuffer::AwaitRoom(uint64_t bytes, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto fits_or_cancelled = [this, bytes]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !cancelled_.ok() || FitsLocked(bytes);
  };
  if (!producer_internal::AwaitUntil(mu_, absl::Condition(&fits_or_cancelled), *clock_, deadline)) {
    return absl::DeadlineExceededError(
        absl::StrCat("no room for ", bytes, " bytes in the producer buffer by the deadline"));
  }
  return cancelled_;
}

bool BatchBuffer::PutReserved(const BatchKey& key, absl::StatusOr<Batch> batch, uint64_t reserved) {
  absl::MutexLock lock(&mu_);
  reserved_ -= std::min(reserved_, reserved);
  if (!cancelled_.ok()) return false;
  return DeliverOrStoreLocked(key, std::move(batch));
}

void BatchBuffer::Unreserve(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  reserved_ -= std::min(reserved_, bytes);
}

bool BatchBuffer::DeliverOrStoreLocked(const BatchKey& key, absl::StatusOr<Batch> batch) {
  if (auto it = key_waiters_.find(key); it != key_waiters_.end()) {
    for (auto& w : it->second) w->result = WithIndex(key.batch, batch);
    key_waiters_.erase(it);
    return true;
  }
  if (auto it = any_waiters_.find(JobEpoch(key.job, key.epoch)); it != any_waiters_.end()) {
    it->second.front()->result = WithIndex(key.batch, std::move(batch));
    it->second.erase(it->second.begin());
    if (it->second.empty()) any_waiters_.erase(it);
    return true;
  }
  RemoveLocked(key);  // a replaced entry gives back its room
  const uint64_t size = SizeOf(batch);
  entries_[key] = Entry{std::move(batch), size};
  stored_[JobEpoch(key.job, key.epoch)].insert(key.batch);
  bytes_ += size;
  peak_bytes_ = std::max(peak_bytes_, bytes_);
  return false;
}

std::optional<BatchBuffer::Entry> BatchBuffer::RemoveLocked(const BatchKey& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  Entry entry = std::move(it->second);
  entries_.erase(it);
  bytes_ -= entry.bytes;
  auto s = stored_.find(JobEpoch(key.job, key.epoch));
  s->second.erase(key.batch);
  if (s->second.empty()) stored_.erase(s);
  return entry;
}

std::optional<absl::StatusOr<Batch>> BatchBuffer::TryTake(const BatchKey& key) {
  absl::MutexLock lock(&mu_);
  std::optional<Entry> entry = RemoveLocked(key);
  if (!entry) return std::nullopt;
  return std::move(entry->batch);
}

std::optional<std::pair<uint64_t, absl::StatusOr<Batch>>> BatchBuffer::TryTakeAny(
    absl::string_view job, uint64_t epoch) {
  absl::MutexLock lock(&mu_);
  auto s = stored_.find(JobEpoch(std::string(job), epoch));
  if (s == stored_.end()) return std::nullopt;
  const uint64_t index = *s->second.begin();
  std::optional<Entry> entry = RemoveLocked(BatchKey{std::string(job), epoch, index});
  return std::make_pair(index, std::move(entry->batch));
}

BatchBuffer::Ticket BatchBuffer::Expect(const BatchKey& key) {
  auto waiter = std::make_shared<Waiter>();
  waiter->key = key;
  absl::MutexLock lock(&mu_);
  if (!cancelled_.ok()) {
    waiter->result = cancelled_;
  } else if (std::optional<Entry> entry = RemoveLocked(key)) {
    waiter->result = WithIndex(key.batch, std::move(entry->batch));
  } else {
    key_waiters_[key].push_back(waiter);
  }
  return Ticket(std::move(waiter));
}

BatchBuffer::Ticket BatchBuffer::ExpectAny(absl::string_view job, uint64_t epoch) {
  auto waiter = std::make_shared<Waiter>();
  waiter->key = BatchKey{std::string(job), epoch, 0};
  waiter->any = true;
  absl::MutexLock lock(&mu_);
  if (!cancelled_.ok()) {
    waiter->result = cancelled_;
  } else if (auto s = stored_.find(JobEpoch(waiter->key.job, epoch)); s != stored_.end()) {
    const uint64_t index = *s->second.begin();
    std::optional<Entry> entry = RemoveLocked(BatchKey{waiter->key.job, epoch, index});
    waiter->result = WithIndex(index, std::move(entry->batch));
  } else {
    any_waiters_[JobEpoch(waiter->key.job, epoch)].push_back(waiter);
  }
  return Ticket(std::move(waiter));
}

absl::StatusOr<std::pair<uint64_t, Batch>> BatchBuffer::Wait(Ticket ticket, absl::Time deadline) {
  Waiter* w = ticket.waiter_.get();
  absl::MutexLock lock(&mu_);
  auto done = [w]() { return w->result.has_value(); };
  if (!producer_internal::AwaitUntil(mu_, absl::Condition(&done), *clock_, deadline)) {
    UnregisterLocked(ticket.waiter_);
    if (w->any) {
      return absl::DeadlineExceededError(absl::StrCat("no batch of job '", w->key.job, "' epoch ",
                                                      w->key.epoch,
                                                      " became ready by the deadline"));
    }
    return absl::DeadlineExceededError(
        absl::StrCat(Describe(w->key), " was not made by the deadline"));
  }
  return *std::move(w->result);
}

void BatchBuffer::UnregisterLocked(const std::shared_ptr<Waiter>& waiter) {
  auto remove_from = [&waiter](std::vector<std::shared_ptr<Waiter>>& list) {
    list.erase(std::remove(list.begin(), list.end(), waiter), list.end());
    return list.empty();
  };
  if (waiter->any) {
    auto it = any_waiters_.find(JobEpoch(waiter->key.job, waiter->key.epoch));
    if (it != any_waiters_.end() && remove_from(it->second)) any_waiters_.erase(it);
  } else {
    auto it = key_waiters_.find(waiter->key);
    if (it != key_waiters_.end() && remove_from(it->second)) key_waiters_.erase(it);
  }
}

void BatchBuffer::Discard(const BatchKey& key, const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  RemoveLocked(key);
  if (auto it = key_waiters_.find(key); it != key_waiters_.end()) {
    for (auto& w : it->second) w->result = status;
    key_waiters_.erase(it);
  }
}

void BatchBuffer::FailAnyWaiters(absl::string_view job, uint64_t epoch,
                                 const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  auto it = any_waiters_.find(JobEpoch(std::string(job), epoch));
  if (it == any_waiters_.end()) return;
  for (auto& w : it->second) w->result = status;
  any_waiters_.erase(it);
}

}  // namespace croupier

// The producer's buffer of finished batches waiting for their consumers: the one bounded,
// cancellable queue through which batches pass between threads.
#ifndef CROUPIER_SRC_PRODUCER_BATCH_BUFFER_H_
#define CROUPIER_SRC_PRODUCER_BATCH_BUFFER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "croupier/batch.h"
#include "src/common/clock.h"
#include "src/job/batch_key.h"

namespace croupier {

// Batches keyed by BatchKey, bounded in bytes (the size of each batch's buffer).
//
// The bound: a batch is admitted only if the bytes held plus the bytes reserved plus its own fit
// in the capacity, except that an empty buffer (nothing held, nothing reserved) always admits one
// batch, however large: otherwise a batch bigger than the capacity could never pass.
//
// A batch put while someone waits for it is handed straight to the waiter (every waiter of its
// key, or else the longest-waiting TakeAny waiter of its job and epoch) and never occupies the
// buffer. An entry may hold an error instead of a batch (a batch that failed to be made): it
// takes no room and is handed out like a batch, so that the requester learns why.
//
// Cancel(status) fails every current and future call with `status` and drops what is held.
// Deadlines are measured with the Clock given at construction.
//
// Thread-safe.
class BatchBuffer {
 public:
  struct Stats {
    uint64_t bytes = 0;           // held in stored batches
    uint64_t reserved_bytes = 0;  // reserved for batches being made
    uint64_t capacity_bytes = 0;
    uint64_t count = 0;       // stored entries (batches and errors)
    uint64_t peak_bytes = 0;  // the most `bytes` has ever been
    uint64_t waiters = 0;     // registered waits (Expect, ExpectAny) not yet answered
  };

  // A registered wait for a batch; see Expect. Move-only. Every ticket must be passed to Wait.
  class Ticket {
   public:
    Ticket(Ticket&&) = default;
    Ticket& operator=(Ticket&&) = default;

   private:
    friend class BatchBuffer;
    struct Waiter;
    explicit Ticket(std::shared_ptr<Waiter> waiter) : waiter_(std::move(waiter)) {}
    std::shared_ptr<Waiter> waiter_;
  };

  // `clock` nullptr means the real clock; it must outlive the buffer.
  explicit BatchBuffer(uint64_t capacity_bytes, Clock* clock = nullptr);
  ~BatchBuffer();
  BatchBuffer(const BatchBuffer&) = delete;
  BatchBuffer& operator=(const BatchBuffer&) = delete;

  // Stores `batch` (or an error) under `key`, first waiting while it does not fit. Replaces an
  // entry already stored under `key`. DEADLINE_EXCEEDED if it still does not fit at `deadline`;
  // the cancel status after Cancel.
  absl::Status Put(const BatchKey& key, absl::StatusOr<Batch> batch, absl::Time deadline);

  // Removes and returns batch `key`, waiting for it until `deadline`. A stored error is returned
  // as this call's status. DEADLINE_EXCEEDED if it was not put in time; the cancel status after
  // Cancel; the status given to Discard if it was discarded while waited for.
  absl::StatusOr<Batch> Take(const BatchKey& key, absl::Time deadline);

  // Removes and returns a batch of (job, epoch), the lowest stored index first, with its index,
  // waiting for one until `deadline`. Errors as Take, plus the status given to FailAnyWaiters.
  absl::StatusOr<std::pair<uint64_t, Batch>> TakeAny(absl::string_view job, uint64_t epoch,
                                                     absl::Time deadline);

  // Fails every waiting and future call with `status` (which must not be OK), wakes all waiters,
  // and drops everything held. Later calls of Cancel are ignored.
  void Cancel(absl::Status status);

  Stats stats() const;

  // ---- Reservations, for a maker that must not block once it has started a batch (TaskRunner).

  // Reserves `bytes` if they fit now (by the rule above); never blocks.
  bool TryReserve(uint64_t bytes);
  // Waits until `bytes` would fit, without reserving them. OK when they fit, DEADLINE_EXCEEDED at
  // `deadline`, the cancel status after Cancel.
  absl::Status AwaitRoom(uint64_t bytes, absl::Time deadline);
  // Like Put, but never blocks: releases `reserved` bytes reserved earlier and stores the entry
  // (which may be larger than the reservation). Returns true if the entry went straight to a
  // waiter and was not stored. After Cancel it only releases the reservation, and returns false.
  bool PutReserved(const BatchKey& key, absl::StatusOr<Batch> batch, uint64_t reserved);
  // Releases a reservation that will not be used.
  void Unreserve(uint64_t bytes);

  // ---- Non-blocking and two-phase takes, so that a caller can decide under its own lock and
  // wait outside it without missing a put that happens in between.

  // Removes and returns the stored entry `key`, if any.
  std::optional<absl::StatusOr<Batch>> TryTake(const BatchKey& key);
  // Removes and returns the stored entry of (job, epoch) with the lowest index, if any.
  std::optional<std::pair<uint64_t, absl::StatusOr<Batch>>> TryTakeAny(absl::string_view job,
                                                                       uint64_t epoch);
  // Registers a wait for `key` (satisfied at once if it is stored).
  Ticket Expect(const BatchKey& key);
  // Registers a wait for any batch of (job, epoch) (satisfied at once if one is stored).
  Ticket ExpectAny(absl::string_view job, uint64_t epoch);
  // Waits for the ticket's batch until `deadline`, and unregisters it.
  absl::StatusOr<std::pair<uint64_t, Batch>> Wait(Ticket ticket, absl::Time deadline);

  // Drops the entry stored under `key`, if any, and fails the waiters of `key` with `status`.
  void Discard(const BatchKey& key, const absl::Status& status);
  // Fails the TakeAny/ExpectAny waiters of (job, epoch) with `status`.
  void FailAnyWaiters(absl::string_view job, uint64_t epoch, const absl::Status& status);

 private:
  using Waiter = Ticket::Waiter;
  using JobEpoch = std::pair<std::string, uint64_t>;
  struct Entry {
    absl::StatusOr<Batch> batch;
    uint64_t bytes = 0;
  };

  bool FitsLocked(uint64_t bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands the entry to waiters (returns true) or stores it.
  bool DeliverOrStoreLocked(const BatchKey& key, absl::StatusOr<Batch> batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::optional<Entry> RemoveLocked(const BatchKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnregisterLocked(const std::shared_ptr<Waiter>& waiter) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t capacity_;
  Clock* const clock_;

  mutable absl::Mutex mu_;
  absl::Status cancelled_ ABSL_GUARDED_BY(mu_);
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t reserved_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t peak_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<BatchKey, Entry> entries_ ABSL_GUARDED_BY(mu_);
  // The stored batch indexes of each (job, epoch), for TakeAny.
  std::map<JobEpoch, std::set<uint64_t>> stored_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<BatchKey, std::vector<std::shared_ptr<Waiter>>> key_waiters_
      ABSL_GUARDED_BY(mu_);
  std::map<JobEpoch, std::vector<std::shared_ptr<Waiter>>> any_waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace croupier

#endif  // CROUPIER_SRC_PRODUCER_BATCH_BUFFER_H_

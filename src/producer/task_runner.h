// The producer's work loop: the tasks the dispatcher assigned, made into batches ahead of demand
// by a pool of threads, and served to the data server.
#ifndef CROUPIER_SRC_PRODUCER_TASK_RUNNER_H_
#define CROUPIER_SRC_PRODUCER_TASK_RUNNER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "croupier/batch.h"
#include "proto/croupier.pb.h"
#include "src/common/clock.h"
#include "src/producer/batch_buffer.h"
#include "src/producer/batch_maker.h"
#include "src/producer/held_task.h"
#include "src/producer/task_holder.h"
#include "src/transport/batch_source.h"

namespace croupier {

// Holds the producer's tasks and makes their batches.
//
// Worker threads make the batches of the held tasks in order (tasks in the order added, batches
// ascending) into a BatchBuffer, ahead of demand, until the buffer is full. Buffer room is
// reserved before a batch is made, always for the earliest batch not yet made, so the batch a
// consumer waits for next is never stuck behind later ones. A reservation is the largest batch of
// the job seen so far; until one batch of a job has been made, its batches are made one at a
// time. So the buffer holds at most buffer_bytes, plus one batch larger than the capacity or
// than the estimate.
//
// Requests never wait behind the buffer: a batch no thread has started yet (not reached), and a
// batch handed out before (a consumer retrying after a lost connection), are made on demand in
// the caller's thread; a batch being made is waited for; a made one is taken from the buffer.
// Handed-out batches are remade identically, since batch contents depend only on the plan. A batch
// made on demand is made to the end whatever the deadline (a batch is the unit of work).
//
// first_come (GetAnyBatch): a made batch of the epoch is handed out if there is one, else one not
// started is made on demand, else the call waits for one a worker is making. A batch handed out
// whose delivery then fails cannot be offered again (the consumer never learnt its index), so its
// task does not finish; what happens to it is the dispatcher's call.
//
// Slots and tasks (docs/protocol.md, "Slots, done tasks and eviction"): a task holds one of the
// max_tasks slots only while some of its batches are still to be made. Once every batch is made
// (or failed), the slot is free for the next task, whether or not the consumers have taken the
// batches: a rank that does not read, or a batch that failed, holds no slot that other ranks and
// jobs need. A task is done, reported once by TakeFinishedTasks and no longer held, once every
// batch is served, evicted, or failed and handed to its requester; the last
// retain_finished_tasks done tasks are kept so that a late request for one of their batches is
// remade rather than refused.
//
// Eviction (dealt jobs): a ready batch is stale once it has waited stale_after and its rank has
// been served a later step, or has fallen a whole task's rounds behind the rank served furthest
// on this producer. When a worker finds no buffer room, or more than max_made_tasks made tasks are
// held, stale batches are dropped from the buffer; a rank that asks for one later has it made
// again on demand (identical bytes: the content is a function of the plan). So a rank's trouble
// costs that rank a remake, and never the other ranks their producers.
//
// Reading ahead: AddTask tells the task's maker that its batches will be asked for
// (BatchMaker::WillMake), and RevokeTask that those not made will not (WontMake), so that a maker
// reading from an object store fetches the records of the tasks held but not started while the
// workers make the current ones, and frees what it fetched for a task taken away.
//
// A batch that fails to be made is logged once and handed to its requester as the error, and is
// not retried by the workers; a later request remakes it on demand (and fails again if the data
// is still bad).
//
// Thread-safe. The destructor calls Shutdown.
class TaskRunner final : public TaskHolder {
 public:
  struct Options {
    int threads = 0;  // worker threads; 0: the hardware concurrency
    uint64_t buffer_bytes = uint64_t{256} << 20;
    uint32_t max_tasks = 2;               // tasks with batches still to make, at most
    uint32_t retain_finished_tasks = 16;  // done tasks kept for late retries
    // Made tasks (nothing left to make, not done) held beyond max_tasks before FreeTaskSlots() is
    // 0 and stale batches are evicted whatever the buffer's fill.
    uint32_t max_made_tasks = 64;
    // How long a ready batch waits before it may be evicted as stale (see above).
    absl::Duration stale_after = absl::Seconds(1);
    Clock* clock = nullptr;  // deadlines; nullptr: the real clock
    // Makes the BatchMaker of each job AddTask(task, job) is given a task of, once per job.
    // Unset: that AddTask fails (tests give makers to AddTask(task, maker) instead).
    MakerFactory makers = nullptr;
    // For tests: each batch takes this much longer to make (a slow producer).
    absl::Duration test_make_delay = absl::ZeroDuration();
  };

  struct Stats {
    uint64_t buffered_bytes = 0;  // batches made and waiting in the buffer
    uint64_t peak_buffered_bytes = 0;
    uint64_t buffer_capacity_bytes = 0;
    uint64_t batches_made = 0;  // successfully, by workers or on demand
    uint64_t make_failures = 0;
    // Records the plan named that a made batch left out (skip_failing_records).
    uint64_t records_skipped = 0;
    uint64_t batches_served = 0;  // OnServed calls
    uint64_t bytes_served = 0;
    uint64_t tasks_held = 0;
    uint64_t batches_evicted = 0;   // stale batches dropped from the buffer unserved
    uint64_t waiting_requests = 0;  // requests waiting for a batch a worker is making
    // Wall time spent making batches, by the workers and on demand, since the start: over
    // threads and elapsed time, the share of the producer's making capacity it used.
    double make_seconds = 0;
    int threads = 0;  // worker threads
  };

  // Starts the worker threads.
  explicit TaskRunner(Options options);
  ~TaskRunner() override;
  TaskRunner(const TaskRunner&) = delete;
  TaskRunner& operator=(const TaskRunner&) = delete;

  // Takes on `task`, whose batches `maker` makes. ALREADY_EXISTS if a task of that id is held
  // (a repeated assignment; the held one stays); INVALID_ARGUMENT if `maker` is null or of
  // another job, if the task's range is empty or past the end of the epoch, or if it overlaps a
  // held task; UNAVAILABLE after Shutdown. Tasks beyond max_tasks are accepted (the dispatcher
  // decides), and FreeTaskSlots() is then 0.
  absl::Status AddTask(const v1::Task& task, std::shared_ptr<const BatchMaker> maker);
  // TaskHolder: the same, with the job's maker from Options::makers (made on the job's first
  // task and kept while it is Reusable()). The factory runs on the caller's thread: one that
  // reads files or a store returns an OpeningMaker (opening_maker.h). The factory's error, naming the job, when it says this producer cannot make
  // the job (FAILED_PRECONDITION, INVALID_ARGUMENT); any other error is the job's input failing
  // (a file deleted or unreadable): the task is held all the same, and each of its batches
  // fails with that error (NOT_FOUND as DATA_LOSS, BatchMaker::Make), so that it reaches the
  // rank that needs the batch. A job whose maker failed is tried again at its next task.
  absl::Status AddTask(const v1::Task& task, const v1::JobInfo& job) override;

  // Drops task `task_id` (held or finished): its buffered batches are freed, and requests for its
  // batches fail with NOT_FOUND, those waiting for a worker and those making a batch on demand
  // alike (the latter once the batch is made): no batch of a revoked task is handed out after
  // the revocation. Returns whether the task was known.
  bool RevokeTask(uint64_t task_id) override;

  // The tasks finished since the last call, each returned once, in the order they finished.
  std::vector<uint64_t> TakeFinishedTasks() override;
  // max_tasks minus the tasks with batches still to make, or 0; 0 too while max_tasks +
  // max_made_tasks tasks are held.
  uint32_t FreeTaskSlots() const override;
  // The ids of the tasks held, in the order added.
  std::vector<uint64_t> HeldTasks() const override;
  // The held tasks with no batch pending or being made (HeldTask::Unmade() 0), in the order
  // added. A batch of theirs evicted from the buffer is made again if it is asked for.
  std::vector<uint64_t> MadeTasks() const override;
  Stats stats() const;
  v1::ProducerStats Report() const override;

  // Stops the workers (each finishes the batch it is making) and fails every waiting and later
  // request with UNAVAILABLE. Idempotent.
  void Shutdown() override;

  // BatchSource. GetBatch: NOT_FOUND ("producer does not hold batch 57 of job 'train' epoch 1")
  // if no held or retained task covers `key`. GetAnyBatch: OUT_OF_RANGE once every batch of the
  // held tasks of (job, epoch) has been handed out. Both: DEADLINE_EXCEEDED if the batch was not
  // made in time, UNAVAILABLE after Shutdown, the make error (e.g. DATA_LOSS) if it failed.
  absl::StatusOr<Batch> GetBatch(const BatchKey& key, absl::Time deadline) override;
  absl::StatusOr<std::pair<uint64_t, Batch>> GetAnyBatch(absl::string_view job, uint64_t epoch,
                                                         absl::Time deadline) override;
  void OnServed(const BatchKey& key, uint64_t bytes) override;
  // True when a held task has `key` made and buffered (GetBatch answers at once).
  bool Ready(const BatchKey& key) override;
  // The JobSpec.compression of a held or retained task's job; kNone if none is known.
  Codec CompressionOf(absl::string_view job) override;

 private:
  // A batch a worker has started: what it needs to make and deliver it.
  struct Claim {
    std::shared_ptr<HeldTask> task;
    uint64_t index = 0;     // within the task
    uint64_t reserved = 0;  // buffer bytes reserved for it
    bool probe = false;     // the first batch of its job, made before any size is known
  };

  // A batch made (after the test delay), and the wall time it took.
  struct Made {
    absl::StatusOr<Batch> batch;
    double seconds = 0;
    uint64_t planned_records = 0;  // the batch size: what the plan names
  };

  void Work();
  // The earliest batch not yet started, if the workers may start it now (task and index set).
  std::optional<Claim> NextClaimableLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool WorkOrShutdownLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishClaimLocked(const Claim& claim, Made made) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The held task covering `key`, or else a retained finished one, or nullptr.
  std::shared_ptr<HeldTask> FindLocked(const BatchKey& key) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks batch `index` of `task` handed out.
  void MarkHandedLocked(HeldTask& task, uint64_t index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the first_come waiters of (job, epoch) with OUT_OF_RANGE once no held task of it has a
  // batch left to hand out.
  void MaybeEndEpochLocked(const std::string& job, uint64_t epoch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes a batch in the calling thread; `first` logs a failure (the batch's first attempt).
  absl::StatusOr<Batch> MakeNow(const BatchMaker& maker, uint64_t epoch, uint64_t batch, bool first)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Makes a batch after the test delay, and times both.
  Made TimedMake(const BatchMaker& maker, uint64_t epoch, uint64_t batch) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Counts a made batch or a failure and the time it took, and logs the failure if `log`.
  void RecordMadeLocked(const Made& made, bool log) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Done: no longer held, reported once, retained for late requests.
  void FinishLocked(std::shared_ptr<HeldTask> task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records that batch `key`'s make failed and its requester was told.
  void MarkFailedLocked(const BatchKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Remembers that `key` (a batch of `task`) was served, for the staleness of its job's other
  // batches.
  void NoteServedLocked(const HeldTask& task, const BatchKey& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool StaleLocked(const HeldTask& task, uint64_t index, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evicts every stale ready batch; returns how many.
  uint64_t EvictStaleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AtMadeTaskCapLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const Options options_;
  Clock* const clock_;

  BatchBuffer buffer_;  // thread-safe; locked after mu_ when both are held

  mutable absl::Mutex mu_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::shared_ptr<HeldTask>> tasks_ ABSL_GUARDED_BY(mu_);    // held, in order
  std::deque<std::shared_ptr<HeldTask>> retained_ ABSL_GUARDED_BY(mu_);  // finished
  std::vector<uint64_t> finished_ ABSL_GUARDED_BY(mu_);                  // not yet taken
  // The largest batch made so far of each job: the reservation for its next batches.
  absl::flat_hash_map<std::string, uint64_t> estimates_ ABSL_GUARDED_BY(mu_);
  // Jobs whose first batch a worker is making.
  absl::flat_hash_set<std::string> probing_ ABSL_GUARDED_BY(mu_);
  uint64_t batches_made_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t make_failures_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t records_skipped_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t batches_served_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_served_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t batches_evicted_ ABSL_GUARDED_BY(mu_) = 0;
  // How far each rank of each dealt job has been served on this producer: the furthest position
  // (epoch, step), as epoch * (steps_per_epoch + 1) + step, if any.
  struct RankServed {
    bool any = false;
    uint64_t position = 0;
  };
  absl::flat_hash_map<std::string, std::vector<RankServed>> served_ ABSL_GUARDED_BY(mu_);
  absl::Time last_evict_scan_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  double make_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  int threads_ ABSL_GUARDED_BY(mu_) = 0;

  // The makers of the jobs AddTask(task, job) was given, by job name.
  absl::Mutex makers_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<const BatchMaker>> makers_
      ABSL_GUARDED_BY(makers_mu_);

  absl::Mutex join_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::vector<std::thread> workers_ ABSL_GUARDED_BY(join_mu_);
};

}  // namespace croupier

#endif  // CROUPIER_SRC_PRODUCER_TASK_RUNNER_H_

// The tasks of a producer whose batches come from outside, in order: a Python iterable served with
// croupier.serve(). Unlike TaskRunner, nothing here can make a batch on demand or make it again:
// batch g of an epoch is the g-th batch the iterable yields, so the feeder supplies the held
// tasks' batches strictly in (epoch, batch) order, and each is served once.
#ifndef CROUPIER_SRC_PRODUCER_SEQUENTIAL_SOURCE_H_
#define CROUPIER_SRC_PRODUCER_SEQUENTIAL_SOURCE_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "croupier/batch.h"
#include "proto/croupier.pb.h"
#include "src/producer/task_holder.h"
#include "src/transport/batch_source.h"

namespace croupier {

// The feeder asks NextSlot() which batch to supply next and supplies it with Put(); the data
// server hands the batches out (BatchSource). Batches wait in a buffer bounded in bytes: NextSlot
// blocks while the buffer is full, which is the backpressure a slow consumer puts on the feeder.
//
// A task is finished once every batch of it has been served. A revoked task (every consumer has
// acknowledged past it, e.g. after resuming from a checkpoint) is dropped: NextSlot then skips its
// batches, and the feeder skips them in its iterable. A request for a batch already served, or of a
// task no longer held, is NOT_FOUND: nothing can make it again.
//
// Thread-safe.
class SequentialSource final : public TaskHolder {
 public:
  struct Options {
    uint64_t buffer_bytes = uint64_t{256} << 20;
    uint32_t max_tasks = 2;
  };
  struct Stats {
    uint64_t buffered_bytes = 0;
    uint64_t buffer_capacity_bytes = 0;
    uint64_t batches_made = 0;  // supplied by Put
    uint64_t batches_served = 0;
    uint64_t bytes_served = 0;
  };

  explicit SequentialSource(Options options);
  ~SequentialSource() override;

  // Takes on `task`, in its (epoch, batch) place among the held tasks. A task before held ones
  // (one a dead source left unfinished, reassigned to this one) is held before them: NextSlot
  // then asks the feeder to go back for its batches. INVALID_ARGUMENT for an empty task, one of
  // another job than the held ones, or one that overlaps a held task; ALREADY_EXISTS for a task
  // id held already; UNAVAILABLE after Shutdown.
  absl::Status AddTask(const v1::Task& task);
  // TaskHolder: the job is not needed (the feeder makes the batches).
  absl::Status AddTask(const v1::Task& task, const v1::JobInfo& /*job*/) override {
    return AddTask(task);
  }
  // Drops a held task and its buffered batches; waiting requests get NOT_FOUND. Returns whether
  // the task was held.
  bool RevokeTask(uint64_t task_id) override;
  std::vector<uint64_t> TakeFinishedTasks() override;
  std::vector<uint64_t> HeldTasks() const override;
  // None: a stream's owner leaves at once (ProducerNode::Leave), never drains.
  std::vector<uint64_t> MadeTasks() const override { return {}; }
  // (epoch, end batch) of the furthest task ever added, if any: how far the dispatcher has dealt.
  std::optional<std::pair<uint64_t, uint64_t>> LastTaskEnd() const;
  uint32_t FreeTaskSlots() const override;
  Stats stats() const;
  v1::ProducerStats Report() const override;
  // Wakes every waiter with UNAVAILABLE; later calls fail the same way. Idempotent.
  void Shutdown() override;

  // The next batch the feeder must supply, once a held task has one and the buffer has room
  // (an empty buffer always has room, so one batch larger than the bound still passes).
  // DEADLINE_EXCEEDED at `deadline`; UNAVAILABLE after Shutdown.
  absl::StatusOr<BatchKey> NextSlot(absl::Time deadline);
  // Supplies the slot NextSlot returned: the batch, or the error every requester of it gets.
  // FAILED_PRECONDITION for another key than the next slot (a revoked slot is accepted and
  // dropped).
  absl::Status Put(const BatchKey& key, absl::StatusOr<Batch> batch);

  // BatchSource.
  absl::StatusOr<Batch> GetBatch(const BatchKey& key, absl::Time deadline) override;
  absl::StatusOr<std::pair<uint64_t, Batch>> GetAnyBatch(absl::string_view job, uint64_t epoch,
                                                         absl::Time deadline) override;
  void OnServed(const BatchKey& key, uint64_t bytes) override;

 private:
  struct Slot {
    std::optional<absl::StatusOr<Batch>> made;  // set by Put; reset once served
    bool handed = false;
    bool served = false;
  };
  struct Held {
    v1::Task task;
    std::vector<Slot> slots;
    uint64_t supplied = 0;  // slots [0, supplied) have been Put
    uint64_t served = 0;
    bool Covers(const BatchKey& k) const {
      return k.job == task.job() && k.epoch == task.epoch() && k.batch >= task.first_batch() &&
             k.batch < task.first_batch() + task.num_batches();
    }
  };

  Held* FindLocked(const BatchKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The first held task with a slot not supplied yet.
  Held* NextUnsuppliedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseLocked(Slot& slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status NotHeld(const BatchKey& key) const;

  const Options options_;
  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  std::deque<Held> held_ ABSL_GUARDED_BY(mu_);  // in (epoch, batch) order
  std::vector<uint64_t> finished_ ABSL_GUARDED_BY(mu_);
  std::optional<std::pair<uint64_t, uint64_t>> last_end_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_PRODUCER_SEQUENTIAL_SOURCE_H_

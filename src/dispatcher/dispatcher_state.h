// The dispatcher's durable state: jobs, producers, the tasks they own, orphaned tasks, consumers
// and their acknowledged positions, the id counters and each job's task cursor. It changes only
// through Apply(update), one journal::Update at a time (proto/journal.proto), so that replaying the
// journal into a fresh state rebuilds it exactly. Everything volatile (heartbeat times, statistics)
// lives in DispatcherImpl instead.
//
// Tasks. Epoch e of a job has B = batches_per_epoch global batches, cut into tasks of
// T = batches_per_task consecutive batches: task k covers [k*T, min((k+1)*T, B)). A job's cursor
// (epoch, batch) is the first task not cut yet; cutting one (TaskAssigned) moves it on. A cut task
// is either outstanding (owned by a live producer, or an orphan of a removed producer waiting to be
// assigned again) or finished, and finished tasks are only counted. A task is finished by its
// producer (TaskFinished) or, in a dealt job, once every rank has acknowledged a position past it
// (TasksDelivered), which also moves the cursor past tasks no rank needs any more. So a task
// before the cursor that is not outstanding has been delivered.
#ifndef CROUPIER_SRC_DISPATCHER_DISPATCHER_STATE_H_
#define CROUPIER_SRC_DISPATCHER_DISPATCHER_STATE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/croupier.pb.h"
#include "proto/journal.pb.h"
#include "src/job/job.h"

namespace croupier {

// The version of the journal's update semantics (proto/journal.proto). 2: TaskRemade; a
// TasksReopened no longer marks the tasks producers hold (version 1 made them orphans when they
// finished), so a journal of version 1 would not replay the same. 3: a job's settings are
// JobSpec's enums, not text; a journal of version 2 is upgraded as it is replayed
// (journal_upgrade.h).
inline constexpr int kJournalVersion = 3;

// Thread-compatible: DispatcherImpl guards it with its mutex.
class DispatcherState {
 public:
  // (epoch, first batch): where a task starts.
  using TaskKey = std::pair<uint64_t, uint64_t>;

  // An outstanding task of a job. producer_id and task_id are 0 for an orphan.
  struct Outstanding {
    uint64_t num_batches = 0;
    uint64_t task_id = 0;
    uint64_t producer_id = 0;
  };

  struct Job {
    // Never null, and never changed after creation: shared, not copied, by a snapshot
    // (SnapshotWithoutJobInfo), which may outlive the job.
    std::shared_ptr<const v1::JobInfo> info;
    JobConfig config;       // info, typed (src/job/job.h)
    uint64_t sequence = 0;  // its index in job_order(): creation order of the jobs not deleted
    // The cursor: the first task not cut yet. next_batch < batches_per_epoch always.
    uint64_t next_epoch = 0;
    uint64_t next_batch = 0;
    uint64_t tasks_finished = 0;
    uint64_t batches_finished = 0;
    std::map<TaskKey, Outstanding> outstanding;
    // The last position each rank registered at or acknowledged, kept after its consumer is
    // gone: a restarted rank resumes from it, and the delivered frontier counts it. Changed only
    // through SetRankPosition, which keeps `positions` (the same values, ordered: the frontier
    // is its first, found without a pass over the ranks).
    std::map<uint32_t, TaskKey> rank_positions;
    std::multiset<TaskKey> positions;
    // Its last consumer left (JobIdle) and none has come since: its tasks are not assigned.
    bool idle = false;

    const std::string& name() const { return info->spec().name(); }
    // True when the cursor has passed the last epoch of a bounded job: nothing is left to cut.
    bool exhausted() const;
    // True once (epoch, batch) has been cut.
    bool IsCut(uint64_t epoch, uint64_t batch) const;
  };

  struct Producer {
    uint64_t id = 0;
    std::string data_address;
    std::string source_job;     // the Python job it is the source of; empty: a TFRecord producer
    uint32_t source_index = 0;  // which of that job's sources
    std::set<uint64_t> tasks;   // the task ids it owns
    // It leaves gracefully (ProducerDraining): it serves the tasks it owns and gets no new one.
    bool draining = false;
  };

  struct Consumer {
    uint64_t id = 0;
    std::string job;
    uint32_t rank = 0;
    uint64_t epoch = 0;  // the acknowledged position: the next step it will take
    uint64_t step = 0;
    // The secret its heartbeats carry (ConsumerRegistered.lease); empty for a consumer replayed
    // from a journal written before leases.
    std::string lease;
  };

  // An orphan, in the order orphans are assigned again: lowest (epoch, batch) first, then by job
  // name.
  struct OrphanKey {
    uint64_t epoch = 0;
    uint64_t first_batch = 0;
    std::string job;
    auto operator<=>(const OrphanKey&) const = default;
  };

  DispatcherState() = default;
  DispatcherState(const DispatcherState&) = default;
  DispatcherState& operator=(const DispatcherState&) = default;

  // Applies one update. OK, or an error naming what does not fit, with the state unchanged:
  // INVALID_ARGUMENT for a malformed update (no kind, id 0, an impossible range),
  // FAILED_PRECONDITION for one that does not fit the current state (unknown job or producer, an id
  // out of order, a rank already held, a task range that is neither an orphan nor the job's next
  // task, a delivered position past the frontier).
  absl::Status Apply(const journal::Update& update);

  // Read access. Pointers stay valid until the next Apply.
  const Job* FindJob(absl::string_view name) const;
  const Producer* FindProducer(uint64_t id) const;
  const Consumer* FindConsumer(uint64_t id) const;
  // The consumer holding `rank` of `job`, or nullptr.
  const Consumer* ConsumerAt(absl::string_view job, uint32_t rank) const;
  // Whether some consumer holds a rank of `job`: only then are its tasks assigned.
  bool HasConsumers(absl::string_view job) const;
  // The live producer registered with `data_address`, or nullptr.
  const Producer* ProducerAt(absl::string_view data_address) const;
  // The task with that id and its job: nullptr unless it is outstanding and owned.
  const v1::Task* FindTask(uint64_t task_id) const;

  const std::map<std::string, Job, std::less<>>& jobs() const { return jobs_; }
  // Job names in creation order.
  const std::vector<std::string>& job_order() const { return job_order_; }
  const std::map<uint64_t, Producer>& producers() const { return producers_; }
  const std::map<uint64_t, Consumer>& consumers() const { return consumers_; }
  const std::set<OrphanKey>& orphans() const { return orphans_; }
  // The job that was last given a new (never cut before) task; empty at first. New tasks go to the
  // jobs in turn, starting after this one.
  const std::string& last_cut_job() const { return last_cut_job_; }

  uint64_t next_producer_id() const { return last_producer_id_ + 1; }
  uint64_t next_consumer_id() const { return last_consumer_id_ + 1; }
  uint64_t next_task_id() const { return last_task_id_ + 1; }

  // OK if (epoch, step) is a position a consumer of `job` may acknowledge: for a bounded job,
  // epoch < num_epochs, or (num_epochs, 0) once done; step <= steps_per_epoch (dealt) or
  // <= batches_per_epoch (first_come). INVALID_ARGUMENT naming the bound otherwise.
  static absl::Status CheckPosition(const Job& job, uint64_t epoch, uint64_t step);

  // The delivered frontier of a dealt job: the earliest of its ranks' positions
  // (Job::rank_positions). Every batch before it has reached its consumer. nullopt for a
  // first_come job or while a rank has never had a consumer.
  std::optional<TaskKey> DeliveredFrontier(const Job& job) const;
  // The outstanding tasks of `job` (owned or orphaned) that end at or before position
  // (epoch, step), i.e. whose every batch is before it, in batch order, keyed by where they start.
  static std::vector<std::pair<TaskKey, Outstanding>> TasksBefore(const Job& job, uint64_t epoch,
                                                                  uint64_t step);

  // Where the cursor of `job` must be at least once every batch before position (epoch, step) is
  // delivered: at the task holding that position's first batch (tasks wholly before it need
  // never be cut).
  static TaskKey FirstUndeliveredTask(const Job& job, uint64_t epoch, uint64_t step);

  // Where the task holding `batch` of `epoch` starts. Precondition: the batch is in the epoch.
  static TaskKey TaskHolding(const JobConfig& job, uint64_t epoch, uint64_t batch);
  // Where the task after the one at `key` starts, in this epoch or a later one.
  static TaskKey NextTaskKey(const JobConfig& job, TaskKey key);

  // The tasks a consumer taking position (epoch, step) needs made again: from the task holding
  // that position's first batch up to the cursor, those no longer outstanding (TasksReopened).
  // Tasks producers still hold are not among them: a batch of theirs that its consumer cannot
  // have any more (served before the consumer went back) is asked for again with
  // LocateRequest.remake_if_finished once the task is finished (TaskRemade). Costs no pass over
  // the tasks when none is to be made again and the position is at or before the first
  // outstanding task (consumers registering as a job starts); otherwise one pass from the
  // position to the cursor.
  static std::vector<TaskKey> TasksToReopen(const Job& job, uint64_t epoch, uint64_t step);
  // The start of the task holding `batch` of `epoch`, if that task is cut and finished (cut and
  // not outstanding): the one TaskRemade makes again. nullopt otherwise (outstanding, an orphan,
  // not cut yet, or a batch outside the epoch).
  static std::optional<TaskKey> FinishedTaskOf(const Job& job, uint64_t epoch, uint64_t batch);

  // Whether every epoch of `job` is delivered: a bounded job whose every task is cut and none is
  // outstanding (all served or delivered), or, dealt, whose every rank's position is at the end
  // of its last epoch. Never for an unbounded job.
  static bool IsDone(const Job& job);
  // The job's state (v1::JobState): done (IsDone), else running when `live_consumers` > 0, else
  // idle. A job that was done becomes running again when a consumer goes back.
  static v1::JobState StateOf(const Job& job, uint32_t live_consumers);
  // How many consumers hold a rank of each job (jobs without any are absent).
  std::map<std::string, uint32_t, std::less<>> ConsumersByJob() const;

  // The state as journal updates (SnapshotJob per job, then SnapshotEnd: proto/journal.proto)
  // that rebuild it exactly when applied to an empty state: a compacted journal's beginning.
  std::vector<journal::Update> Snapshot() const;
  // The same, cheap enough to take under the dispatcher's lock: each SnapshotJob without its
  // JobInfo (about all of a snapshot's bytes: the file lists), which job_infos[i] holds for
  // updates[i], shared with the state; FillJobInfos puts them in, without the lock.
  struct PartialSnapshot {
    std::vector<journal::Update> updates;
    std::vector<std::shared_ptr<const v1::JobInfo>> job_infos;
    // Completes `updates` into what Snapshot() returns, and drops job_infos.
    std::vector<journal::Update> FillJobInfos() &&;
  };
  PartialSnapshot SnapshotWithoutJobInfo() const;

  // A deterministic text dump of the whole state, for tests and debugging: two states are equal
  // exactly when their dumps are.
  std::string DebugString() const;

 private:
  absl::Status ApplyJobCreated(const journal::JobCreated& u);
  absl::Status ApplyProducerRegistered(const journal::ProducerRegistered& u);
  absl::Status ApplyProducerRemoved(const journal::ProducerRemoved& u);
  absl::Status ApplyProducerDraining(const journal::ProducerDraining& u);
  absl::Status ApplyTaskAssigned(const journal::TaskAssigned& u);
  absl::Status ApplyTaskFinished(const journal::TaskFinished& u);
  absl::Status ApplyConsumerRegistered(const journal::ConsumerRegistered& u);
  absl::Status ApplyConsumerAcknowledged(const journal::ConsumerAcknowledged& u);
  absl::Status ApplyConsumerRemoved(const journal::ConsumerRemoved& u);
  absl::Status ApplyTasksDelivered(const journal::TasksDelivered& u);
  absl::Status ApplyTasksReopened(const journal::TasksReopened& u);
  absl::Status ApplyTaskRemade(const journal::TaskRemade& u);
  // Makes the task at `key` of `job`, which is not outstanding, an orphan.
  void ReopenTask(Job& job, const TaskKey& key);
  absl::Status ApplyJobIdle(const journal::JobIdle& u);
  absl::Status ApplyJobDeleted(const journal::JobDeleted& u);
  absl::Status ApplySnapshotJob(const journal::SnapshotJob& u);
  absl::Status ApplySnapshotEnd(const journal::SnapshotEnd& u);
  // Whether nothing has been applied yet, but snapshot jobs: where a snapshot may be.
  bool Fresh() const;
  // Makes an owned task an orphan.
  void OrphanTask(uint64_t task_id);
  // Forgets an outstanding task, owned or orphaned, counting it as finished.
  void FinishTask(Job& job, const TaskKey& key);
  Job* MutableJob(absl::string_view name);
  // Every change of consumers_, producers_ and a job's rank positions goes through these, which
  // keep the indexes below: no call that registers, removes or acknowledges scans every
  // consumer or producer (10,000 consumers made each acknowledgement a pass over all ranks).
  void AddConsumer(Consumer consumer);
  void EraseConsumer(std::map<uint64_t, Consumer>::iterator it);
  void AddProducer(Producer producer);
  void EraseProducer(std::map<uint64_t, Producer>::iterator it);
  static void SetRankPosition(Job& job, uint32_t rank, TaskKey position);

  std::map<std::string, Job, std::less<>> jobs_;
  std::vector<std::string> job_order_;
  std::map<uint64_t, Producer> producers_;
  std::map<uint64_t, Consumer> consumers_;
  // Indexes of consumers_ and producers_ (AddConsumer and the rest keep them).
  std::map<std::pair<std::string, uint32_t>, uint64_t, std::less<>> consumer_at_;  // (job, rank)
  std::map<std::string, uint32_t, std::less<>> consumers_of_;  // job -> its live consumers
  std::map<std::string, uint64_t, std::less<>> producer_at_;   // data address -> producer
  // Owned tasks by id; orphans have no id and live only in their job's `outstanding` and here:
  std::map<uint64_t, v1::Task> tasks_;
  std::set<OrphanKey> orphans_;
  std::string last_cut_job_;
  uint64_t last_producer_id_ = 0;
  uint64_t last_consumer_id_ = 0;
  uint64_t last_task_id_ = 0;
  // The SnapshotJob entries of a snapshot being replayed, until its SnapshotEnd.
  std::vector<journal::SnapshotJob> snapshot_jobs_;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_DISPATCHER_DISPATCHER_STATE_H_

// The dispatcher's logic, one method per RPC of the Dispatcher service (proto/croupier.proto), over
// plain proto messages. The gRPC adapter (src/rpc/dispatcher_service.h) only converts statuses.
//
// Every durable change goes through DispatcherState::Apply (dispatcher_state.h); heartbeat times
// and statistics are volatile and live here. Tick() expires producers and consumers that stopped
// sending heartbeats: an expired producer's unfinished tasks become orphans, assigned again before
// any new task; an expired consumer's rank becomes free.
#ifndef CROUPIER_SRC_DISPATCHER_DISPATCHER_IMPL_H_
#define CROUPIER_SRC_DISPATCHER_DISPATCHER_IMPL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "croupier/record_index.h"
#include "proto/croupier.pb.h"
#include "proto/journal.pb.h"
#include "src/common/clock.h"
#include "src/common/env.h"
#include "src/control/caller_presence.h"
#include "src/dispatcher/dispatcher_state.h"
#include "src/dispatcher/journal.h"
#include "src/dispatcher/producer_advice.h"
#include "src/dispatcher/rates.h"
#include "src/dispatcher/work_waiters.h"

namespace croupier {

struct DispatcherOptions {
  // Told to producers and consumers in every heartbeat response.
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // A producer or consumer whose last heartbeat is older than this is removed by Tick().
  absl::Duration producer_timeout = absl::Seconds(10);
  absl::Duration consumer_timeout = absl::Seconds(60);
  // A task is this many rounds of num_consumers batches (fixed per job when it is created); 0:
  // chosen per job by AutoRoundsPerTask (job_builder.h).
  uint32_t rounds_per_task = 0;
  Clock* clock = nullptr;       // nullptr: Clock::Real(); not owned, must outlive the dispatcher
  std::string index_cache_dir;  // empty: IndexCache::DefaultDir()
  // The journal (journal.h): replayed by Create if it exists, then every durable change is
  // written to it before it takes effect. Empty: no journal, the state lives in memory only
  // (unit tests). DispatcherNode sets WORK_DIR/journal.
  std::string journal_path;
  // fdatasync the journal (grouped) before answering (JournalWriter::Options::sync); off only
  // for tests and benchmarks.
  bool journal_sync = true;
  // The answers given through a `done` callback (the gRPC adapter's) share one fdatasync per this
  // long at most (JournalWriter::Options::commit_interval): at 10,000 consumers beating once a
  // second, 5 ms keeps the syncs under 200 a second for at most 5 ms more per answer. The
  // blocking calls (the in-process control plane's, CreateJob) sync at once.
  absl::Duration journal_commit_interval = absl::Milliseconds(5);
  Env* env = nullptr;  // the journal's file access; nullptr: Env::Default(); not owned
  // The damping of the recommended number of producers (GetStatus's producer_advice).
  ProducerAdvisor::Options advice;
  // A done job (JOB_STATE_DONE) that no consumer reads is deleted by Tick() this long after the
  // dispatcher first saw it done (journaled as JobDeleted, like DeleteJob). Infinite: kept for
  // ever. Done-since times are not journaled: a restarted dispatcher counts them from its start.
  absl::Duration job_retention = absl::InfiniteDuration();
  // Journal compaction (CompactJournal, journal.h): at start, after the replay of a journal that
  // holds any update, and by Tick() once the journal passes this size or twice the size of its
  // last compaction, whichever is larger, the journal is replaced by a snapshot of the state.
  // 0: only at start.
  uint64_t journal_compact_bytes = uint64_t{64} << 20;
};

// The most tasks one ProducerHeartbeat hands out, whatever free_task_slots says.
inline constexpr uint32_t kMaxTasksPerHeartbeat = 64;

// Thread-safe. No method blocks on I/O while holding the lock: CreateJob indexes the files
// outside it.
// The advisor's figures as the status shows them (dispatcher_registration.cc).
void AdviceToProto(const ProducerAdvisor::Advice& advice, v1::ProducerAdvice& out);

class DispatcherImpl {
 public:
  // Replays the journal at options.journal_path, if set and present, into the state: the jobs,
  // producers, consumers, tasks and positions come back, and every replayed producer and
  // consumer gets a full timeout from now to send its next heartbeat. Errors:
  // INVALID_ARGUMENT for a non-positive interval or timeout; the journal's
  // errors (ReadJournal: DATA_LOSS naming the file and offset, FAILED_PRECONDITION for another
  // version), also for an entry the state refuses.
  //
  // Every RPC below that changes the durable state writes the change to the journal before the
  // change is visible to any caller. If the journal cannot be written, the call fails with
  // UNAVAILABLE naming the file and the change is not made (see JournalWriter::Append).
  //
  // No RPC below answers before everything it could have seen is durable (group commit,
  // journal.h): the changes are written (not synced) and applied under the mutex, in one order;
  // each call, after its last unlock, waits until the journal is synced up to the position
  // published when it last held the mutex (a sync ticket), and many calls share one fdatasync.
  // Reads count too: an answer read from a change that a crash could take back would reveal it.
  // The wait ends by the caller's deadline (CallDeadline, call_deadline.h: the gRPC adapter
  // sets the call's, the in-process control plane the caller's), with DEADLINE_EXCEEDED naming
  // the journal. A failed sync fails every call whose ticket it did not cover, and every later
  // one, with UNAVAILABLE naming the journal file and byte (JournalWriter::WaitSynced), until
  // the dispatcher restarts and replays what is on disk. Tick() does not wait: it answers nobody.
  static absl::StatusOr<std::unique_ptr<DispatcherImpl>> Create(DispatcherOptions options);
  // Answers every call still waiting for the journal or for work (UNAVAILABLE where its changes
  // may not be durable), then goes.
  ~DispatcherImpl();

  // Creates a job: checks the spec (job_spec.h), expands and indexes its files and checks its
  // features against the first record (job_builder.h), all outside the lock; concurrent calls for
  // the same name wait for the first one instead of indexing twice. Returns the JobInfo.
  // Errors: INVALID_ARGUMENT (or the index's DATA_LOSS, NOT_FOUND, ...) naming the problem,
  // prefixed with "job '<name>': "; ALREADY_EXISTS when the name is taken, unless exist_ok is set
  // and the spec (with defaults filled in) is identical, in which case the existing job is
  // returned; a different spec names the fields that differ.
  absl::StatusOr<v1::CreateJobResponse> CreateJob(const v1::CreateJobRequest& request);

  // The job's JobInfo, its summary (state, counts) and its ranks' positions. NOT_FOUND for an
  // unknown job.
  absl::StatusOr<v1::GetJobResponse> GetJob(const v1::GetJobRequest& request);

  // Deletes a job (JobDeleted): its source producers (python and map jobs) are removed, its
  // outstanding tasks revoked from their producers, and its name is free again. Errors:
  // NOT_FOUND for an unknown job; FAILED_PRECONDITION naming the consumers when live consumers
  // hold ranks of it and `force` is not set (with force, they are removed first); the journal's
  // UNAVAILABLE.
  absl::StatusOr<v1::DeleteJobResponse> DeleteJob(const v1::DeleteJobRequest& request);

  // producer_id 0 registers (data_address required, else INVALID_ARGUMENT; a live producer at the
  // same address is presumed restarted and removed, its tasks orphaned). Then: finished_tasks the
  // producer owns are finished (others are ignored: a retried heartbeat reports them twice), and
  // up to min(free_task_slots, kMaxTasksPerHeartbeat) tasks are assigned (task_assignment.h), with
  // the JobInfo of each job this producer has not been sent yet. With held_tasks_reported, the
  // producer's tasks that it neither holds nor reports finished are sent again first (the
  // response that carried them was lost: a call that timed out, or a dispatcher that crashed
  // after journaling them), and the tasks it holds that are no longer its own are revoked. A
  // producer without a free slot still gets one orphan, if there is one: consumers are blocked on
  // it, and if every live producer's slots held later tasks, which wait for those consumers,
  // nothing would move. revoked_tasks lists the producer's tasks that the dispatcher finished
  // because every consumer acknowledged a position past them (see TasksDelivered in
  // proto/journal.proto). Errors: NOT_FOUND for an unknown producer id, saying why (e.g. "producer
  // 3 is unknown (expired after 10 s without a heartbeat); register again"); FAILED_PRECONDITION
  // when a heartbeat gives another data address than the producer registered with.
  absl::StatusOr<v1::ProducerHeartbeatResponse> ProducerHeartbeat(
      const v1::ProducerHeartbeatRequest& request);

  // ProducerHeartbeat, answered through `done`, exactly once, on this thread or another. When the
  // request asks to wait (wait_for_work_ms), has a free task slot and the heartbeat gives it no
  // task, the answer is held until a change may give the producer work (a consumer
  // registering, a task orphaned or reopened: work_waiters.h), then carries the tasks
  // assigned at that moment; it goes without a task after wait_for_work_ms (at most the
  // heartbeat interval) or at StopWaiting(). Such an answer has waits_for_work set. The waiting
  // holds no thread. A held call whose caller has gone by then (CallerPresence, as the call
  // began: the gRPC adapter's connection closed) is given no task.
  using ProducerHeartbeatDone =
      absl::AnyInvocable<void(absl::StatusOr<v1::ProducerHeartbeatResponse>) &&>;
  void ProducerHeartbeatOrWait(const v1::ProducerHeartbeatRequest& request,
                               ProducerHeartbeatDone done);

  // Answers every held heartbeat now, and every later one at once: for a server that stops.
  void StopWaiting();

  // GetJob, DeleteJob, ConsumerHeartbeat, Locate and GetStatus answered through `done`, exactly
  // once, without holding the caller's thread while the journal syncs: the same work and answer
  // as the blocking calls, given once what the call could have seen is durable
  // (JournalWriter::WhenSynced, DispatcherOptions::journal_commit_interval), or the journal's
  // error, by the caller's CallDeadline as set when the call starts. `done` runs on the caller's
  // thread (no journal, or nothing to wait for) or on the journal's answering thread: it must
  // not block. ProducerHeartbeatOrWait answers the same way. The gRPC adapter's path.
  template <typename Response>
  using Done = absl::AnyInvocable<void(absl::StatusOr<Response>) &&>;
  void GetJob(const v1::GetJobRequest& request, Done<v1::GetJobResponse> done);
  void DeleteJob(const v1::DeleteJobRequest& request, Done<v1::DeleteJobResponse> done);
  void ConsumerHeartbeat(const v1::ConsumerHeartbeatRequest& request,
                         Done<v1::ConsumerHeartbeatResponse> done);
  void Locate(const v1::LocateRequest& request, Done<v1::LocateResponse> done);
  void GetStatus(const v1::StatusRequest& request, Done<v1::StatusResponse> done);

  // consumer_id 0 registers rank `rank` of `job` at position (epoch, step), or with `resume` at
  // the rank's last known position (Job::rank_positions; (0, 0) if none). Errors: NOT_FOUND for
  // an unknown job; INVALID_ARGUMENT when world differs from num_consumers, rank >= world or the
  // position is past the job's end; ALREADY_EXISTS when a live consumer holds the rank, naming it
  // and its last heartbeat's age (a holder silent for 3 heartbeat intervals, or consumer_timeout
  // if that is shorter, is replaced: a restarted trainer takes its rank back at once).
  // Later calls acknowledge the position and update the statistics; once every rank of a dealt
  // job has acknowledged past a task, the task is finished and its owner told to drop it. A
  // position behind finished tasks (a checkpoint restored) makes them orphans again. `leaving`
  // frees the rank at once. Errors: NOT_FOUND for an unknown (e.g. expired or replaced) consumer
  // id; INVALID_ARGUMENT for another job or rank than registered, or a position past the job's
  // end. Returns the JobInfo and the consumer's position.
  absl::StatusOr<v1::ConsumerHeartbeatResponse> ConsumerHeartbeat(
      const v1::ConsumerHeartbeatRequest& request);

  // Where batches are: see LocateTasks (locate.h). While the journal cannot be written, an
  // answer that would show a range without a producer is UNAVAILABLE naming the journal's error
  // instead (no producer can be given it). With remake_if_finished, a single batch of a
  // dealt job whose task is finished (cut and not outstanding) has that task made again first
  // (TaskRemade: an orphan, so the answer shows it not assigned yet). The error of a journal that
  // cannot be written, as for every change.
  absl::StatusOr<v1::LocateResponse> Locate(const v1::LocateRequest& request);

  // Jobs in creation order (JobSummary; their whole JobInfo only with include_job_info),
  // producers and consumers by id, with their statistics, the seconds
  // since their last heartbeat, and rates between heartbeats at least 1 s apart: for producers,
  // batches made, CPU cores used and the busy share; for consumers, batches received and the
  // input-bound share, smoothed over about 5 s. And the recommended number of producers as of
  // the last Tick().
  absl::StatusOr<v1::StatusResponse> GetStatus(const v1::StatusRequest& request);

  // Removes producers silent for longer than producer_timeout and consumers silent for longer
  // than consumer_timeout, deletes the done jobs past their retention (job_retention), compacts
  // the journal past its bound (journal_compact_bytes), and updates the recommended number of
  // producers from the rates of the producers and consumers of TFRecord jobs. The server calls
  // it every second. A compaction is written after the rest, with the lock released.
  void Tick();

  // The durable state's dump (DispatcherState::DebugString), for tests and debugging.
  std::string StateDebugString() const;

  // The last compaction's time, and how long it held the dispatcher's lock (taking the snapshot,
  // then swapping the files), for tests and benchmarks.
  struct CompactionTimes {
    absl::Duration total;
    absl::Duration lock_held;
    uint64_t bytes = 0;  // the new journal's size
  };
  CompactionTimes last_compaction() const;

 private:
  // Volatile: what a restarted dispatcher does not need.
  struct ProducerInfo {
    absl::Time last_heartbeat = absl::InfinitePast();
    v1::ProducerStats stats;
    ProducerRates rates;
    absl::flat_hash_set<std::string> jobs_sent;
    // Tasks no longer its own, to be told in the next response: finished by delivery, or handed
    // back when it began to drain.
    std::vector<uint64_t> revoked;
  };
  struct ConsumerInfo {
    absl::Time last_heartbeat = absl::InfinitePast();
    uint64_t batches_received = 0;
    uint64_t bytes_received = 0;
    double wait_seconds = 0;
    ConsumerRates rates;  // ConsumerStatus.batches_per_second, input_bound
  };
  // A CreateJob in progress (indexing outside the lock); `done` and `status` are guarded by mu_.
  struct PendingJob {
    v1::JobSpec spec;
    bool done = false;
    absl::Status status;
  };

  explicit DispatcherImpl(DispatcherOptions options);

  // The one path of every durable change: written to the journal (not synced), applied, then
  // published for the next sync. A refusal is a bug of this class: INTERNAL.
  absl::Status ApplyLocked(const journal::Update& update) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `result`, once the journal is durable up to what was published when the call last held mu_
  // (every public method's answer goes through here, after its last unlock); else the wait's
  // error (see Create's comment).
  template <typename T>
  absl::StatusOr<T> Durable(absl::StatusOr<T> result, absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status WaitForJournal(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // Durable, answered through `done` (the public Done forms).
  template <typename T>
  void DurableThen(absl::StatusOr<T> result, absl::Time deadline,
                   Done<std::type_identity_t<T>> done)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The public methods' work, answered without waiting for the journal.
  absl::StatusOr<v1::CreateJobResponse> CreateJobUnsynced(const v1::CreateJobRequest& request);
  absl::StatusOr<v1::GetJobResponse> GetJobUnsynced(const v1::GetJobRequest& request);
  absl::StatusOr<v1::DeleteJobResponse> DeleteJobUnsynced(const v1::DeleteJobRequest& request);
  absl::StatusOr<v1::ProducerHeartbeatResponse> ProducerHeartbeatUnsynced(
      const v1::ProducerHeartbeatRequest& request);
  absl::StatusOr<v1::ConsumerHeartbeatResponse> ConsumerHeartbeatUnsynced(
      const v1::ConsumerHeartbeatRequest& request);
  absl::StatusOr<v1::LocateResponse> LocateUnsynced(const v1::LocateRequest& request);
  absl::StatusOr<v1::StatusResponse> GetStatusUnsynced(const v1::StatusRequest& request);
  absl::StatusOr<v1::CreateJobResponse> ExistingJobLocked(const DispatcherState::Job& job,
                                                          const v1::JobSpec& spec, bool exist_ok)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<uint64_t> RegisterProducerLocked(const std::string& data_address,
                                                  const std::string& source_job,
                                                  uint32_t source_index, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RemoveProducerLocked(uint64_t id, std::string reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<uint64_t> RegisterConsumerLocked(const v1::ConsumerHeartbeatRequest& request,
                                                  absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RemoveConsumerLocked(uint64_t id, std::string reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Finishes the outstanding tasks of `job` that every rank has acknowledged past, and moves its
  // cursor past the tasks no rank needs any more (TasksDelivered); queues the finished tasks for
  // their owners' revoked_tasks. Does nothing for first_come jobs.
  absl::Status FinishDeliveredLocked(const std::string& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A consumer of `job` takes position (epoch, step): the finished tasks it needs again are made
  // orphans (TasksReopened), so that producers make them anew.
  absl::Status ReopenLocked(const std::string& job, uint64_t epoch, uint64_t step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // When the producer or consumer was last heard from: its last heartbeat, but no earlier than
  // when this object was created (one that came from a replayed state gets a full timeout).
  absl::Time ProducerLastHeartbeat(uint64_t id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Time ConsumerLastHeartbeat(uint64_t id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // NOT_FOUND for an id that is not registered, with why, and what to do.
  absl::Status UnknownProducer(uint64_t id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status UnknownConsumer(uint64_t id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint32_t HeartbeatIntervalMs() const;
  // How long a consumer may be silent before its rank may be taken over by a new consumer (or it
  // expires): the lease each of its heartbeats renews (ConsumerHeartbeatResponse.takeover_ms).
  absl::Duration ConsumerTakeover() const;
  // The summary of `job`, which `live_consumers` consumers read.
  v1::JobSummary SummaryLocked(const DispatcherState::Job& job, uint32_t live_consumers,
                               absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // DeleteJob's work; `why` goes in the log line.
  absl::StatusOr<v1::DeleteJobResponse> DeleteJobLocked(const std::string& name, bool force,
                                                        absl::string_view why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Notes when each job became done (done_since_) and deletes the done jobs, without consumers,
  // older than job_retention.
  void ExpireDoneJobsLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Replaces the journal with a snapshot of the state (dispatcher_compaction.cc), holding mu_ only
  // to take the snapshot and to swap the files: the snapshot is written while calls are served
  // (JournalWriter's compaction steps). OK at once if a compaction is under way. On an error
  // before the swap the old journal stays in use; after it, every change is refused
  // (journal_lost_) until the dispatcher restarts. journal_error_ says why in both cases.
  absl::Status CompactJournal() ABSL_LOCKS_EXCLUDED(mu_);
  // Tick()'s work under the lock; returns whether to compact the journal then.
  bool TickLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the journal has grown past its bound (and no compaction is under way).
  bool CompactionDueLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Notes the outcome of a journal write: the first failure is logged as an ERROR naming the file
  // and the OS error, and stays in journal_error_ (GetStatus) until a write succeeds again.
  void NoteJournalWriteLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Feeds the advisors the rates of the live producers and consumers: the cluster's (consumers of
  // TFRecord jobs, generic producers) and each job's (its consumers; the producers bound to it
  // for a map job, the generic ones for a TFRecord job; a stream job has none). Makes the
  // advisors of new jobs and drops those of jobs gone.
  void UpdateAdviceLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Job `job`'s advice as its summary shows it (JobSummary.producer_advice).
  v1::ProducerAdvice JobAdviceLocked(const DispatcherState::Job& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Journals that producer `id` drains (ProducerDraining): it keeps the tasks it owns that the
  // request's made_tasks name, and the others become orphans, revoked at this heartbeat (through
  // info.revoked).
  absl::Status StartDrainingLocked(uint64_t id, const v1::ProducerHeartbeatRequest& request,
                                   ProducerInfo& info) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Assigns producer `id` up to `slots` new tasks (task_assignment.h) into `response`, with the
  // JobInfo of each job it has not been sent yet.
  absl::Status AssignTasksLocked(uint64_t id, uint32_t slots, ProducerInfo& info,
                                 v1::ProducerHeartbeatResponse& response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Holds `response` for producer `id` until work may be available or `deadline`, then assigns
  // it up to `slots` tasks; waits again, within the deadline, when another producer took the work.
  // The answer waits for the journal as every call's does, by `call_deadline`. A producer whose
  // call is `gone` when work may be available is given none (its answer would be lost).
  void WaitForWork(uint64_t id, uint32_t slots, absl::Time deadline, absl::Time call_deadline,
                   CallerPresence::GoneProbe gone, v1::ProducerHeartbeatResponse response,
                   ProducerHeartbeatDone done);

  // The tasks of producer `id` that `request` shows it does not know it owns (held_tasks).
  std::vector<v1::Task> LostTasksLocked(uint64_t id, const v1::ProducerHeartbeatRequest& request,
                                        ProducerInfo& info) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const DispatcherOptions options_;
  Clock* const clock_;
  // When this dispatcher started serving, after the replay: set once by Create, before the
  // object is shared.
  absl::Time created_;
  IndexCache index_cache_;  // thread-safe

  mutable absl::Mutex mu_;
  DispatcherState state_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, ProducerInfo> producer_info_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, ConsumerInfo> consumer_info_ ABSL_GUARDED_BY(mu_);
  // Why recently removed producers and consumers are gone, for the NOT_FOUND they get (bounded).
  std::map<uint64_t, std::string> gone_producers_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::string> gone_consumers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<PendingJob>> creating_ ABSL_GUARDED_BY(mu_);
  ProducerAdvisor advisor_ ABSL_GUARDED_BY(mu_);
  // One per job but stream jobs, made at its first measurement and dropped with the job (not
  // journaled: measurement, rebuilt after a restart).
  std::map<std::string, ProducerAdvisor, std::less<>> job_advisors_ ABSL_GUARDED_BY(mu_);
  // When Tick() first saw each done job done (volatile: a job replayed done counts from the first
  // Tick after the start).
  std::map<std::string, absl::Time, std::less<>> done_since_ ABSL_GUARDED_BY(mu_);
  // Null without a journal. The pointer is set once by Create, before the object is shared;
  // the writer's writing side (Append, DropLast, Publish, Compact) is used under mu_ (see
  // ApplyLocked), its waiting side (WaitSynced) outside it.
  std::unique_ptr<JournalWriter> journal_;
  // The journal could not be reopened after a compaction: every change fails with this.
  absl::Status journal_lost_ ABSL_GUARDED_BY(mu_);
  // Why the last journal write failed (StatusResponse.journal_error); empty once one succeeds.
  std::string journal_error_ ABSL_GUARDED_BY(mu_);
  uint64_t compacted_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // the journal's size after compaction
  bool compacting_ ABSL_GUARDED_BY(mu_) = false;       // CompactJournal is under way
  CompactionTimes last_compaction_ ABSL_GUARDED_BY(mu_);
  // Heartbeats held for work. Last, so that it stops (answering who still waits) before the rest
  // of this object goes.
  WorkWaiters waiters_;
};

template <typename T>
void DispatcherImpl::DurableThen(absl::StatusOr<T> result, absl::Time deadline,
                                 Done<std::type_identity_t<T>> done) {
  if (!journal_) {
    std::move(done)(std::move(result));
    return;
  }
  // The same ticket as WaitForJournal's, read after the call's last unlock of mu_.
  journal_->WhenSynced(journal_->published(), deadline,
                       [result = std::move(result), done = std::move(done)](
                           absl::Status synced) mutable {
                         if (!synced.ok()) {
                           std::move(done)(std::move(synced));
                         } else {
                           std::move(done)(std::move(result));
                         }
                       });
}

}  // namespace croupier

#endif  // CROUPIER_SRC_DISPATCHER_DISPATCHER_IMPL_H_

// DispatcherImpl: construction, jobs, Locate and GetStatus. Registration and expiry are in
// dispatcher_registration.cc, the heartbeats' work (tasks, waiting, acknowledgements) in
// dispatcher_work.cc.
#include "src/dispatcher/dispatcher_impl.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "croupier/plan.h"
#include "src/common/env.h"
#include "src/common/logging.h"
#include "src/common/protocol.h"
#include "src/common/status_macros.h"
#include "src/control/call_deadline.h"
#include "src/dispatcher/job_builder.h"
#include "src/dispatcher/job_spec.h"
#include "src/dispatcher/locate.h"
#include "src/job/job_settings.h"

namespace croupier {

absl::StatusOr<std::unique_ptr<DispatcherImpl>> DispatcherImpl::Create(DispatcherOptions options) {
  auto positive = [](absl::string_view name, absl::Duration d) {
    if (d > absl::ZeroDuration()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "dispatcher option ", name, " is ", absl::FormatDuration(d), "; it must be positive"));
  };
  RETURN_IF_ERROR(positive("heartbeat_interval", options.heartbeat_interval));
  RETURN_IF_ERROR(positive("producer_timeout", options.producer_timeout));
  RETURN_IF_ERROR(positive("consumer_timeout", options.consumer_timeout));
  if (options.clock == nullptr) options.clock = Clock::Real();
  if (options.env == nullptr) options.env = Env::Default();
  std::unique_ptr<DispatcherImpl> impl(new DispatcherImpl(std::move(options)));
  if (!impl->options_.journal_path.empty()) {
    const absl::Time start = absl::Now();
    bool replayed_any = false;
    {
      absl::MutexLock lock(&impl->mu_);
      DispatcherState& state = impl->state_;
      ASSIGN_OR_RETURN(OpenedJournal journal,
                       OpenJournal(*impl->options_.env, impl->options_.journal_path,
                                   [&state](const journal::Update& update, uint64_t) {
                                     return state.Apply(update);
                                   },
                                   {.sync = impl->options_.journal_sync,
                                    .commit_interval = impl->options_.journal_commit_interval}));
      impl->journal_ = std::move(journal.writer);
      if (journal.replay.file_bytes > 0) {
        uint64_t tasks = 0;
        for (const auto& [name, job] : state.jobs()) tasks += job.outstanding.size();
        Log(LogLevel::kInfo, "dispatcher",
            absl::StrCat("replayed ", journal.replay.entries, " entries (",
                         journal.replay.valid_bytes, " bytes) of journal ",
                         impl->options_.journal_path, " in ",
                         absl::FormatDuration(absl::Now() - start), ": ", state.jobs().size(),
                         " jobs, ", state.producers().size(), " producers, ",
                         state.consumers().size(), " consumers, ", tasks,
                         " outstanding tasks; producers and consumers have a full timeout to "
                         "send their next heartbeat"));
      }
      replayed_any = journal.replay.entries > 0;
    }
    // A journal that holds updates starts anew as a snapshot of what they built: replays stay as
    // short as the state is small, however long the dispatcher ran.
    if (replayed_any) {
      absl::Status compacted = impl->CompactJournal();
      if (!compacted.ok()) {
        Log(LogLevel::kError, "dispatcher",
            absl::StrCat("the journal could not be compacted at start (", compacted.message(),
                         "); it stays as it was"));
        absl::MutexLock lock(&impl->mu_);
        RETURN_IF_ERROR(impl->journal_lost_);
      }
    }
    // Replayed producers and consumers are timed from now, not from before the replay.
    absl::MutexLock lock(&impl->mu_);
    impl->created_ = impl->clock_->Now();
  }
  return impl;
}

DispatcherImpl::DispatcherImpl(DispatcherOptions options)
    : options_(std::move(options)),
      clock_(options_.clock),
      created_(clock_->Now()),
      index_cache_(options_.index_cache_dir),
      advisor_(options_.advice) {}

absl::Status DispatcherImpl::ApplyLocked(const journal::Update& update) {
  // Written under mu_, and before the update is applied. Under mu_ because the journal's order
  // must be the order of application: an update depends on the state before it (ids, cursors,
  // owners), so replaying in file order rebuilds the state only if no other update was applied
  // between writing and applying this one. Only written here, not synced: nothing applied may
  // reach a caller (this RPC's response, or another RPC reading the state) before a crash can no
  // longer take it back, and every public method waits for that after releasing mu_ (Durable),
  // so that the syncs of concurrent calls are shared and none is taken under mu_.
  RETURN_IF_ERROR(journal_lost_);
  if (journal_) {
    absl::Status written = journal_->Append(update);
    NoteJournalWriteLocked(written);
    RETURN_IF_ERROR(written);
  }
  const size_t orphans_before = state_.orphans().size();
  absl::Status status = state_.Apply(update);
  if (!status.ok()) {
    if (journal_) {
      // The state is unchanged; the journal must not keep what a replay would refuse.
      if (absl::Status dropped = journal_->DropLast(); !dropped.ok()) {
        Log(LogLevel::kError, "dispatcher", dropped.ToString());
      }
    }
    return absl::InternalError(absl::StrCat("the dispatcher's state refused its own update (",
                                            update.ShortDebugString(), "): ", status.message()));
  }
  if (journal_) journal_->Publish();
  // The changes that can give a producer a task (task_assignment.h): a consumer registering (a
  // job is idle from its creation until then), and new orphans (of a removed producer, a
  // reopened range, a task made again on request). And those that a held producer must hear of
  // at once: its removal (a deleted job's source producers), a job deleted (its tasks revoked).
  if (update.has_consumer_registered() || state_.orphans().size() > orphans_before ||
      update.has_producer_removed() || update.has_job_deleted()) {
    waiters_.Notify();
  }
  return absl::OkStatus();
}

absl::Status DispatcherImpl::WaitForJournal(absl::Time deadline) {
  if (!journal_) return absl::OkStatus();
  // Read after the call's last unlock of mu_: at least what was published then, which covers
  // every change the call could have seen (ApplyLocked publishes before mu_ is released).
  return journal_->WaitSynced(journal_->published(), deadline);
}

template <typename T>
absl::StatusOr<T> DispatcherImpl::Durable(absl::StatusOr<T> result, absl::Time deadline) {
  RETURN_IF_ERROR(WaitForJournal(deadline));
  return result;
}

DispatcherImpl::~DispatcherImpl() {
  // Answers still waiting for the journal may hold producers' heartbeats for work (waiters_,
  // which goes before journal_): they are answered first, while waiters_ can take them.
  if (journal_) journal_->StopAnswering();
  waiters_.Stop();
}

absl::StatusOr<v1::CreateJobResponse> DispatcherImpl::CreateJob(
    const v1::CreateJobRequest& request) {
  return Durable(CreateJobUnsynced(request), CallDeadline::Current());
}
absl::StatusOr<v1::GetJobResponse> DispatcherImpl::GetJob(const v1::GetJobRequest& request) {
  return Durable(GetJobUnsynced(request), CallDeadline::Current());
}
absl::StatusOr<v1::DeleteJobResponse> DispatcherImpl::DeleteJob(
    const v1::DeleteJobRequest& request) {
  return Durable(DeleteJobUnsynced(request), CallDeadline::Current());
}
absl::StatusOr<v1::ProducerHeartbeatResponse> DispatcherImpl::ProducerHeartbeat(
    const v1::ProducerHeartbeatRequest& request) {
  return Durable(ProducerHeartbeatUnsynced(request), CallDeadline::Current());
}
absl::StatusOr<v1::ConsumerHeartbeatResponse> DispatcherImpl::ConsumerHeartbeat(
    const v1::ConsumerHeartbeatRequest& request) {
  return Durable(ConsumerHeartbeatUnsynced(request), CallDeadline::Current());
}
absl::StatusOr<v1::LocateResponse> DispatcherImpl::Locate(const v1::LocateRequest& request) {
  return Durable(LocateUnsynced(request), CallDeadline::Current());
}
absl::StatusOr<v1::StatusResponse> DispatcherImpl::GetStatus(const v1::StatusRequest& request) {
  return Durable(GetStatusUnsynced(request), CallDeadline::Current());
}

void DispatcherImpl::GetJob(const v1::GetJobRequest& request, Done<v1::GetJobResponse> done) {
  DurableThen(GetJobUnsynced(request), CallDeadline::Current(), std::move(done));
}
void DispatcherImpl::DeleteJob(const v1::DeleteJobRequest& request,
                               Done<v1::DeleteJobResponse> done) {
  DurableThen(DeleteJobUnsynced(request), CallDeadline::Current(), std::move(done));
}
void DispatcherImpl::ConsumerHeartbeat(const v1::ConsumerHeartbeatRequest& request,
                                       Done<v1::ConsumerHeartbeatResponse> done) {
  DurableThen(ConsumerHeartbeatUnsynced(request), CallDeadline::Current(), std::move(done));
}
void DispatcherImpl::Locate(const v1::LocateRequest& request, Done<v1::LocateResponse> done) {
  DurableThen(LocateUnsynced(request), CallDeadline::Current(), std::move(done));
}
void DispatcherImpl::GetStatus(const v1::StatusRequest& request,
                               Done<v1::StatusResponse> done) {
  DurableThen(GetStatusUnsynced(request), CallDeadline::Current(), std::move(done));
}

std::string DispatcherImpl::StateDebugString() const {
  absl::MutexLock lock(&mu_);
  return state_.DebugString();
}

uint32_t DispatcherImpl::HeartbeatIntervalMs() const {
  return static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.heartbeat_interval));
}

absl::StatusOr<v1::CreateJobResponse> DispatcherImpl::CreateJobUnsynced(
    const v1::CreateJobRequest& request) {
  ASSIGN_OR_RETURN(v1::JobSpec spec, NormalizeJobSpec(request.spec()));
  const std::string name = spec.name();
  auto pending = std::make_shared<PendingJob>();
  pending->spec = spec;
  {
    absl::MutexLock lock(&mu_);
    while (true) {
      if (const DispatcherState::Job* job = state_.FindJob(name)) {
        return ExistingJobLocked(*job, spec, request.exist_ok());
      }
      auto it = creating_.find(name);
      if (it == creating_.end()) break;
      // Another call is indexing this job: wait for it (Await releases the lock meanwhile).
      std::shared_ptr<PendingJob> other = it->second;
      mu_.Await(absl::Condition(
          +[](PendingJob* p) { return p->done; }, other.get()));
      if (!other->status.ok() && DescribeSpecDifference(other->spec, spec).empty()) {
        return other->status;  // the same spec would fail the same way
      }
    }
    creating_[name] = pending;
  }

  absl::StatusOr<v1::JobInfo> info =
      BuildJobInfo(spec, index_cache_, *Env::Default(), options_.rounds_per_task);

  absl::MutexLock lock(&mu_);
  creating_.erase(name);
  pending->done = true;
  pending->status = info.status();
  if (!info.ok()) return info.status();
  journal::Update update;
  *update.mutable_job_created()->mutable_job() = *info;
  update.mutable_job_created()->set_plan_version(kPlanVersion);
  RETURN_IF_ERROR(ApplyLocked(update));
  // Nobody reads the job yet: its tasks wait for its first consumer, so that a job created and
  // never read holds no producer slots that later jobs need.
  journal::Update idle;
  idle.mutable_job_idle()->set_job(name);
  RETURN_IF_ERROR(ApplyLocked(idle));
  Log(LogLevel::kInfo, "dispatcher",
      absl::StrCat("created job '", name, "': ", info->num_records(), " records in ",
                   info->files_size(), " files, ", info->batches_per_epoch(),
                   " batches per epoch of ", spec.batch_size(), ", dealt to ", spec.num_consumers(),
                   " consumers (", SettingsTextOf(info->spec()).mode, ")"));
  v1::CreateJobResponse response;
  *response.mutable_job() = *std::move(info);
  return response;
}

absl::StatusOr<v1::CreateJobResponse> DispatcherImpl::ExistingJobLocked(
    const DispatcherState::Job& job, const v1::JobSpec& spec, bool exist_ok) {
  const std::string difference = DescribeSpecDifference(job.info->spec(), spec);
  if (!difference.empty()) {
    return absl::AlreadyExistsError(
        absl::StrCat("job '", job.name(), "' already exists with a different spec: ", difference));
  }
  if (!exist_ok) {
    return absl::AlreadyExistsError(absl::StrCat(
        "job '", job.name(), "' already exists (with this spec; pass exist_ok to use it)"));
  }
  v1::CreateJobResponse response;
  *response.mutable_job() = *job.info;
  return response;
}

absl::StatusOr<v1::GetJobResponse> DispatcherImpl::GetJobUnsynced(
    const v1::GetJobRequest& request) {
  absl::MutexLock lock(&mu_);
  const DispatcherState::Job* job = state_.FindJob(request.name());
  if (job == nullptr) return UnknownJobError(state_, request.name());
  v1::GetJobResponse response;
  *response.mutable_job() = *job->info;
  const auto readers = state_.ConsumersByJob();
  auto it = readers.find(request.name());
  *response.mutable_summary() =
      SummaryLocked(*job, it == readers.end() ? 0 : it->second, clock_->Now());
  for (const auto& [rank, position] : job->rank_positions) {
    v1::RankPosition* p = response.add_rank_positions();
    p->set_job(request.name());
    p->set_rank(rank);
    p->set_epoch(position.first);
    p->set_step(position.second);
  }
  return response;
}

absl::StatusOr<v1::LocateResponse> DispatcherImpl::LocateUnsynced(
    const v1::LocateRequest& request) {
  absl::MutexLock lock(&mu_);
  if (request.remake_if_finished() && request.num_batches() == 1) {
    const DispatcherState::Job* job = state_.FindJob(request.job());
    if (job != nullptr && job->config.dealt()) {
      const std::optional<DispatcherState::TaskKey> key =
          DispatcherState::FinishedTaskOf(*job, request.epoch(), request.first_batch());
      if (key) {
        journal::Update update;
        update.mutable_task_remade()->set_job(request.job());
        update.mutable_task_remade()->set_epoch(key->first);
        update.mutable_task_remade()->set_first_batch(key->second);
        RETURN_IF_ERROR(ApplyLocked(update));
        Log(LogLevel::kInfo, "dispatcher",
            absl::StrCat("job '", request.job(), "': batch ", request.first_batch(), " of epoch ",
                         request.epoch(),
                         " was asked for after its task finished; the task (from "
                         "batch ",
                         key->second, ") will be made again"));
      }
    }
  }
  ASSIGN_OR_RETURN(v1::LocateResponse response, LocateTasks(state_, request));
  if (!journal_error_.empty()) {
    // Batches without a producer get none while no assignment can be journaled: the consumer
    // waiting for them hears why, instead of timing out on a producer that never comes.
    for (const v1::TaskLocation& t : response.tasks()) {
      if (!t.finished() && t.producer_address().empty()) {
        return absl::UnavailableError(absl::StrCat(
            "job '", request.job(), "' epoch ", request.epoch(), " batch ", t.task().first_batch(),
            " has no producer, and none can be given one: the "
            "dispatcher cannot write its journal (",
            journal_error_, ")"));
      }
    }
  }
  return response;
}

absl::StatusOr<v1::StatusResponse> DispatcherImpl::GetStatusUnsynced(
    const v1::StatusRequest& request) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  v1::StatusResponse response;
  response.set_protocol_version(kProtocolVersion);
  response.set_journal_error(journal_error_);
  if (journal_) {
    response.set_journal_syncs(journal_->syncs());
    response.set_journal_bytes(journal_->size());  // the writing side: under mu_
  }
  if (options_.job_retention != absl::InfiniteDuration()) {
    response.set_job_retention_seconds(absl::ToDoubleSeconds(options_.job_retention));
  }
  response.set_num_producers(static_cast<uint32_t>(state_.producers().size()));
  response.set_num_consumers(static_cast<uint32_t>(state_.consumers().size()));
  const bool clients = !request.omit_clients();
  const auto readers = state_.ConsumersByJob();
  for (const std::string& name : state_.job_order()) {
    const DispatcherState::Job& job = *state_.FindJob(name);
    // Summaries only by default: whole JobInfos (file lists) would grow without bound.
    if (request.include_job_info()) *response.add_jobs() = *job.info;
    auto it = readers.find(name);
    *response.add_job_summaries() = SummaryLocked(job, it == readers.end() ? 0 : it->second, now);
    if (!clients) continue;
    for (const auto& [rank, position] : job.rank_positions) {
      v1::RankPosition* p = response.add_rank_positions();
      p->set_job(name);
      p->set_rank(rank);
      p->set_epoch(position.first);
      p->set_step(position.second);
    }
  }
  AdviceToProto(advisor_.advice(), *response.mutable_producer_advice());
  if (!clients) return response;
  for (const auto& [id, producer] : state_.producers()) {
    v1::ProducerStatus* out = response.add_producers();
    out->set_producer_id(id);
    out->set_data_address(producer.data_address);
    out->set_draining(producer.draining);
    out->set_source_job(producer.source_job);
    for (uint64_t task : producer.tasks) out->add_tasks(task);
    auto info = producer_info_.find(id);
    // Since its last heartbeat, or since this dispatcher started for a producer replayed from
    // the journal and not heard from yet (ProducerLastHeartbeat adds a grace for expiry).
    const absl::Time heard =
        info == producer_info_.end() ? created_ : std::max(created_, info->second.last_heartbeat);
    out->set_seconds_since_heartbeat(absl::ToDoubleSeconds(now - heard));
    if (info != producer_info_.end()) {
      *out->mutable_stats() = info->second.stats;
      out->set_batches_per_second(info->second.rates.batches_per_second());
      out->set_cpu_cores(info->second.rates.cpu_cores());
      out->set_busy_share(info->second.rates.busy_share());
    }
  }
  for (const auto& [id, consumer] : state_.consumers()) {
    v1::ConsumerStatus* out = response.add_consumers();
    out->set_consumer_id(id);
    out->set_job(consumer.job);
    out->set_rank(consumer.rank);
    out->set_epoch(consumer.epoch);
    out->set_step(consumer.step);
    out->set_seconds_since_heartbeat(absl::ToDoubleSeconds(now - ConsumerLastHeartbeat(id)));
    auto info = consumer_info_.find(id);
    if (info != consumer_info_.end()) {
      out->set_batches_received(info->second.batches_received);
      out->set_bytes_received(info->second.bytes_received);
      out->set_wait_seconds(info->second.wait_seconds);
      out->set_batches_per_second(info->second.rates.batches_per_second());
      out->set_input_bound(info->second.rates.input_bound());
    }
  }
  return response;
}

}  // namespace croupier

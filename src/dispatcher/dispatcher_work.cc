// DispatcherImpl: the work. Producer heartbeats (finished tasks, lost and new assignments, the
// heartbeats held until there is work) and consumer heartbeats (acknowledged positions, which
// finish delivered tasks and reopen the ones a consumer needs again).
#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/control/call_deadline.h"
#include "src/dispatcher/dispatcher_impl.h"
#include "src/dispatcher/job_spec.h"
#include "src/dispatcher/locate.h"
#include "src/dispatcher/task_assignment.h"
#include "src/net/token.h"

namespace croupier {

absl::StatusOr<v1::ProducerHeartbeatResponse> DispatcherImpl::ProducerHeartbeatUnsynced(
    const v1::ProducerHeartbeatRequest& request) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  uint64_t id = request.producer_id();
  if (id == 0 && request.leaving()) return v1::ProducerHeartbeatResponse();  // never registered
  if (id == 0) {
    ASSIGN_OR_RETURN(id, RegisterProducerLocked(request.data_address(), request.source_job(),
                                                request.source_index(), now));
  } else {
    const DispatcherState::Producer* producer = state_.FindProducer(id);
    if (producer == nullptr) return UnknownProducer(id);
    if (!request.data_address().empty() && request.data_address() != producer->data_address) {
      return absl::FailedPreconditionError(
          absl::StrCat("producer ", id, " registered with data address ", producer->data_address,
                       ", but this heartbeat gives ", request.data_address(), "; register again"));
    }
  }

  ProducerInfo& info = producer_info_[id];
  info.last_heartbeat = now;
  if (request.has_stats()) {
    info.rates.Report(request.stats(), now);
    info.stats = request.stats();
  }

  for (uint64_t task_id : request.finished_tasks()) {
    if (!state_.FindProducer(id)->tasks.contains(task_id)) {
      // Finished already (a retried heartbeat), or never this producer's.
      Log(LogLevel::kDebug, "dispatcher",
          absl::StrCat("producer ", id, " reports task ", task_id,
                       " finished, but does not own it; ignored"));
      continue;
    }
    journal::Update update;
    update.mutable_task_finished()->set_task_id(task_id);
    update.mutable_task_finished()->set_producer_id(id);
    RETURN_IF_ERROR(ApplyLocked(update));
  }

  v1::ProducerHeartbeatResponse response;
  response.set_producer_id(id);
  response.set_heartbeat_interval_ms(HeartbeatIntervalMs());
  if (request.leaving()) {
    // Its other tasks become orphans now, and wake the producers waiting for work.
    RETURN_IF_ERROR(RemoveProducerLocked(id, "it left"));
    return response;
  }
  if (request.draining() && !state_.FindProducer(id)->draining) {
    RETURN_IF_ERROR(StartDrainingLocked(id, request, info));
  }
  if (state_.FindProducer(id)->draining) {
    // It serves what it kept and takes nothing new; what it held beyond that is revoked.
    for (uint64_t task_id : info.revoked) response.add_revoked_tasks(task_id);
    info.revoked.clear();
    return response;
  }
  uint32_t slots = std::min(request.free_task_slots(), kMaxTasksPerHeartbeat);
  for (v1::Task& task : LostTasksLocked(id, request, info)) {
    // Lost tasks take the slots first: the producer counted them as free.
    slots -= std::min<uint32_t>(slots, 1);
    if (info.jobs_sent.insert(task.job()).second) {
      *response.add_jobs() = *state_.FindJob(task.job())->info;
    }
    *response.add_new_tasks() = std::move(task);
  }
  // Orphans go first, so with a free slot the first task is an orphan anyway.
  if (slots == 0 && !state_.orphans().empty()) slots = 1;
  RETURN_IF_ERROR(AssignTasksLocked(id, slots, info, response));
  for (uint64_t task_id : info.revoked) response.add_revoked_tasks(task_id);
  info.revoked.clear();
  return response;
}

absl::Status DispatcherImpl::StartDrainingLocked(uint64_t id,
                                                 const v1::ProducerHeartbeatRequest& request,
                                                 ProducerInfo& info) {
  const DispatcherState::Producer& producer = *state_.FindProducer(id);
  const std::set<uint64_t> made(request.made_tasks().begin(), request.made_tasks().end());
  journal::Update update;
  update.mutable_producer_draining()->set_producer_id(id);
  std::vector<uint64_t> handed_back;
  for (uint64_t task_id : producer.tasks) {
    if (made.contains(task_id)) {
      update.mutable_producer_draining()->add_kept_tasks(task_id);
    } else {
      handed_back.push_back(task_id);
    }
  }
  const std::string address = producer.data_address;
  RETURN_IF_ERROR(ApplyLocked(update));
  for (uint64_t task_id : handed_back) info.revoked.push_back(task_id);
  Log(LogLevel::kInfo, "dispatcher",
      absl::StrCat("producer ", id, " at ", address, " drains: it keeps the ",
                   update.producer_draining().kept_tasks_size(),
                   " tasks it has made, to serve them, and hands back ", handed_back.size(),
                   ", which will be assigned again"));
  return absl::OkStatus();
}

absl::Status DispatcherImpl::AssignTasksLocked(uint64_t id, uint32_t slots, ProducerInfo& info,
                                               v1::ProducerHeartbeatResponse& response) {
  for (uint32_t i = 0; i < slots; ++i) {
    std::optional<v1::Task> task = NextTask(state_, *state_.FindProducer(id));
    if (!task) break;
    journal::Update update;
    *update.mutable_task_assigned()->mutable_task() = *task;
    update.mutable_task_assigned()->set_producer_id(id);
    RETURN_IF_ERROR(ApplyLocked(update));
    if (info.jobs_sent.insert(task->job()).second) {
      *response.add_jobs() = *state_.FindJob(task->job())->info;
    }
    *response.add_new_tasks() = *std::move(task);
  }
  return absl::OkStatus();
}

void DispatcherImpl::ProducerHeartbeatOrWait(const v1::ProducerHeartbeatRequest& request,
                                             ProducerHeartbeatDone done) {
  // Every answer, now or after waiting for work, is given once durable, by the call's deadline.
  const absl::Time call_deadline = CallDeadline::Current();
  absl::StatusOr<v1::ProducerHeartbeatResponse> response = ProducerHeartbeatUnsynced(request);
  const uint32_t slots = std::min(request.free_task_slots(), kMaxTasksPerHeartbeat);
  if (!response.ok() || request.wait_for_work_ms() == 0 || slots == 0 ||
      response->new_tasks_size() > 0) {
    if (response.ok() && request.wait_for_work_ms() != 0) response->set_waits_for_work(true);
    DurableThen(std::move(response), call_deadline, std::move(done));
    return;
  }
  response->set_waits_for_work(true);
  const absl::Duration wait =
      std::min(absl::Milliseconds(request.wait_for_work_ms()), options_.heartbeat_interval);
  const uint64_t id = response->producer_id();  // read before the response is moved
  // Held at once, before its changes are durable (its answer waits for that): a notification
  // that came while it waited for the journal would be lost, and the producer would wait out the
  // whole interval while others took the work.
  WaitForWork(id, slots, absl::Now() + wait, call_deadline, CallerPresence::Current(),
              *std::move(response), std::move(done));
}

void DispatcherImpl::WaitForWork(uint64_t id, uint32_t slots, absl::Time deadline,
                                 absl::Time call_deadline, CallerPresence::GoneProbe gone,
                                 v1::ProducerHeartbeatResponse response,
                                 ProducerHeartbeatDone done) {
  waiters_.Wait(deadline, [this, id, slots, deadline, call_deadline, gone = std::move(gone),
                           response = std::move(response),
                           done = std::move(done)](WorkWaiters::Wake why) mutable {
    absl::StatusOr<v1::ProducerHeartbeatResponse> result = std::move(response);
    if (why == WorkWaiters::Wake::kWorkMayBeAvailable && gone()) {
      // Its connection closed (a producer killed as it waited): tasks given now would be lost
      // with the answer and wait for the producer's timeout. Given to the others instead; a
      // producer still alive beats again at once and is given work then.
      Log(LogLevel::kInfo, "dispatcher",
          absl::StrCat("producer ", id, "'s heartbeat held for work was cancelled (its "
                       "connection closed): no task given to it"));
    } else if (why == WorkWaiters::Wake::kWorkMayBeAvailable) {
      absl::Status assigned = absl::OkStatus();
      {
        absl::MutexLock lock(&mu_);
        auto info = producer_info_.find(id);
        if (state_.FindProducer(id) == nullptr || info == producer_info_.end()) {
          // Removed meanwhile (its source job deleted, or another producer's call removed it):
          // told now, so that it registers again or learns its job has ended at once.
          assigned = UnknownProducer(id);
        } else {
          assigned = AssignTasksLocked(id, slots, info->second, *result);
          // And what was revoked from it while it waited (its job's last consumer left): the
          // tasks assigned now may be those tasks' batches again, under new ids, and the
          // producer drops the revoked ones before it takes new ones (ProducerNode). Left for
          // its next heartbeat, they would still be held when the new ones came, which it
          // would refuse as overlapping.
          // Only with an answer that goes out: an error replaces it, and they wait in `info`.
          if (assigned.ok()) {
            for (uint64_t task_id : info->second.revoked) result->add_revoked_tasks(task_id);
            info->second.revoked.clear();
          }
        }
      }
      if (!assigned.ok()) {
        result = assigned;
      } else if (result->new_tasks_size() == 0 && result->revoked_tasks_size() == 0 &&
                 absl::Now() < deadline) {
        // Nothing assigned nor revoked, nothing answered: held again at once.
        WaitForWork(id, slots, deadline, call_deadline, std::move(gone), *std::move(result),
                    std::move(done));
        return;
      }
    }
    // The heartbeat's changes and the tasks assigned (or the error, which may reveal state) are
    // answered once durable.
    DurableThen(std::move(result), call_deadline, std::move(done));
  });
}

void DispatcherImpl::StopWaiting() { waiters_.Stop(); }

std::vector<v1::Task> DispatcherImpl::LostTasksLocked(uint64_t id,
                                                      const v1::ProducerHeartbeatRequest& request,
                                                      ProducerInfo& info) {
  std::vector<v1::Task> lost;
  if (!request.held_tasks_reported() || request.producer_id() == 0) return lost;
  const std::set<uint64_t>& owned = state_.FindProducer(id)->tasks;
  const absl::flat_hash_set<uint64_t> held(request.held_tasks().begin(),
                                           request.held_tasks().end());
  // The finished tasks it reported are no longer owned (finished above), so an owned task the
  // producer does not hold never reached it.
  for (uint64_t task_id : owned) {
    if (!held.contains(task_id)) lost.push_back(*state_.FindTask(task_id));
  }
  for (uint64_t task_id : request.held_tasks()) {
    if (!owned.contains(task_id) &&
        std::find(info.revoked.begin(), info.revoked.end(), task_id) == info.revoked.end()) {
      info.revoked.push_back(task_id);  // finished by delivery, and the revocation was lost
    }
  }
  if (!lost.empty()) {
    Log(LogLevel::kInfo, "dispatcher",
        absl::StrCat(
            "producer ", id, " does not hold ", lost.size(),
            " of its tasks (a lost response, or a dispatcher restart): sending them again"));
  }
  return lost;
}

absl::StatusOr<v1::ConsumerHeartbeatResponse> DispatcherImpl::ConsumerHeartbeatUnsynced(
    const v1::ConsumerHeartbeatRequest& request) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  uint64_t id = request.consumer_id();
  if (id == 0) {
    ASSIGN_OR_RETURN(id, RegisterConsumerLocked(request, now));
  } else {
    const DispatcherState::Consumer* consumer = state_.FindConsumer(id);
    if (consumer == nullptr) return UnknownConsumer(id);
    // A consumer replayed from a journal written before leases has none: it is trusted as before.
    if (!consumer->lease.empty() && !TokenMatches(request.lease(), consumer->lease)) {
      return absl::PermissionDeniedError(absl::StrCat(
          "consumer ", id, ": the heartbeat ",
          request.lease().empty() ? "carries no lease" : "carries another lease",
          "; only the process that registered consumer ", id,
          " (with the lease its registration returned) may report for it or close it"));
    }
    if (!request.job().empty() &&
        (request.job() != consumer->job || request.rank() != consumer->rank)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "consumer ", id, " registered as rank ", consumer->rank, " of job '", consumer->job,
          "', but this heartbeat says rank ", request.rank(), " of job '", request.job(), "'"));
    }
    if (request.epoch() != consumer->epoch || request.step() != consumer->step) {
      const std::string job = consumer->job;
      // Going back (a checkpoint restored) may need finished tasks again; going forward never
      // does, though tasks ahead may be finished already (their batches were prefetched).
      const bool back = DispatcherState::TaskKey(request.epoch(), request.step()) <
                        DispatcherState::TaskKey(consumer->epoch, consumer->step);
      RETURN_IF_ERROR(
          DispatcherState::CheckPosition(*state_.FindJob(job), request.epoch(), request.step()));
      journal::Update update;
      update.mutable_consumer_acknowledged()->set_consumer_id(id);
      update.mutable_consumer_acknowledged()->set_epoch(request.epoch());
      update.mutable_consumer_acknowledged()->set_step(request.step());
      RETURN_IF_ERROR(ApplyLocked(update));
      if (back) RETURN_IF_ERROR(ReopenLocked(job, request.epoch(), request.step()));
      RETURN_IF_ERROR(FinishDeliveredLocked(job));
    }
  }
  const DispatcherState::Consumer& consumer = *state_.FindConsumer(id);
  v1::ConsumerHeartbeatResponse response;
  response.set_consumer_id(id);
  const DispatcherState::Job& consumed = *state_.FindJob(consumer.job);
  // The JobInfo (its file list included: 55 KB for a job of 1,000 files) at registration only. A
  // job's info never changes once created, and a consumer reads it only then; sent with every
  // heartbeat it made 550 MB/s of answers for 10,000 consumers of such a job.
  if (request.consumer_id() == 0) *response.mutable_job() = *consumed.info;
  // This consumer reads the job: running, unless it is done.
  response.set_job_state(DispatcherState::StateOf(consumed, /*live_consumers=*/1));
  response.set_heartbeat_interval_ms(HeartbeatIntervalMs());
  response.set_takeover_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(ConsumerTakeover())));
  response.set_epoch(consumer.epoch);
  response.set_step(consumer.step);
  if (request.consumer_id() == 0) response.set_lease(consumer.lease);
  if (request.leaving()) {
    RETURN_IF_ERROR(RemoveConsumerLocked(id, "it closed"));
    return response;
  }
  ConsumerInfo& info = consumer_info_[id];
  info.last_heartbeat = now;
  info.batches_received = request.batches_received();
  info.bytes_received = request.bytes_received();
  info.wait_seconds = request.wait_seconds();
  info.rates.Report(info.batches_received, info.wait_seconds, now);
  return response;
}

absl::Status DispatcherImpl::ReopenLocked(const std::string& name, uint64_t epoch, uint64_t step) {
  const DispatcherState::Job& job = *state_.FindJob(name);
  if (!job.config.dealt()) return absl::OkStatus();
  const size_t tasks = DispatcherState::TasksToReopen(job, epoch, step).size();
  if (tasks == 0) return absl::OkStatus();
  journal::Update update;
  update.mutable_tasks_reopened()->set_job(name);
  update.mutable_tasks_reopened()->set_epoch(epoch);
  update.mutable_tasks_reopened()->set_step(step);
  RETURN_IF_ERROR(ApplyLocked(update));
  Log(LogLevel::kInfo, "dispatcher",
      absl::StrCat("job '", name, "': a consumer went back to epoch ", epoch, " step ", step, "; ",
                   tasks, " finished tasks will be made again"));
  return absl::OkStatus();
}

absl::Status DispatcherImpl::FinishDeliveredLocked(const std::string& name) {
  const DispatcherState::Job& job = *state_.FindJob(name);
  const std::optional<DispatcherState::TaskKey> frontier = state_.DeliveredFrontier(job);
  if (!frontier) return absl::OkStatus();
  const auto delivered = DispatcherState::TasksBefore(job, frontier->first, frontier->second);
  const bool cursor_behind =
      DispatcherState::FirstUndeliveredTask(job, frontier->first, frontier->second) >
      DispatcherState::TaskKey(job.next_epoch, job.next_batch);
  if (delivered.empty() && !cursor_behind) return absl::OkStatus();
  journal::Update update;
  update.mutable_tasks_delivered()->set_job(name);
  update.mutable_tasks_delivered()->set_epoch(frontier->first);
  update.mutable_tasks_delivered()->set_step(frontier->second);
  RETURN_IF_ERROR(ApplyLocked(update));
  // Only once applied: a producer told to drop a task it still owns would leave it unmade.
  for (const auto& [key, o] : delivered) {
    if (o.producer_id != 0) producer_info_[o.producer_id].revoked.push_back(o.task_id);
  }
  return absl::OkStatus();
}

}  // namespace croupier

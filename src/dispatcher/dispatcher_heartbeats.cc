// DispatcherImpl: producer and consumer heartbeats, registration and expiry.
#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/dispatcher/dispatcher_impl.h"
#include "src/dispatcher/job_spec.h"
#include "src/dispatcher/locate.h"
#include "src/dispatcher/task_assignment.h"

namespace croupier {
namespace {

// How many removed producers and consumers keep their reason for the NOT_FOUND they get.
constexpr size_t kMaxRemembered = 1024;
// A consumer silent for this many heartbeat intervals may be replaced by a new one of its rank.
constexpr int kTakeoverHeartbeats = 3;
// How long producers replayed from the journal may take, beyond their timeout, to send their
// first heartbeat to a restarted dispatcher (their clients back off while it is down).
constexpr absl::Duration kRestartGrace = absl::Seconds(5);
// Rates are measured over at least this span (producers beat more often while work flows), and
// consumers' rates are smoothed with this time constant.
constexpr absl::Duration kRateSpan = absl::Seconds(1);
constexpr absl::Duration kConsumerRateSmoothing = absl::Seconds(5);

// "10 s", "3.2 s".
std::string Secs(absl::Duration d) {
  return absl::StrCat(std::round(absl::ToDoubleSeconds(d) * 10) / 10, " s");
}

void Remember(std::map<uint64_t, std::string>& gone, uint64_t id, std::string reason) {
  gone[id] = std::move(reason);
  while (gone.size() > kMaxRemembered) gone.erase(gone.begin());
}

absl::Status Unknown(absl::string_view kind, uint64_t id, uint64_t next_id,
                     const std::map<uint64_t, std::string>& gone) {
  auto it = gone.find(id);
  std::string why = it != gone.end() ? it->second
                    : id >= next_id  ? "this dispatcher never registered it; it may have restarted"
                                     : "it was removed";
  return absl::NotFoundError(
      absl::StrCat(kind, " ", id, " is unknown (", why, "); register again"));
}

}  // namespace

absl::Time DispatcherImpl::ProducerLastHeartbeat(uint64_t id) const {
  auto it = producer_info_.find(id);
  // A producer replayed from the journal has not been heard from since the restart: it gets a
  // grace period on top of its timeout, for its client to notice the dispatcher is back.
  return it == producer_info_.end() ? created_ + kRestartGrace
                                    : std::max(created_, it->second.last_heartbeat);
}

absl::Time DispatcherImpl::ConsumerLastHeartbeat(uint64_t id) const {
  auto it = consumer_info_.find(id);
  return it == consumer_info_.end() ? created_ : std::max(created_, it->second.last_heartbeat);
}

absl::Status DispatcherImpl::UnknownProducer(uint64_t id) const {
  return Unknown("producer", id, state_.next_producer_id(), gone_producers_);
}

absl::Status DispatcherImpl::UnknownConsumer(uint64_t id) const {
  return Unknown("consumer", id, state_.next_consumer_id(), gone_consumers_);
}

absl::StatusOr<uint64_t> DispatcherImpl::RegisterProducerLocked(const std::string& data_address,
                                                                const std::string& source_job,
                                                                uint32_t source_index,
                                                                absl::Time now) {
  if (data_address.empty()) {
    return absl::InvalidArgumentError(
        "a producer registers with the address of its data server (host:port), but none was given");
  }
  if (!source_job.empty()) {
    const DispatcherState::Job* job = state_.FindJob(source_job);
    if (job == nullptr) {
      return absl::NotFoundError(absl::StrCat("no job '", source_job, "' to be the source of"));
    }
    if (job->info.spec().source() != "python") {
      return absl::InvalidArgumentError(absl::StrCat(
          "job '", source_job, "' reads TFRecord files; only a Python job takes a source"));
    }
    const uint32_t sources = std::max<uint32_t>(1, job->info.spec().source_count());
    if (source_index >= sources) {
      return absl::InvalidArgumentError(absl::StrCat("job '", source_job, "' has ", sources,
                                                     " sources, 0 to ", sources - 1,
                                                     "; there is no source ", source_index));
    }
  }
  const uint64_t id = state_.next_producer_id();
  if (const DispatcherState::Producer* old = state_.ProducerAt(data_address)) {
    // Only one process can listen at an address: the old producer has restarted.
    RETURN_IF_ERROR(RemoveProducerLocked(
        old->id, absl::StrCat("replaced by producer ", id, " at the same address ", data_address)));
  }
  journal::Update update;
  update.mutable_producer_registered()->set_producer_id(id);
  update.mutable_producer_registered()->set_data_address(data_address);
  update.mutable_producer_registered()->set_source_job(source_job);
  update.mutable_producer_registered()->set_source_index(source_index);
  RETURN_IF_ERROR(ApplyLocked(update));
  producer_info_[id].last_heartbeat = now;
  Log(LogLevel::kInfo, "dispatcher",
      absl::StrCat("producer ", id, " registered with data address ", data_address,
                   source_job.empty() ? "" : absl::StrCat(", the source of job '", source_job, "'")));
  return id;
}

absl::Status DispatcherImpl::RemoveProducerLocked(uint64_t id, std::string reason) {
  const DispatcherState::Producer& producer = *state_.FindProducer(id);
  const std::string message =
      absl::StrCat("producer ", id, " at ", producer.data_address, " removed (", reason, "); its ",
                   producer.tasks.size(), " unfinished tasks will be assigned again");
  journal::Update update;
  update.mutable_producer_removed()->set_producer_id(id);
  RETURN_IF_ERROR(ApplyLocked(update));
  producer_info_.erase(id);
  Remember(gone_producers_, id, std::move(reason));
  Log(LogLevel::kWarning, "dispatcher", message);
  return absl::OkStatus();
}

absl::StatusOr<v1::ProducerHeartbeatResponse> DispatcherImpl::ProducerHeartbeat(
    const v1::ProducerHeartbeatRequest& request) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  uint64_t id = request.producer_id();
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
    const uint64_t made = request.stats().batches_made();
    const double cpu = request.stats().cpu_seconds();
    const double making = request.stats().make_seconds();
    const uint32_t threads = request.stats().threads();
    const bool due = !info.has_rate_sample || now - info.rate_time >= kRateSpan;
    if (info.has_rate_sample && due) {
      const double dt = absl::ToDoubleSeconds(now - info.rate_time);
      // A counter that went back is a restarted producer.
      info.batches_per_second = made < info.rate_batches ? 0 : (made - info.rate_batches) / dt;
      info.cpu_cores = cpu < info.rate_cpu_seconds ? 0 : (cpu - info.rate_cpu_seconds) / dt;
      info.busy_share =
          threads == 0 || making < info.rate_make_seconds
              ? 0
              : std::clamp((making - info.rate_make_seconds) / (threads * dt), 0.0, 1.0);
      info.rates_measured = true;
    }
    if (due) {
      info.has_rate_sample = true;
      info.rate_time = now;
      info.rate_batches = made;
      info.rate_cpu_seconds = cpu;
      info.rate_make_seconds = making;
    }
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
  uint32_t slots = std::min(request.free_task_slots(), kMaxTasksPerHeartbeat);
  for (v1::Task& task : LostTasksLocked(id, request, info)) {
    // Lost tasks take the slots first: the producer counted them as free.
    slots -= std::min<uint32_t>(slots, 1);
    if (info.jobs_sent.insert(task.job()).second) {
      *response.add_jobs() = state_.FindJob(task.job())->info;
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
      *response.add_jobs() = state_.FindJob(task->job())->info;
    }
    *response.add_new_tasks() = *std::move(task);
  }
  return absl::OkStatus();
}

void DispatcherImpl::ProducerHeartbeatOrWait(const v1::ProducerHeartbeatRequest& request,
                                             ProducerHeartbeatDone done) {
  absl::StatusOr<v1::ProducerHeartbeatResponse> response = ProducerHeartbeat(request);
  if (!response.ok() || request.wait_for_work_ms() == 0) {
    std::move(done)(std::move(response));
    return;
  }
  response->set_waits_for_work(true);
  const uint32_t slots = std::min(request.free_task_slots(), kMaxTasksPerHeartbeat);
  if (slots == 0 || response->new_tasks_size() > 0) {
    std::move(done)(std::move(response));
    return;
  }
  const absl::Duration wait =
      std::min(absl::Milliseconds(request.wait_for_work_ms()), options_.heartbeat_interval);
  const uint64_t id = response->producer_id();  // read before the response is moved
  WaitForWork(id, slots, absl::Now() + wait, *std::move(response), std::move(done));
}

void DispatcherImpl::WaitForWork(uint64_t id, uint32_t slots, absl::Time deadline,
                                 v1::ProducerHeartbeatResponse response,
                                 ProducerHeartbeatDone done) {
  waiters_.Wait(deadline, [this, id, slots, deadline, response = std::move(response),
                           done = std::move(done)](WorkWaiters::Wake why) mutable {
    if (why == WorkWaiters::Wake::kWorkMayBeAvailable) {
      absl::Status assigned = absl::OkStatus();
      {
        absl::MutexLock lock(&mu_);
        auto info = producer_info_.find(id);
        // A producer removed meanwhile learns it at its next heartbeat.
        if (state_.FindProducer(id) != nullptr && info != producer_info_.end()) {
          assigned = AssignTasksLocked(id, slots, info->second, response);
        }
      }
      if (!assigned.ok()) {
        std::move(done)(assigned);
        return;
      }
      if (response.new_tasks_size() == 0 && absl::Now() < deadline) {
        WaitForWork(id, slots, deadline, std::move(response), std::move(done));
        return;
      }
    }
    std::move(done)(std::move(response));
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
        absl::StrCat("producer ", id, " does not hold ", lost.size(),
                     " of its tasks (a lost response, or a dispatcher restart): sending them again"));
  }
  return lost;
}

absl::StatusOr<uint64_t> DispatcherImpl::RegisterConsumerLocked(
    const v1::ConsumerHeartbeatRequest& request, absl::Time now) {
  const DispatcherState::Job* job = state_.FindJob(request.job());
  if (job == nullptr) return UnknownJobError(state_, request.job());
  const std::string name = job->name();
  const uint32_t n = job->info.spec().num_consumers();
  if (request.world() != n) {
    return absl::InvalidArgumentError(absl::StrCat("job '", name, "' deals to ", n,
                                                   " consumers, but this consumer says world size ",
                                                   request.world()));
  }
  if (request.rank() >= n) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", request.rank(),
                                                   " is out of range: job '", name, "' deals to ",
                                                   n, " consumers, ranks 0 to ", n - 1));
  }
  DispatcherState::TaskKey position(request.epoch(), request.step());
  if (request.resume()) {
    auto it = job->rank_positions.find(request.rank());
    position = it == job->rank_positions.end() ? DispatcherState::TaskKey(0, 0) : it->second;
  }
  RETURN_IF_ERROR(DispatcherState::CheckPosition(*job, position.first, position.second));
  const uint64_t id = state_.next_consumer_id();
  if (const DispatcherState::Consumer* holder = state_.ConsumerAt(name, request.rank())) {
    const uint64_t holder_id = holder->id;
    const absl::Duration age = now - ConsumerLastHeartbeat(holder_id);
    // A holder that missed a few heartbeats has crashed (or is frozen): a restarted trainer takes
    // its rank over without waiting for the consumer timeout. The old holder, if it wakes, is told
    // its rank is gone (NOT_FOUND) and stops.
    const absl::Duration takeover =
        std::min(options_.consumer_timeout, kTakeoverHeartbeats * options_.heartbeat_interval);
    if (age <= takeover) {
      return absl::AlreadyExistsError(
          absl::StrCat("rank ", request.rank(), " of job '", name, "' is held by consumer ",
                       holder_id, " (last heartbeat ", Secs(age), " ago); a rank is taken over "
                       "after ", Secs(takeover), " without a heartbeat, or at once when its "
                       "consumer closes"));
    }
    RETURN_IF_ERROR(RemoveConsumerLocked(
        holder_id,
        absl::StrCat("replaced by consumer ", id, " after ", Secs(age), " without a heartbeat")));
  }
  journal::Update update;
  journal::ConsumerRegistered* registered = update.mutable_consumer_registered();
  registered->set_consumer_id(id);
  registered->set_job(name);
  registered->set_rank(request.rank());
  registered->set_epoch(position.first);
  registered->set_step(position.second);
  RETURN_IF_ERROR(ApplyLocked(update));
  consumer_info_[id].last_heartbeat = now;
  Log(LogLevel::kInfo, "dispatcher",
      absl::StrCat("consumer ", id, " registered as rank ", request.rank(), " of job '", name,
                   "' at epoch ", position.first, " step ", position.second,
                   request.resume() ? " (its last acknowledged position)" : ""));
  RETURN_IF_ERROR(ReopenLocked(name, position.first, position.second));
  RETURN_IF_ERROR(FinishDeliveredLocked(name));
  return id;
}

absl::Status DispatcherImpl::RemoveConsumerLocked(uint64_t id, std::string reason) {
  const DispatcherState::Consumer& consumer = *state_.FindConsumer(id);
  const std::string message = absl::StrCat("consumer ", id, " (rank ", consumer.rank, " of job '",
                                           consumer.job, "') removed (", reason, ")");
  const std::string job_name = consumer.job;
  journal::Update update;
  update.mutable_consumer_removed()->set_consumer_id(id);
  RETURN_IF_ERROR(ApplyLocked(update));
  consumer_info_.erase(id);
  Remember(gone_consumers_, id, std::move(reason));
  Log(LogLevel::kWarning, "dispatcher", message);
  if (state_.HasConsumers(job_name)) return absl::OkStatus();
  // Nobody reads the job now: its producers drop its tasks, which wait as orphans for readers.
  std::vector<std::pair<uint64_t, uint64_t>> owned;  // (producer, task)
  for (const auto& [key, o] : state_.FindJob(job_name)->outstanding) {
    if (o.producer_id != 0) owned.emplace_back(o.producer_id, o.task_id);
  }
  journal::Update idle;
  idle.mutable_job_idle()->set_job(job_name);
  RETURN_IF_ERROR(ApplyLocked(idle));
  for (const auto& [producer, task] : owned) producer_info_[producer].revoked.push_back(task);
  Log(LogLevel::kInfo, "dispatcher",
      absl::StrCat("job '", job_name, "' has no consumer: its ", owned.size(),
                   " tasks are taken back from the producers until one comes"));
  return absl::OkStatus();
}

absl::StatusOr<v1::ConsumerHeartbeatResponse> DispatcherImpl::ConsumerHeartbeat(
    const v1::ConsumerHeartbeatRequest& request) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  uint64_t id = request.consumer_id();
  if (id == 0) {
    ASSIGN_OR_RETURN(id, RegisterConsumerLocked(request, now));
  } else {
    const DispatcherState::Consumer* consumer = state_.FindConsumer(id);
    if (consumer == nullptr) return UnknownConsumer(id);
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
  *response.mutable_job() = state_.FindJob(consumer.job)->info;
  response.set_heartbeat_interval_ms(HeartbeatIntervalMs());
  response.set_epoch(consumer.epoch);
  response.set_step(consumer.step);
  if (request.leaving()) {
    RETURN_IF_ERROR(RemoveConsumerLocked(id, "it closed"));
    return response;
  }
  ConsumerInfo& info = consumer_info_[id];
  info.last_heartbeat = now;
  info.batches_received = request.batches_received();
  info.bytes_received = request.bytes_received();
  info.wait_seconds = request.wait_seconds();
  if (!info.has_rate_sample || info.batches_received < info.rate_batches ||
      info.wait_seconds < info.rate_wait_seconds) {
    info.has_rate_sample = true;  // the first figures, or counters that went back
    info.rate_time = now;
    info.rate_batches = info.batches_received;
    info.rate_wait_seconds = info.wait_seconds;
  } else if (now - info.rate_time >= kRateSpan) {
    const double dt = absl::ToDoubleSeconds(now - info.rate_time);
    const double rate = (info.batches_received - info.rate_batches) / dt;
    const double bound = std::clamp((info.wait_seconds - info.rate_wait_seconds) / dt, 0.0, 1.0);
    const double alpha = 1 - std::exp(-dt / absl::ToDoubleSeconds(kConsumerRateSmoothing));
    const double keep = info.rates_measured ? 1 - alpha : 0;  // the first rates are taken whole
    info.batches_per_second = keep * info.batches_per_second + (1 - keep) * rate;
    info.input_bound = keep * info.input_bound + (1 - keep) * bound;
    info.rates_measured = true;
    info.rate_time = now;
    info.rate_batches = info.batches_received;
    info.rate_wait_seconds = info.wait_seconds;
  }
  return response;
}

absl::Status DispatcherImpl::ReopenLocked(const std::string& name, uint64_t epoch, uint64_t step) {
  const DispatcherState::Job& job = *state_.FindJob(name);
  if (job.mode != DealMode::kDealt) return absl::OkStatus();
  const size_t tasks = DispatcherState::TasksToReopen(job, epoch, step).size();
  if (tasks == 0) return absl::OkStatus();
  journal::Update update;
  update.mutable_tasks_reopened()->set_job(name);
  update.mutable_tasks_reopened()->set_epoch(epoch);
  update.mutable_tasks_reopened()->set_step(step);
  RETURN_IF_ERROR(ApplyLocked(update));
  Log(LogLevel::kInfo, "dispatcher",
      absl::StrCat("job '", name, "': a consumer went back to epoch ", epoch, " step ", step,
                   "; ", tasks, " finished tasks will be made again"));
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

void DispatcherImpl::Tick() {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  std::vector<uint64_t> producers, consumers;
  for (const auto& [id, producer] : state_.producers()) {
    if (now - ProducerLastHeartbeat(id) > options_.producer_timeout) producers.push_back(id);
  }
  for (const auto& [id, consumer] : state_.consumers()) {
    if (now - ConsumerLastHeartbeat(id) > options_.consumer_timeout) consumers.push_back(id);
  }
  for (uint64_t id : producers) {
    absl::Status status = RemoveProducerLocked(
        id,
        absl::StrCat("expired after ", Secs(options_.producer_timeout), " without a heartbeat"));
    if (!status.ok()) Log(LogLevel::kError, "dispatcher", status.ToString());
  }
  for (uint64_t id : consumers) {
    absl::Status status = RemoveConsumerLocked(
        id,
        absl::StrCat("expired after ", Secs(options_.consumer_timeout), " without a heartbeat"));
    if (!status.ok()) Log(LogLevel::kError, "dispatcher", status.ToString());
  }
  // Positions move only with heartbeats, but a task may be cut behind the frontier (consumers
  // that resumed past it): finish those too.
  for (const std::string& job : state_.job_order()) {
    absl::Status status = FinishDeliveredLocked(job);
    if (!status.ok()) Log(LogLevel::kError, "dispatcher", status.ToString());
  }
  UpdateAdviceLocked(now);
}

void DispatcherImpl::UpdateAdviceLocked(absl::Time now) {
  // Python jobs have their own sources, fixed by the job: only TFRecord jobs' demand, and the
  // producers that serve them, count.
  std::vector<ProducerAdvisor::ConsumerLoad> consumers;
  for (const auto& [id, consumer] : state_.consumers()) {
    const DispatcherState::Job* job = state_.FindJob(consumer.job);
    if (job == nullptr || job->info.spec().source() == "python") continue;
    auto it = consumer_info_.find(id);
    if (it == consumer_info_.end() || !it->second.rates_measured) continue;
    consumers.push_back({.batches_per_second = it->second.batches_per_second,
                         .input_bound = it->second.input_bound});
  }
  std::vector<ProducerAdvisor::ProducerLoad> producers;
  for (const auto& [id, producer] : state_.producers()) {
    if (!producer.source_job.empty()) continue;
    auto it = producer_info_.find(id);
    if (it == producer_info_.end() || !it->second.rates_measured) continue;  // just registered
    const ProducerInfo& info = it->second;
    ProducerAdvisor::ProducerLoad load{.batches_per_second = info.batches_per_second,
                                       .busy_share = std::nullopt};
    if (info.stats.threads() > 0) load.busy_share = info.busy_share;
    producers.push_back(load);
  }
  advisor_.Update(now, consumers, producers);
}

}  // namespace croupier

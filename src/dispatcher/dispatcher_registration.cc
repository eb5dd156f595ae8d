// DispatcherImpl: who is there. Producers and consumers registering, leaving and expiring (Tick),
// the NOT_FOUND a forgotten one gets, and the producer advice fed from their rates.
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
#include "src/net/token.h"

namespace croupier {
namespace {

// How many removed producers and consumers keep their reason for the NOT_FOUND they get.
constexpr size_t kMaxRemembered = 1024;
// A consumer silent for this many heartbeat intervals may be replaced by a new one of its rank.
constexpr int kTakeoverHeartbeats = 3;
// The random bytes of a consumer's lease (ConsumerHeartbeatRequest.lease).
constexpr size_t kConsumerLeaseBytes = 16;
// How long producers replayed from the journal may take, beyond their timeout, to send their
// first heartbeat to a restarted dispatcher (their clients back off while it is down).
constexpr absl::Duration kRestartGrace = absl::Seconds(5);

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

absl::Duration DispatcherImpl::ConsumerTakeover() const {
  return std::min(options_.consumer_timeout, kTakeoverHeartbeats * options_.heartbeat_interval);
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
    if (!job->config.made_by_sources()) {
      return absl::InvalidArgumentError(
          absl::StrCat("job '", source_job,
                       "' is made by any producer from its files; only a python or map "
                       "job, or a tokens job with a text source, takes a producer of its own"));
    }
    const uint32_t sources = std::max<uint32_t>(1, job->info->spec().source_count());
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
      absl::StrCat(
          "producer ", id, " registered with data address ", data_address,
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

absl::StatusOr<uint64_t> DispatcherImpl::RegisterConsumerLocked(
    const v1::ConsumerHeartbeatRequest& request, absl::Time now) {
  const DispatcherState::Job* job = state_.FindJob(request.job());
  if (job == nullptr) return UnknownJobError(state_, request.job());
  const std::string name = job->name();
  const uint32_t n = job->info->spec().num_consumers();
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
    const absl::Duration takeover = ConsumerTakeover();
    if (age <= takeover) {
      return absl::AlreadyExistsError(absl::StrCat("rank ", request.rank(), " of job '", name,
                                                   "' is held by consumer ", holder_id,
                                                   " (last heartbeat ", Secs(age),
                                                   " ago); a rank is taken over "
                                                   "after ",
                                                   Secs(takeover),
                                                   " without a heartbeat, or at once when its "
                                                   "consumer closes"));
    }
    RETURN_IF_ERROR(RemoveConsumerLocked(
        holder_id,
        absl::StrCat("replaced by consumer ", id, " after ", Secs(age), " without a heartbeat")));
  }
  // The consumer's capability: only the process that registered can report for it or leave.
  ASSIGN_OR_RETURN(std::string lease, RandomBytes(kConsumerLeaseBytes));
  journal::Update update;
  journal::ConsumerRegistered* registered = update.mutable_consumer_registered();
  registered->set_consumer_id(id);
  registered->set_lease(std::move(lease));
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

void DispatcherImpl::Tick() {
  const absl::Time now = clock_->Now();
  bool compact = false;
  {
    absl::MutexLock lock(&mu_);
    compact = TickLocked(now);
  }
  // Without the lock: calls are served while the snapshot is written.
  if (compact) {
    absl::Status compacted = CompactJournal();
    if (!compacted.ok()) Log(LogLevel::kError, "dispatcher", compacted.ToString());
  }
}

bool DispatcherImpl::TickLocked(absl::Time now) {
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
  ExpireDoneJobsLocked(now);
  UpdateAdviceLocked(now);
  return CompactionDueLocked();
}

void AdviceToProto(const ProducerAdvisor::Advice& advice, v1::ProducerAdvice& out) {
  out.set_recommended(advice.recommended);
  out.set_target(advice.target);
  out.set_demand_batches_per_second(advice.demand);
  out.set_capacity_batches_per_second(advice.capacity);
  out.set_producers(advice.producers);
  out.set_reason(advice.reason);
}

void DispatcherImpl::UpdateAdviceLocked(absl::Time now) {
  // Each consumer's and each producer's load, by job ("" for the generic producers, which serve
  // every TFRecord job).
  std::map<std::string, std::vector<ProducerAdvisor::ConsumerLoad>, std::less<>> consumers;
  for (const auto& [id, consumer] : state_.consumers()) {
    auto it = consumer_info_.find(id);
    if (it == consumer_info_.end() || !it->second.rates.measured()) continue;
    consumers[consumer.job].push_back({.batches_per_second = it->second.rates.batches_per_second(),
                                       .input_bound = it->second.rates.input_bound()});
  }
  std::map<std::string, std::vector<ProducerAdvisor::ProducerLoad>, std::less<>> producers;
  for (const auto& [id, producer] : state_.producers()) {
    if (producer.draining) continue;  // a drainer makes nothing new
    auto it = producer_info_.find(id);
    if (it == producer_info_.end() || !it->second.rates.measured()) continue;  // just registered
    const ProducerInfo& info = it->second;
    ProducerAdvisor::ProducerLoad load{.batches_per_second = info.rates.batches_per_second(),
                                       .busy_share = std::nullopt};
    if (info.stats.threads() > 0) load.busy_share = info.rates.busy_share();
    producers[producer.source_job].push_back(load);
  }
  static const std::vector<ProducerAdvisor::ConsumerLoad> kNoConsumers;
  static const std::vector<ProducerAdvisor::ProducerLoad> kNoProducers;
  auto of = [](const auto& by_job, const std::string& job, const auto& none) -> const auto& {
    auto it = by_job.find(job);
    return it == by_job.end() ? none : it->second;
  };
  // The cluster: the consumers of every TFRecord job, the generic producers.
  std::vector<ProducerAdvisor::ConsumerLoad> tfrecord;
  for (const std::string& name : state_.job_order()) {
    const DispatcherState::Job& job = *state_.FindJob(name);
    const auto& readers = of(consumers, name, kNoConsumers);
    if (job.config.python()) continue;  // a stream job has no target (JobAdviceLocked)
    if (!job.config.map()) tfrecord.insert(tfrecord.end(), readers.begin(), readers.end());
    auto advisor = job_advisors_.find(name);
    if (advisor == job_advisors_.end()) {
      advisor =
          job_advisors_.try_emplace(name, options_.advice, absl::StrCat("job '", name, "'")).first;
    }
    // A map job's producers are bound to it; a TFRecord job's are the generic ones, shared.
    advisor->second.Update(now, readers,
                           of(producers, job.config.map() ? name : std::string(), kNoProducers));
  }
  advisor_.Update(now, tfrecord, of(producers, std::string(), kNoProducers));
  for (auto it = job_advisors_.begin(); it != job_advisors_.end();) {
    const DispatcherState::Job* job = state_.FindJob(it->first);
    it = job == nullptr || job->config.python() ? job_advisors_.erase(it) : std::next(it);
  }
}

v1::ProducerAdvice DispatcherImpl::JobAdviceLocked(const DispatcherState::Job& job) const {
  v1::ProducerAdvice out;
  const std::string& name = job.info->spec().name();
  if (job.config.python()) {
    uint32_t sources = 0;
    for (const auto& [id, producer] : state_.producers()) {
      sources += producer.source_job == name && !producer.draining;
    }
    out.set_fixed(true);
    out.set_producers(sources);
    out.set_reason(
        "a croupier.serve() stream job has no producer target: each of its producers is its own "
        "stream, so their number is fixed by the job");
    return out;
  }
  auto it = job_advisors_.find(name);
  if (it == job_advisors_.end()) {
    out.set_reason("not measured yet: the job's first measurement comes within a second");
    return out;
  }
  AdviceToProto(it->second.advice(), out);
  return out;
}

}  // namespace croupier

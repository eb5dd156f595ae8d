#include "src/node/producer_node.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/metrics/prometheus.h"
#include "src/node/open_files.h"
#include "src/producer/memfd_buffers.h"
#include "src/producer/opening_maker.h"
#include "src/producer/tfrecord_maker.h"
#include "src/producer/token_maker.h"
#include "src/rpc/dispatcher_client.h"
#include "src/rpc/grpc_util.h"
#include "src/s3/s3_env.h"
#include "src/transport/shm_transport.h"

namespace croupier {
namespace {

// ProducerNodeOptions::prefetch_bytes, else $CROUPIER_S3_PREFETCH_BYTES, else the default.
absl::StatusOr<uint64_t> PrefetchBytes(const std::optional<uint64_t>& given) {
  if (given) return *given;
  const char* v = std::getenv("CROUPIER_S3_PREFETCH_BYTES");
  if (v == nullptr || *v == '\0') return TfrecordBatchMaker::kFetchAheadBytes;
  uint64_t bytes = 0;
  if (!absl::SimpleAtoi(v, &bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("CROUPIER_S3_PREFETCH_BYTES='", v, "' is not a whole number of bytes"));
  }
  return bytes;
}

}  // namespace

// Serves from the runner after a random delay: lets the tests make producers slow and uneven.
class ProducerNode::DelayingSource final : public BatchSource {
 public:
  DelayingSource(BatchSource* inner, absl::Duration max_delay)
      : inner_(inner), max_delay_(max_delay) {}
  absl::StatusOr<Batch> GetBatch(const BatchKey& key, absl::Time deadline) override {
    Delay();
    return inner_->GetBatch(key, deadline);
  }
  absl::StatusOr<std::pair<uint64_t, Batch>> GetAnyBatch(absl::string_view job, uint64_t epoch,
                                                         absl::Time deadline) override {
    Delay();
    return inner_->GetAnyBatch(job, epoch, deadline);
  }
  void OnServed(const BatchKey& key, uint64_t bytes) override { inner_->OnServed(key, bytes); }
  Codec CompressionOf(absl::string_view job) override { return inner_->CompressionOf(job); }

 private:
  void Delay() {
    thread_local std::mt19937_64 rng(std::random_device{}());
    int64_t max_us = absl::ToInt64Microseconds(max_delay_);
    absl::SleepFor(absl::Microseconds(std::uniform_int_distribution<int64_t>(0, max_us)(rng)));
  }
  BatchSource* const inner_;
  const absl::Duration max_delay_;
};

absl::StatusOr<std::unique_ptr<ProducerNode>> ProducerNode::Start(ProducerNodeOptions options) {
  if (options.dispatcher.empty()) {
    return absl::InvalidArgumentError("a producer needs the dispatcher's address (--dispatcher)");
  }
  if (const auto* stream = std::get_if<StreamSupply>(&options.supply);
      stream && stream->job.empty()) {
    return absl::InvalidArgumentError("a stream supply needs its job");
  }
  if (const auto* records = std::get_if<RecordsSupply>(&options.supply)) {
    if (records->job.empty()) return absl::InvalidArgumentError("a records supply needs its job");
    if (!records->make) {
      return absl::InvalidArgumentError(
          absl::StrCat("the records supply of job '", records->job, "' has no function"));
    }
  }
  if (const auto* tokens = std::get_if<TokensSupply>(&options.supply)) {
    if (tokens->job.empty()) return absl::InvalidArgumentError("a tokens supply needs its job");
    if (!tokens->tokenize) {
      return absl::InvalidArgumentError(
          absl::StrCat("the tokens supply of job '", tokens->job, "' has no tokenizer"));
    }
  }
  ASSIGN_OR_RETURN(const uint64_t prefetch_bytes, PrefetchBytes(options.prefetch_bytes));
  options.tls = ResolveTlsConfig(options.tls);
  // The batches made ahead are memfds, a descriptor each (MemfdBufferPool, which takes at most a
  // quarter of the limit), beside the input files and the consumers' connections.
  TakeTheHardDescriptorLimit("producer");
  std::unique_ptr<ProducerNode> node(new ProducerNode());
  node->options_ = options;
  node->dispatcher_ = node->MakeControlPlane(options.connect_timeout);
  node->index_cache_ = std::make_unique<IndexCache>(options.index_cache_dir);
  node->fetch_budget_ = std::make_shared<FetchBudget>(prefetch_bytes);
  if (options.cache_bytes > 0) {
    ASSIGN_OR_RETURN(
        node->record_cache_,
        RecordCache::Create({.capacity_bytes = options.cache_bytes,
                             .dir = options.cache_dir,
                             .keep = options.cache_keep}));
  }
  if (const auto* stream = std::get_if<StreamSupply>(&options.supply)) {
    node->source_job_ = stream->job;
    node->source_index_ = stream->source_index;
    auto sequential = std::make_unique<SequentialSource>(SequentialSource::Options{
        .buffer_bytes = options.runner.buffer_bytes, .max_tasks = options.runner.max_tasks});
    node->sequential_ = sequential.get();
    node->holder_ = std::move(sequential);
  } else {
    TaskRunner::Options runner = options.runner;
    if (const auto* records = std::get_if<RecordsSupply>(&options.supply)) {
      node->source_job_ = records->job;
      runner.makers =
          [make = records->make](
              const v1::JobInfo& job) -> absl::StatusOr<std::shared_ptr<const BatchMaker>> {
        ASSIGN_OR_RETURN(std::unique_ptr<FunctionBatchMaker> maker,
                         FunctionBatchMaker::Create(job, make));
        return std::shared_ptr<const BatchMaker>(std::move(maker));
      };
    } else if (const auto* tokens = std::get_if<TokensSupply>(&options.supply)) {
      node->source_job_ = tokens->job;
      // Opening maps every source and reads the text sources' document lengths (from a store
      // too): off the heartbeat thread, as a files job's. (A map job's maker reads nothing.)
      runner.makers =
          [tokenize = tokens->tokenize](
              const v1::JobInfo& job) -> absl::StatusOr<std::shared_ptr<const BatchMaker>> {
        ASSIGN_OR_RETURN(
            std::shared_ptr<const OpeningMaker> maker,
            OpeningMaker::Start(job, [tokenize](const v1::JobInfo& opened)
                                         -> absl::StatusOr<std::shared_ptr<const BatchMaker>> {
              ASSIGN_OR_RETURN(std::unique_ptr<TokenBatchMaker> made,
                               TokenBatchMaker::Create(opened, nullptr, tokenize));
              return std::shared_ptr<const BatchMaker>(std::move(made));
            }));
        return maker;
      };
    } else {
      // Opening a files job reads every file's index (for objects, requests to the store): on
      // a thread of its own, never on the heartbeat thread that is given the job's first task.
      ProducerNode* raw = node.get();
      runner.makers =
          [raw](const v1::JobInfo& job) -> absl::StatusOr<std::shared_ptr<const BatchMaker>> {
        ASSIGN_OR_RETURN(std::shared_ptr<const OpeningMaker> maker,
                         OpeningMaker::Start(job, [raw](const v1::JobInfo& opened) {
                           return raw->FilesMaker(opened);
                         }));
        return maker;
      };
    }
    node->holder_ = std::make_unique<TaskRunner>(std::move(runner));
  }
  BatchSource* source = node->holder_.get();
  if (options.test_max_delay > absl::ZeroDuration()) {
    node->source_ = std::make_unique<DelayingSource>(source, options.test_max_delay);
    source = node->source_.get();
  }
  ASSIGN_OR_RETURN(node->server_, Transport::Tcp()->StartServer(
                                      {.bind_address = options.bind_address,
                                       .port = options.port,
                                       .auth_token = options.auth_token,
                                       .max_connections = options.max_connections,
                                       .max_connections_per_peer = options.max_connections_per_peer,
                                       .tls = options.tls},
                                      source));
  std::string host = options.advertise_host;
  if (host.empty()) {
    host = options.bind_address;
    if (host == "0.0.0.0" || host == "::") {
      char name[256] = {};
      ::gethostname(name, sizeof(name) - 1);
      host = name;
    }
  }
  node->data_address_ = absl::StrCat(host, ":", node->server_->port());
  const bool shm_on = options.shm.value_or(!options.tls.enabled());
  if (!shm_on && !options.shm.has_value()) {
    Log(LogLevel::kInfo, "producer",
        "TLS is configured: no shared-memory path, every batch goes through TLS (--shm on "
        "serves same-host consumers through shared memory anyway)");
  }
  if (shm_on) {
    absl::StatusOr<std::unique_ptr<DataServer>> shm =
        Transport::Shm()->StartServer({.bind_address = ShmAddressFor(node->data_address_),
                                       .auth_token = options.auth_token,
                                       .tls = {}},
                                      source);
    if (shm.ok()) {
      node->shm_server_ = *std::move(shm);
      MemfdBufferPool::ShmServerStarted();  // batches made in memfds from now (memfd_buffers.h)
    } else {
      Log(LogLevel::kWarning, "producer",
          absl::StrCat("serving over TCP only, no shared memory: ", shm.status().message()));
    }
  }
  // Register now, so that a dispatcher that cannot be reached or refuses us is an error of Start.
  RETURN_IF_ERROR(node->Heartbeat());
  ProducerNode* raw = node.get();
  node->heartbeat_ = std::thread([raw] { raw->HeartbeatLoop(); });
  if (options.metrics_port >= 0) {
    ASSIGN_OR_RETURN(node->metrics_,
                     MetricsServer::Start(options.bind_address, options.metrics_port, [raw] {
                       v1::ProducerStatus status;
                       status.set_producer_id(raw->producer_id());
                       status.set_data_address(raw->data_address_);
                       *status.mutable_stats() = raw->Stats();
                       for (uint64_t t : raw->holder_->HeldTasks()) status.add_tasks(t);
                       std::string text =
                           metrics::FormatProducerPrometheus(status) +
                           metrics::FormatS3Prometheus(s3::ProcessS3Counters().Snapshot(),
                                                       RecordFetcher::ProcessStats());
                       if (raw->record_cache_ != nullptr) {
                         const RecordCache::Stats c = raw->record_cache_->stats();
                         text += metrics::FormatRecordCachePrometheus(
                             {.hits = c.hits, .misses = c.misses, .records = c.records,
                              .bytes = c.bytes, .capacity_bytes = c.capacity_bytes,
                              .rejected = c.rejected, .read_errors = c.read_errors,
                              .loaded = c.loaded, .evicted = c.evicted});
                       }
                       return text;
                     }));
  }
  Log(LogLevel::kInfo, "producer",
      absl::StrCat("producer ", node->producer_id(), " serving on ", node->data_address_,
                   " for dispatcher ", options.dispatcher,
                   node->metrics_ ? absl::StrCat(", metrics on http://", options.bind_address, ":",
                                                 node->metrics_port(), "/metrics")
                                  : ""));
  return node;
}

uint64_t ProducerNode::producer_id() const {
  absl::MutexLock lock(&mu_);
  return producer_id_;
}

absl::Duration ProducerNode::SinceDispatcherContact() const {
  absl::MutexLock lock(&mu_);
  return absl::Now() - last_contact_;
}

absl::StatusOr<std::shared_ptr<const BatchMaker>> ProducerNode::FilesMaker(const v1::JobInfo& job) {
  if (job.spec().source() == v1::SOURCE_KIND_TOKENS) {
    ASSIGN_OR_RETURN(std::shared_ptr<const BatchMaker> maker, TokenBatchMaker::Create(job));
    return maker;
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const BatchMaker> maker,
                   TfrecordBatchMaker::Create(job, *index_cache_, record_cache_.get(),
                                              /*env=*/nullptr, fetch_budget_));
  return maker;
}

v1::ProducerStats ProducerNode::Stats() const {
  v1::ProducerStats s = holder_->Report();
  struct rusage usage = {};
  if (::getrusage(RUSAGE_SELF, &usage) == 0) {
    auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
    s.set_cpu_seconds(seconds(usage.ru_utime) + seconds(usage.ru_stime));
  }
  return s;
}

void ProducerNode::AddTask(const v1::Task& task) {
  auto it = jobs_.find(task.job());
  if (it == jobs_.end()) {
    // A job sent with an earlier answer that was lost, or to an earlier run of this producer.
    v1::GetJobRequest get;
    get.set_name(task.job());
    auto job = dispatcher_->GetJob(get);
    if (!job.ok()) {
      Log(LogLevel::kError, "producer",
          absl::StrCat("producer ", producer_id(), ": task ", task.task_id(), " of job '",
                       task.job(), "' cannot be made: ", job.status().ToString()));
      return;
    }
    it = jobs_.emplace(task.job(), job->job()).first;
  }
  const absl::Status added = holder_->AddTask(task, it->second);
  if (!added.ok()) {
    Log(LogLevel::kError, "producer",
        absl::StrCat("producer ", producer_id(), ": task ", task.task_id(), " of job '", task.job(),
                     "': ", added.ToString()));
  }
}

absl::Status ProducerNode::Heartbeat(bool wait_for_work) {
  // Held before finished: a task finishing in between is then in both lists (and finished by the
  // dispatcher), never in neither (which the dispatcher would take for a lost assignment).
  const std::vector<uint64_t> held = holder_->HeldTasks();
  std::vector<uint64_t> finished = holder_->TakeFinishedTasks();
  unreported_finished_.insert(unreported_finished_.end(), finished.begin(), finished.end());
  v1::ProducerHeartbeatRequest request;
  request.set_producer_id(producer_id());
  request.set_data_address(data_address_);
  for (uint64_t t : unreported_finished_) request.add_finished_tasks(t);
  for (uint64_t t : held) request.add_held_tasks(t);
  request.set_held_tasks_reported(true);
  const bool draining = draining_.load();
  request.set_free_task_slots(draining ? 0 : holder_->FreeTaskSlots());
  if (draining) {
    request.set_draining(true);
    for (uint64_t t : holder_->MadeTasks()) request.add_made_tasks(t);
  }
  *request.mutable_stats() = Stats();
  if (wait_for_work && !draining && request.producer_id() != 0) {
    request.set_wait_for_work_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(interval_)));
  }
  if (request.producer_id() == 0) {
    request.set_source_job(source_job_);
    request.set_source_index(source_index_);
  }

  auto response = dispatcher_->ProducerHeartbeat(request);
  if (absl::IsNotFound(response.status()) && request.producer_id() != 0) {
    // The dispatcher presumed us dead and gave our work to others: drop it all, serve none of it,
    // and rejoin as a new producer.
    Log(LogLevel::kWarning, "producer",
        absl::StrCat("producer ", request.producer_id(), ": ", response.status().message(),
                     "; dropping its tasks and registering again"));
    for (uint64_t t : holder_->HeldTasks()) holder_->RevokeTask(t);
    unreported_finished_.clear();
    if (draining && !drain_told_.HasBeenNotified()) drain_told_.Notify();  // it holds nothing
    absl::MutexLock lock(&mu_);
    producer_id_ = 0;
    return absl::OkStatus();
  }
  if (!response.ok()) return response.status();
  unreported_finished_.clear();
  {
    absl::MutexLock lock(&mu_);
    producer_id_ = response->producer_id();
  }
  if (response->heartbeat_interval_ms() > 0) {
    interval_ = absl::Milliseconds(response->heartbeat_interval_ms());
  }
  work_available_ = response->new_tasks_size() > 0;
  if (request.wait_for_work_ms() > 0) dispatcher_waits_ = response->waits_for_work();
  for (uint64_t t : response->revoked_tasks()) holder_->RevokeTask(t);
  for (const v1::JobInfo& job : response->jobs()) jobs_[job.spec().name()] = job;
  for (const v1::Task& task : response->new_tasks()) AddTask(task);
  if (draining && !drain_told_.HasBeenNotified()) drain_told_.Notify();
  return absl::OkStatus();
}

void ProducerNode::HeartbeatLoop() {
  // Beat every interval, and as soon as a slot is free while the dispatcher has work to give,
  // so that work keeps flowing without waiting a whole interval. A producer holds few tasks
  // (--max-tasks, 2), so the time it takes to notice a free slot caps its throughput at about
  // max-tasks tasks per that time: with 100 ms, a job of 4 consumers, 4 rounds per task and
  // batches of 256 records was capped near 40,000 records/s per producer. An eager beat is
  // productive (it takes a task) except the last, which finds no work and ends the eagerness.
  // With a free slot and no work, the beat waits at the dispatcher for work (up to an interval),
  // so that a new job, a consumer arriving or an orphaned task reach it at once instead of at
  // its next beat; one such beat follows another, which keeps the interval's pace when idle.
  constexpr absl::Duration kPoll = absl::Milliseconds(5);
  absl::Time last = absl::Now();
  while (!stop_.WaitForNotificationWithTimeout(kPoll)) {
    absl::Duration since = absl::Now() - last;
    // While draining it beats often: the tasks it serves finish sooner in the dispatcher's eyes,
    // and a dispatcher that is gone (its heartbeat fails) ends the drain within this time.
    constexpr absl::Duration kDrainBeat = absl::Milliseconds(100);
    bool due = since >= (draining_.load() ? std::min(interval_, kDrainBeat) : interval_);
    // A draining producer takes no work: it beats at the interval, or when Drain asks.
    const bool free = !draining_.load() && holder_->FreeTaskSlots() > 0;
    const bool now = beat_now_.exchange(false);
    // Eager only while the dispatcher has work to give, so an idle producer beats at the interval.
    bool eager = work_available_ && free;
    // Not after a failed beat: the next one waits for the interval.
    bool wait = !work_available_ && free && dispatcher_waits_ && last_heartbeat_ok_;
    if (!due && !eager && !wait && !now) continue;
    absl::Status s = Heartbeat(wait);
    last = absl::Now();
    last_heartbeat_ok_ = s.ok();
    if (s.ok()) {
      absl::MutexLock lock(&mu_);
      last_contact_ = last;
    }
    // A source producer's registration refused for want of its job (NOT_FOUND: deleted) asks
    // at once, whenever it last asked: else it would only fail its registration from then on.
    const bool no_source_job = absl::IsNotFound(s);
    if ((s.ok() || no_source_job) && !source_job_.empty() && !job_ended_.HasBeenNotified() &&
        (no_source_job || last - last_end_check_ >= interval_)) {
      last_end_check_ = last;
      CheckJobEnded();
    }
    if (!s.ok() && draining_.load()) drain_failed_.store(true);
    if (!s.ok() && !stop_.HasBeenNotified()) {
      Log(LogLevel::kWarning, "producer",
          absl::StrCat("producer ", producer_id(), ": heartbeat failed: ", s.ToString()));
    }
  }
}

bool JobHasEnded(const absl::StatusOr<v1::GetJobResponse>& answer) {
  if (absl::IsNotFound(answer.status())) return true;
  if (!answer.ok()) return false;
  const v1::JobInfo& job = answer->job();
  const uint64_t epochs = job.spec().num_epochs();
  if (epochs == 0) return false;
  if (static_cast<uint64_t>(answer->rank_positions_size()) < job.spec().num_consumers()) {
    return false;
  }
  const std::pair<uint64_t, uint64_t> end{epochs - 1, job.steps_per_epoch()};
  for (const v1::RankPosition& p : answer->rank_positions()) {
    if (std::make_pair(p.epoch(), p.step()) < end) return false;
  }
  return true;
}

void ProducerNode::CheckJobEnded() {
  v1::GetJobRequest request;
  request.set_name(source_job_);
  if (!JobHasEnded(dispatcher_->GetJob(request))) return;
  Log(LogLevel::kInfo, "producer",
      absl::StrCat("producer ", producer_id(), ": job '", source_job_,
                   "' has ended (every rank has read its last epoch, or it was deleted)"));
  job_ended_.Notify();
}

ProducerNode::Drained ProducerNode::Drain(absl::Duration bound,
                                          const std::function<bool()>& leave_now) {
  Drained drained;
  if (bound > absl::ZeroDuration() && sequential_ == nullptr && producer_id() != 0 &&
      !stop_.HasBeenNotified()) {
    const absl::Time deadline = absl::Now() + bound;
    draining_.store(true);
    beat_now_.store(true);
    auto interrupted = [&] {
      return (leave_now && leave_now()) || drain_failed_.load();
    };
    // The dispatcher hears it at the next beat (the heartbeat thread's call in flight first).
    while (!drain_told_.WaitForNotificationWithTimeout(absl::Milliseconds(10))) {
      if (absl::Now() >= deadline || interrupted()) break;
    }
    if (drain_told_.HasBeenNotified()) {
      drained.kept = holder_->HeldTasks().size();
      Log(LogLevel::kInfo, "producer",
          absl::StrCat("producer ", producer_id(), " drains: it serves the ", drained.kept,
                       " tasks it has made, for up to ", absl::FormatDuration(bound),
                       "; its other tasks went to the other producers"));
      while (!holder_->HeldTasks().empty() && absl::Now() < deadline && !interrupted()) {
        absl::SleepFor(absl::Milliseconds(10));
      }
      const size_t left = holder_->HeldTasks().size();
      drained.served = drained.kept - std::min(left, drained.kept);
      if (left > 0) {
        Log(LogLevel::kInfo, "producer",
            absl::StrCat("producer ", producer_id(), ": ", left, " of its tasks were not all read ",
                         drain_failed_.load() ? "before a heartbeat failed"
                         : interrupted()      ? "before a second signal"
                                              : "within the drain bound",
                         "; they go to the other producers"));
      }
    }
  }
  if (drain_failed_.load()) {
    // The dispatcher did not answer its last heartbeat: telling it would only wait out a timeout.
    // What this producer still holds is reassigned when it expires, as after a crash.
    Log(LogLevel::kInfo, "producer",
        absl::StrCat("producer ", producer_id(),
                     " stops without a last word: the dispatcher did "
                     "not answer its heartbeat"));
    Shutdown();
  } else {
    Leave();
  }
  return drained;
}

void ProducerNode::Leave(absl::Duration timeout) {
  std::call_once(leave_once_, [&] {
    StopHeartbeats();
    const uint64_t id = producer_id();
    if (id == 0) return;  // not registered: nothing to hand back
    // A control plane of its own: the heartbeats' one is cancelled, and this call must be short.
    std::unique_ptr<ControlPlane> dispatcher = MakeControlPlane(timeout);
    v1::ProducerHeartbeatRequest request;
    request.set_producer_id(id);
    request.set_data_address(data_address_);
    std::vector<uint64_t> finished = holder_->TakeFinishedTasks();
    unreported_finished_.insert(unreported_finished_.end(), finished.begin(), finished.end());
    for (uint64_t t : unreported_finished_) request.add_finished_tasks(t);
    request.set_leaving(true);
    absl::StatusOr<v1::ProducerHeartbeatResponse> left = dispatcher->ProducerHeartbeat(request);
    if (left.ok()) {
      Log(LogLevel::kInfo, "producer",
          absl::StrCat("producer ", id, " left: its unfinished tasks go to the other producers"));
    } else {
      Log(LogLevel::kWarning, "producer",
          absl::StrCat("producer ", id, " could not tell the dispatcher it leaves (",
                       left.status().ToString(),
                       "); its tasks go to the other producers once "
                       "the dispatcher's producer timeout passes"));
    }
  });
  Shutdown();
}

std::unique_ptr<ControlPlane> ProducerNode::MakeControlPlane(absl::Duration timeout) const {
  if (options_.control_plane) return options_.control_plane();
  return rpc::DispatcherClient::Create(options_.dispatcher,
                                       {.auth_token = options_.auth_token,
                                        .call_timeout = std::min(timeout, absl::Seconds(10)),
                                        .timeout = timeout,
                                        .tls = options_.tls});
}

void ProducerNode::StopHeartbeats() {
  std::call_once(stop_heartbeats_once_, [this] {
    if (!stop_.HasBeenNotified()) stop_.Notify();
    // A heartbeat the dispatcher holds (waiting for work) must not hold the shutdown.
    if (dispatcher_) dispatcher_->Cancel();
    if (heartbeat_.joinable()) heartbeat_.join();
  });
}

void ProducerNode::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    if (metrics_) metrics_->Stop();
    StopHeartbeats();
    if (holder_) holder_->Shutdown();
    if (server_) server_->Shutdown();
    if (shm_server_) {
      shm_server_->Shutdown();
      MemfdBufferPool::ShmServerStopped();
    }
    Log(LogLevel::kInfo, "producer",
        absl::StrCat("producer ", producer_id(), " at ", data_address_, " stopped"));
  });
}

ProducerNode::~ProducerNode() { Shutdown(); }

}  // namespace croupier

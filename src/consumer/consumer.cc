// The consumer: registration and heartbeats with the dispatcher, and the epoch's batches through
// a Prefetcher whose fetch function finds each batch's producer and fetches from it.
#include "croupier/consumer.h"

#include <atomic>
#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "src/common/logging.h"
#include "src/common/retry.h"
#include "src/common/status_macros.h"
#include "src/consumer/peers.h"
#include "src/consumer/prefetcher.h"
#include "src/dispatcher/deal.h"
#include "src/rpc/dispatcher_client.h"
#include "src/rpc/grpc_util.h"

namespace croupier {
namespace {

// How long one fetch attempt may wait for a producer before the consumer asks the dispatcher
// again where the batch is.
constexpr absl::Duration kAttemptTimeout = absl::Seconds(5);
// first_come: how long one attempt waits on one producer before trying the others.
constexpr absl::Duration kAnyAttemptTimeout = absl::Milliseconds(200);

JobSummary Summarize(const v1::JobInfo& job) {
  JobSummary s;
  s.name = job.spec().name();
  s.features = job.spec().features();
  s.mode = job.spec().mode();
  s.num_consumers = job.spec().num_consumers();
  s.batch_size = job.spec().batch_size();
  s.num_records = job.num_records();
  s.num_epochs = job.spec().num_epochs();
  s.steps_per_epoch = job.steps_per_epoch();
  return s;
}

class ConsumerImpl final : public Consumer {
 public:
  ConsumerImpl(ConsumerOptions options, std::unique_ptr<rpc::DispatcherClient> dispatcher,
               uint64_t id, const v1::JobInfo& job, ConsumerPosition registered,
               absl::Duration heartbeat_interval)
      : options_(std::move(options)),
        dispatcher_(std::move(dispatcher)),
        id_(id),
        info_(job),
        job_(Summarize(job)),
        peers_(dispatcher_.get(), options_.job,
               DataClientOptions{.auth_token = options_.auth_token,
                                 .tls = TlsConfig{.cert_file = options_.tls_cert_file,
                                                  .key_file = options_.tls_key_file,
                                                  .ca_file = options_.tls_ca_file}},
               ParseShmMode(options_.shm).value_or(ShmMode::kAuto)),
        heartbeat_interval_(heartbeat_interval),
        registered_(registered) {
    position_ = registered;
    heartbeat_ = std::thread([this] { HeartbeatLoop(); });
  }
  ~ConsumerImpl() override { Close(); }

  const JobSummary& job() const override { return job_; }
  ConsumerPosition registered_position() const override { return registered_; }

  absl::Status StartEpoch(uint64_t epoch, uint64_t step) override {
    if (closed_.HasBeenNotified()) return absl::CancelledError("the consumer is closed");
    if (job_.num_epochs != 0 && epoch >= job_.num_epochs) {
      return absl::OutOfRangeError(
          absl::StrCat("job '", job_.name, "' has ", job_.num_epochs, " epochs; no epoch ", epoch));
    }
    const bool first_come = job_.mode == "first_come";
    if (first_come && step != 0) {
      return absl::InvalidArgumentError("a first_come job can only start an epoch at step 0");
    }
    const uint64_t steps = deal::StepsInEpoch(info_, epoch);
    if (!first_come && step > steps) {
      return absl::OutOfRangeError(absl::StrCat("job '", job_.name, "' has ", steps,
                                                " steps in epoch ", epoch, "; no step ", step));
    }
    const ConsumerPosition at = position();
    if (std::make_pair(epoch, step) < std::make_pair(at.epoch, at.step)) {
      // Going back (a checkpoint restored). The dispatcher must learn how far this consumer got
      // before it learns where it goes back to: it reopens the tasks between the two, and a short
      // epoch read faster than a heartbeat interval would otherwise look like no move at all,
      // with its tasks finished by their producers and never made again.
      SendHeartbeat(/*leaving=*/false);
    }
    {
      // Joins the old epoch's workers, unless a Next() on another thread still holds it.
      std::shared_ptr<Prefetcher> old;
      absl::MutexLock lock(&prefetcher_mu_);
      old = std::move(prefetcher_);
    }
    epoch_ = epoch;
    Prefetcher::Options p{.first = step,
                          .end = first_come ? UINT64_MAX : steps,
                          .max_batches = options_.prefetch_batches,
                          .max_bytes = options_.prefetch_bytes,
                          .any_order = first_come};
    FetchFn fetch = first_come ? FetchFn([this, epoch](uint64_t) { return FetchAny(epoch); })
                               : FetchFn([this, epoch](uint64_t s) {
                                   return FetchStep(epoch, s, absl::Now() + options_.timeout);
                                 });
    FetchGroupFn fetch_group;
    if (!first_come) {
      fetch_group = [this, epoch](uint64_t first, uint32_t count) {
        return FetchSteps(epoch, first, count);
      };
    }
    auto prefetcher = std::make_shared<Prefetcher>(p, std::move(fetch), std::move(fetch_group));
    {
      absl::MutexLock lock(&prefetcher_mu_);
      if (closed_.HasBeenNotified()) return absl::CancelledError("the consumer is closed");
      prefetcher_ = std::move(prefetcher);
    }
    SetPosition(epoch, step);
    WakeHeartbeat();  // the dispatcher learns the position now: it may have tasks to reopen
    return absl::OkStatus();
  }

  absl::StatusOr<std::optional<Batch>> Next() override {
    // A copy of the pointer: Close() on another thread may drop the consumer's own at any time,
    // and the last holder destroys the Prefetcher.
    std::shared_ptr<Prefetcher> prefetcher;
    {
      absl::MutexLock lock(&prefetcher_mu_);
      prefetcher = prefetcher_;
    }
    if (closed_.HasBeenNotified()) return absl::CancelledError("the consumer is closed");
    if (prefetcher == nullptr) {
      return absl::FailedPreconditionError("call StartEpoch before Next");
    }
    if (absl::Status lost = Lost(); !lost.ok()) return lost;
    absl::Time start = absl::Now();
    auto batch = prefetcher->Next();
    wait_nanos_ += absl::ToInt64Nanoseconds(absl::Now() - start);
    if (batch.ok() && batch->has_value()) {
      ++batches_;
      bytes_ += (*batch)->bytes().size();
      SetPosition(epoch_, position().step + 1);
    }
    return batch;
  }

  ConsumerPosition position() const override {
    absl::MutexLock lock(&mu_);
    return position_;
  }

  void Close() override {
    std::call_once(close_once_, [this] {
      closed_.Notify();
      WakeHeartbeat();
      peers_.CancelAll();
      std::shared_ptr<Prefetcher> prefetcher;
      {
        absl::MutexLock lock(&prefetcher_mu_);
        prefetcher = std::move(prefetcher_);
      }
      if (prefetcher) prefetcher->Cancel();
      if (heartbeat_.joinable()) heartbeat_.join();
      prefetcher.reset();  // joins its workers, unless a Next() on another thread still holds it
    });
  }

 private:
  void SetPosition(uint64_t epoch, uint64_t step) {
    absl::MutexLock lock(&mu_);
    position_ = {epoch, step};
  }

  // Dealt: steps [first, first + count) in one go. The runs of consecutive steps whose batches
  // the same producer holds (as far as the cached locations say) are fetched with one pipelined
  // call each. A batch that fails there, or whose task is not assigned yet, is UNAVAILABLE: the
  // Prefetcher fetches it again with FetchStep (its retries, its questions to the dispatcher)
  // when the trainer reaches it. Retrying it here would hold the batches fetched with it from
  // the trainer, and so its acknowledgements, which may be what the assignment of its task waits
  // for.
  std::vector<absl::StatusOr<Batch>> FetchSteps(uint64_t epoch, uint64_t first, uint32_t count) {
    const absl::Time deadline = absl::Now() + options_.timeout;
    std::vector<absl::StatusOr<Batch>> results(
        count, absl::UnavailableError("not fetched with its group"));
    std::vector<uint64_t> globals(count);
    for (uint32_t i = 0; i < count; ++i) {
      globals[i] = deal::GlobalBatch(info_, epoch, first + i, options_.rank);
    }
    uint32_t i = 0;
    while (i < count && !closed_.HasBeenNotified()) {
      absl::StatusOr<std::string> address = peers_.Locate(epoch, globals[i], /*refresh=*/false);
      if (!address.ok()) {
        ++i;  // FetchStep asks the dispatcher
        continue;
      }
      uint32_t end = i + 1;
      while (end < count && peers_.Cached(epoch, globals[end]) == *address) ++end;
      absl::StatusOr<DataClient*> client = peers_.Client(*address);
      if (client.ok()) {
        (*client)->FetchBatches(
            options_.job, epoch, absl::MakeConstSpan(globals).subspan(i, end - i),
            std::min(deadline, absl::Now() + kAttemptTimeout),
            [&](size_t k, absl::StatusOr<Batch> batch) {
              if (batch.ok()) results[i + k] = std::move(batch);
            });
      }
      i = end;
    }
    return results;
  }

  // Dealt: global batch step*N + rank, from the producer that holds its task.
  absl::StatusOr<Batch> FetchStep(uint64_t epoch, uint64_t step, absl::Time deadline) {
    const uint64_t g = deal::GlobalBatch(info_, epoch, step, options_.rank);
    const BatchKey key{options_.job, epoch, g};
    absl::StatusOr<Batch> result = absl::UnavailableError("not fetched");
    std::string where = "no producer";
    absl::Status status = RetryWithBackoff(
        absl::StrCat("job '", options_.job, "' epoch ", epoch, " step ", step, " (global batch ",
                     g, ")"),
        deadline,
        [&](int attempt) -> absl::Status {
          if (closed_.HasBeenNotified()) return absl::CancelledError("the consumer is closed");
          auto address = peers_.Locate(epoch, g, /*refresh=*/attempt > 0);
          if (!address.ok()) return address.status();
          where = *address;
          auto client = peers_.Client(*address);
          if (!client.ok()) {
            peers_.Forget(*address);
            // A refused certificate or token, or a TLS mismatch: retrying cannot help.
            if (absl::IsUnauthenticated(client.status()) ||
                absl::IsFailedPrecondition(client.status())) {
              return client.status();
            }
            return absl::UnavailableError(client.status().message());
          }
          result = (*client)->Fetch(key, std::min(deadline, absl::Now() + kAttemptTimeout));
          if (result.ok()) return absl::OkStatus();
          // The producer no longer holds the batch, or went away: ask the dispatcher again.
          if (absl::IsNotFound(result.status()) || absl::IsUnavailable(result.status())) {
            peers_.Forget(*address);
            return absl::UnavailableError(result.status().message());
          }
          return result.status();
        },
        RetryOptions{.initial_backoff = absl::Milliseconds(2),
                     .max_backoff = absl::Milliseconds(50)});
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat(status.message(), " [last producer: ", where,
                                                      "]"));
    }
    return result;
  }

  // first_come: any ready batch of the epoch from any producer holding its tasks.
  absl::StatusOr<Batch> FetchAny(uint64_t epoch) {
    const absl::Time deadline = absl::Now() + options_.timeout;
    while (!closed_.HasBeenNotified()) {
      ASSIGN_OR_RETURN(auto located, peers_.LocateEpoch(epoch, info_.batches_per_epoch()));
      auto& [addresses, finished] = located;
      if (finished) return absl::OutOfRangeError("the epoch is finished");
      for (const std::string& address : addresses) {
        auto client = peers_.Client(address);
        if (!client.ok()) {
          peers_.Forget(address);
          // A refused certificate or token, or a TLS mismatch: retrying cannot help.
          if (absl::IsUnauthenticated(client.status()) ||
              absl::IsFailedPrecondition(client.status())) {
            return client.status();
          }
          continue;
        }
        auto got = (*client)->FetchAny(options_.job, epoch,
                                       std::min(deadline, absl::Now() + kAnyAttemptTimeout));
        if (got.ok()) return std::move(got->second);
        if (absl::IsUnavailable(got.status())) peers_.Forget(address);
        if (!absl::IsOutOfRange(got.status()) && !absl::IsDeadlineExceeded(got.status()) &&
            !absl::IsUnavailable(got.status()) && !absl::IsNotFound(got.status())) {
          return got.status();
        }
      }
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "job '", options_.job, "' epoch ", epoch, ": no batch from any producer within ",
            absl::FormatDuration(options_.timeout)));
      }
      if (addresses.empty()) closed_.WaitForNotificationWithTimeout(absl::Milliseconds(50));
    }
    return absl::CancelledError("the consumer is closed");
  }

  void HeartbeatLoop() {
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        auto woken = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return wake_; };
        mu_.AwaitWithTimeout(absl::Condition(&woken), heartbeat_interval_);
        wake_ = false;
      }
      if (closed_.HasBeenNotified()) break;
      SendHeartbeat(/*leaving=*/false);
    }
    SendHeartbeat(/*leaving=*/true);  // the final position, and the rank is free
  }

  void WakeHeartbeat() {
    absl::MutexLock lock(&mu_);
    wake_ = true;
  }

  absl::Status Lost() const {
    absl::MutexLock lock(&mu_);
    return lost_;
  }

  void SendHeartbeat(bool leaving) {
    v1::ConsumerHeartbeatRequest request;
    request.set_consumer_id(id_);
    request.set_job(options_.job);
    request.set_rank(options_.rank);
    request.set_world(options_.world);
    ConsumerPosition p = position();
    request.set_epoch(p.epoch);
    request.set_step(p.step);
    request.set_batches_received(batches_);
    request.set_bytes_received(bytes_);
    request.set_wait_seconds(wait_nanos_ / 1e9);
    request.set_leaving(leaving);
    if (!Lost().ok()) return;
    auto response = dispatcher_->ConsumerHeartbeat(request);
    if (absl::IsNotFound(response.status())) {
      // Removed: another consumer took the rank over (this one was silent too long), or it
      // expired. Serving on would deal this rank's batches twice, so the consumer stops.
      const absl::Status lost = absl::AbortedError(absl::StrCat(
          "job '", options_.job, "' rank ", options_.rank, ": this consumer lost its rank (",
          response.status().message(), "); connect again"));
      Log(LogLevel::kError, "consumer", std::string(lost.message()));
      absl::MutexLock lock(&mu_);
      lost_ = lost;
      return;
    }
    if (!response.ok()) {
      Log(LogLevel::kWarning, "consumer",
          absl::StrCat("job '", options_.job, "' rank ", options_.rank,
                       ": heartbeat failed: ", response.status().ToString()));
    }
  }

  const ConsumerOptions options_;
  std::unique_ptr<rpc::DispatcherClient> dispatcher_;
  const uint64_t id_;
  const v1::JobInfo info_;
  const JobSummary job_;
  Peers peers_;
  const absl::Duration heartbeat_interval_;

  const ConsumerPosition registered_;
  mutable absl::Mutex mu_;
  ConsumerPosition position_ ABSL_GUARDED_BY(mu_);
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status lost_ ABSL_GUARDED_BY(mu_);
  uint64_t epoch_ = 0;
  // Set by StartEpoch, dropped by Close; Next() works on a copy of the pointer.
  absl::Mutex prefetcher_mu_;
  std::shared_ptr<Prefetcher> prefetcher_ ABSL_GUARDED_BY(prefetcher_mu_);
  std::atomic<uint64_t> batches_{0}, bytes_{0};
  std::atomic<int64_t> wait_nanos_{0};
  absl::Notification closed_;
  std::thread heartbeat_;
  std::once_flag close_once_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Consumer>> Consumer::Connect(ConsumerOptions options) {
  if (options.dispatcher.empty() || options.job.empty()) {
    return absl::InvalidArgumentError("a consumer needs a dispatcher address and a job name");
  }
  if (options.world == 0 || options.rank >= options.world) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", options.rank, " is not in [0, world ",
                                                   options.world, ")"));
  }
  options.auth_token = rpc::ResolveAuthToken(options.auth_token);
  if (absl::StatusOr<ShmMode> shm = ParseShmMode(options.shm); !shm.ok()) return shm.status();
  const TlsConfig tls = ResolveTlsConfig(TlsConfig{.cert_file = options.tls_cert_file,
                                                   .key_file = options.tls_key_file,
                                                   .ca_file = options.tls_ca_file});
  options.tls_cert_file = tls.cert_file;
  options.tls_key_file = tls.key_file;
  options.tls_ca_file = tls.ca_file;
  auto dispatcher = rpc::DispatcherClient::Create(
      options.dispatcher,
      {.auth_token = options.auth_token,
       .call_timeout = std::min(options.timeout, absl::Seconds(10)),
       .timeout = options.timeout,
       .tls = tls});
  v1::ConsumerHeartbeatRequest request;
  request.set_job(options.job);
  request.set_rank(options.rank);
  request.set_world(options.world);
  request.set_resume(options.resume);
  // A rank still held by a consumer that just died (a restarted trainer) is taken over once its
  // holder has missed a few heartbeats: wait for that, up to the timeout.
  const absl::Time deadline = absl::Now() + options.timeout;
  absl::StatusOr<v1::ConsumerHeartbeatResponse> registered;
  while (true) {
    registered = dispatcher->ConsumerHeartbeat(request);
    if (!absl::IsAlreadyExists(registered.status()) ||
        absl::Now() + absl::Milliseconds(250) >= deadline) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(250));
  }
  ASSIGN_OR_RETURN(v1::ConsumerHeartbeatResponse response, std::move(registered));
  absl::Duration interval = absl::Milliseconds(
      response.heartbeat_interval_ms() ? response.heartbeat_interval_ms() : 1000);
  Log(LogLevel::kDebug, "consumer",
      absl::StrCat("job '", options.job, "' rank ", options.rank, "/", options.world,
                   " registered as consumer ", response.consumer_id(), " with ",
                   options.dispatcher));
  return std::unique_ptr<Consumer>(new ConsumerImpl(
      std::move(options), std::move(dispatcher), response.consumer_id(), response.job(),
      ConsumerPosition{response.epoch(), response.step()}, interval));
}

}  // namespace croupier

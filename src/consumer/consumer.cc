// The consumer: a PositionReporter (registration, heartbeats, the acknowledged position) and, per
// epoch, a Prefetcher whose fetch functions are a BatchFetcher's.
#include "croupier/consumer.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "src/common/status_macros.h"
#include "src/consumer/batch_fetcher.h"
#include "src/consumer/connect.h"
#include "src/consumer/peers.h"
#include "src/consumer/position_reporter.h"
#include "src/consumer/prefetcher.h"
#include "src/rpc/dispatcher_client.h"
#include "src/rpc/grpc_util.h"

namespace croupier {
namespace {

JobSummary Summarize(const JobConfig& job, v1::JobState state) {
  JobSummary s;
  s.done_at_registration = state == v1::JOB_STATE_DONE;
  s.name = job.name;
  s.features = job.features;
  s.mode = job.mode;
  s.num_consumers = job.num_consumers();
  s.batch_size = job.plan.batch_size;
  s.num_records = job.plan.num_records;
  s.num_epochs = job.num_epochs;
  s.steps_per_epoch = job.steps_per_epoch;
  return s;
}

class ConsumerImpl final : public Consumer {
 public:
  ConsumerImpl(ConsumerOptions options, std::unique_ptr<ControlPlane> control,
               const Registration& registration, JobConfig job)
      : options_(std::move(options)),
        control_(std::move(control)),
        job_(Summarize(job, registration.job_state)),
        registered_(registration.position),
        peers_(control_.get(), options_.job,
               DataClientOptions{.auth_token = options_.auth_token,
                                 .tls = TlsConfig{.cert_file = options_.tls_cert_file,
                                                  .key_file = options_.tls_key_file,
                                                  .ca_file = options_.tls_ca_file}},
               ParseShmMode(options_.shm).value_or(ShmMode::kAuto)),
        fetcher_(&peers_, std::move(job), options_.rank, options_.timeout, &closed_),
        reporter_(control_.get(), registration, options_.job, options_.rank, options_.world) {}
  ~ConsumerImpl() override { Close(); }

  const JobSummary& job() const override { return job_; }
  ConsumerPosition registered_position() const override { return registered_; }
  ConsumerPosition position() const override { return reporter_.position(); }

  absl::Status StartEpoch(uint64_t epoch, uint64_t step) override {
    if (closed_.HasBeenNotified()) return absl::CancelledError("the consumer is closed");
    const JobConfig& config = fetcher_.job();
    if (config.num_epochs != 0 && epoch >= config.num_epochs) {
      return absl::OutOfRangeError(absl::StrCat("job '", config.name, "' has ", config.num_epochs,
                                                " epochs; no epoch ", epoch));
    }
    const bool first_come = !config.dealt();
    if (first_come && step != 0) {
      return absl::InvalidArgumentError("a first_come job can only start an epoch at step 0");
    }
    const uint64_t steps = config.StepsInEpoch(epoch);
    if (!first_come && step > steps) {
      return absl::OutOfRangeError(absl::StrCat("job '", config.name, "' has ", steps,
                                                " steps in epoch ", epoch, "; no step ", step));
    }
    const ConsumerPosition at = position();
    if (std::make_pair(epoch, step) < std::make_pair(at.epoch, at.step)) {
      // Going back (a checkpoint restored). The dispatcher must learn how far this consumer got
      // before it learns where it goes back to: it reopens the tasks between the two, and a short
      // epoch read faster than a heartbeat interval would otherwise look like no move at all,
      // with its tasks finished by their producers and never made again.
      reporter_.HeartbeatNow();
    }
    {
      // Joins the old epoch's workers, unless a Next() on another thread still holds it.
      std::shared_ptr<Prefetcher> old;
      absl::MutexLock lock(&prefetcher_mu_);
      old = std::move(prefetcher_);
    }
    epoch_ = epoch;
    unconfirmed_.reset();
    Prefetcher::Options p{.first = step,
                          .end = first_come ? UINT64_MAX : steps,
                          .max_batches = options_.prefetch_batches,
                          .max_bytes = options_.prefetch_bytes,
                          .any_order = first_come};
    FetchFn fetch = first_come
                        ? FetchFn([this, epoch](uint64_t) { return fetcher_.FetchAny(epoch); })
                        : FetchFn([this, epoch](uint64_t s) {
                            return fetcher_.FetchStep(epoch, s, absl::Now() + options_.timeout);
                          });
    FetchGroupFn fetch_group;
    if (!first_come) {
      fetch_group = [this, epoch](uint64_t first, uint32_t count, const LandFn& land) {
        fetcher_.FetchSteps(epoch, first, count, land);
      };
    }
    auto prefetcher = std::make_shared<Prefetcher>(p, std::move(fetch), std::move(fetch_group));
    {
      absl::MutexLock lock(&prefetcher_mu_);
      if (closed_.HasBeenNotified()) return absl::CancelledError("the consumer is closed");
      prefetcher_ = std::move(prefetcher);
    }
    reporter_.SetPosition({epoch, step});
    reporter_.Wake();  // the dispatcher learns the position now: it may have tasks to reopen
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
    RETURN_IF_ERROR(reporter_.Lost());
    const absl::Time start = absl::Now();
    absl::StatusOr<std::optional<Batch>> batch = std::optional<Batch>();
    if (unconfirmed_.has_value()) {
      batch = std::move(unconfirmed_);
      unconfirmed_.reset();
    } else {
      batch = prefetcher->Next();
    }
    if (batch.ok() && batch->has_value()) {
      // The batch reaches the trainer only while the rank is surely this consumer's: one frozen
      // past the takeover time, whose rank a new process took over, delivers nothing more
      // (ABORTED). Kept for the next call when the dispatcher could not say in time.
      absl::Status confirmed = reporter_.ConfirmRank(start + options_.timeout);
      if (!confirmed.ok()) {
        if (absl::IsDeadlineExceeded(confirmed)) unconfirmed_ = std::move(*batch);
        reporter_.Waited(absl::Now() - start);
        return confirmed;
      }
    }
    reporter_.Waited(absl::Now() - start);
    if (absl::IsDeadlineExceeded(batch.status())) {
      // A wait for a batch that ends while the dispatcher refuses this consumer (e.g. a journal
      // it cannot write, which also keeps tasks from being assigned) names that cause too.
      if (absl::Status refused = reporter_.LastHeartbeatError(); !refused.ok()) {
        return absl::DeadlineExceededError(
            absl::StrCat(batch.status().message(),
                         "; meanwhile the dispatcher does not take this consumer's heartbeats: ",
                         refused.ToString()));
      }
    }
    if (batch.ok() && batch->has_value()) {
      reporter_.Received((*batch)->bytes().size());
      reporter_.SetPosition({epoch_, position().step + 1});
    }
    return batch;
  }

  void Close() override {
    std::call_once(close_once_, [this] {
      closed_.Notify();
      peers_.CancelAll();
      std::shared_ptr<Prefetcher> prefetcher;
      {
        absl::MutexLock lock(&prefetcher_mu_);
        prefetcher = std::move(prefetcher_);
      }
      if (prefetcher) prefetcher->Cancel();
      reporter_.Stop();    // a last heartbeat frees the rank
      prefetcher.reset();  // joins its workers, unless a Next() on another thread still holds it
    });
  }

 private:
  const ConsumerOptions options_;
  const std::unique_ptr<ControlPlane> control_;
  const JobSummary job_;
  const ConsumerPosition registered_;
  absl::Notification closed_;
  Peers peers_;
  BatchFetcher fetcher_;
  PositionReporter reporter_;
  uint64_t epoch_ = 0;
  // A batch taken from the prefetcher but not handed over: the dispatcher did not confirm the
  // rank in time (Next). The next Next() hands it over first; StartEpoch drops it.
  std::optional<Batch> unconfirmed_;
  // Set by StartEpoch, dropped by Close; Next() works on a copy of the pointer.
  absl::Mutex prefetcher_mu_;
  std::shared_ptr<Prefetcher> prefetcher_ ABSL_GUARDED_BY(prefetcher_mu_);
  std::once_flag close_once_;
};

absl::Status CheckOptions(const ConsumerOptions& options) {
  if (options.dispatcher.empty() || options.job.empty()) {
    return absl::InvalidArgumentError("a consumer needs a dispatcher address and a job name");
  }
  if (options.world == 0 || options.rank >= options.world) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " is not in [0, world ", options.world, ")"));
  }
  return ParseShmMode(options.shm).status();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Consumer>> ConnectConsumer(ConsumerOptions options,
                                                          std::unique_ptr<ControlPlane> control) {
  RETURN_IF_ERROR(CheckOptions(options));
  ASSIGN_OR_RETURN(Registration registration,
                   RegisterConsumer(*control, options.job, options.rank, options.world,
                                    options.resume, options.timeout));
  ASSIGN_OR_RETURN(JobConfig job, ParseJobConfig(registration.job));
  return std::unique_ptr<Consumer>(
      new ConsumerImpl(std::move(options), std::move(control), registration, std::move(job)));
}

absl::StatusOr<std::unique_ptr<Consumer>> Consumer::Connect(ConsumerOptions options) {
  RETURN_IF_ERROR(CheckOptions(options));
  options.auth_token = rpc::ResolveAuthToken(options.auth_token);
  const TlsConfig tls = ResolveTlsConfig(TlsConfig{.cert_file = options.tls_cert_file,
                                                   .key_file = options.tls_key_file,
                                                   .ca_file = options.tls_ca_file});
  options.tls_cert_file = tls.cert_file;
  options.tls_key_file = tls.key_file;
  options.tls_ca_file = tls.ca_file;
  std::unique_ptr<ControlPlane> control = rpc::DispatcherClient::Create(
      options.dispatcher, {.auth_token = options.auth_token,
                           .call_timeout = std::min(options.timeout, absl::Seconds(10)),
                           .timeout = options.timeout,
                           .tls = tls});
  return ConnectConsumer(std::move(options), std::move(control));
}

}  // namespace croupier

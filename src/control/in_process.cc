#include "src/control/in_process.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/retry.h"
#include "src/common/status_macros.h"
#include "src/control/call_deadline.h"

namespace croupier {

// The running DispatcherImpl, if any. Calls hold mu_ shared while they run, so Crash (which
// holds it exclusively) waits for them, and never destroys a DispatcherImpl under a call.
struct InProcessDispatcher::Shared {
  absl::Mutex mu;
  std::unique_ptr<DispatcherImpl> impl ABSL_GUARDED_BY(mu);
};

namespace {

class InProcessControlPlane final : public ControlPlane {
 public:
  InProcessControlPlane(std::shared_ptr<InProcessDispatcher::Shared> shared, std::string name,
                        absl::Duration timeout)
      : shared_(std::move(shared)), name_(std::move(name)), timeout_(timeout) {}
  ~InProcessControlPlane() override { Cancel(); }

  absl::StatusOr<v1::CreateJobResponse> CreateJob(const v1::CreateJobRequest& r) override {
    return Call<v1::CreateJobResponse>("CreateJob", &DispatcherImpl::CreateJob, r);
  }
  absl::StatusOr<v1::GetJobResponse> GetJob(const v1::GetJobRequest& r) override {
    return Call<v1::GetJobResponse>("GetJob", &DispatcherImpl::GetJob, r);
  }
  absl::StatusOr<v1::ConsumerHeartbeatResponse> ConsumerHeartbeat(
      const v1::ConsumerHeartbeatRequest& r) override {
    return Call<v1::ConsumerHeartbeatResponse>("ConsumerHeartbeat",
                                               &DispatcherImpl::ConsumerHeartbeat, r);
  }
  absl::StatusOr<v1::LocateResponse> Locate(const v1::LocateRequest& r) override {
    return Call<v1::LocateResponse>("Locate", &DispatcherImpl::Locate, r);
  }
  absl::StatusOr<v1::StatusResponse> GetStatus(const v1::StatusRequest& r) override {
    return Call<v1::StatusResponse>("GetStatus", &DispatcherImpl::GetStatus, r);
  }
  absl::StatusOr<v1::DeleteJobResponse> DeleteJob(const v1::DeleteJobRequest& r) override {
    return Call<v1::DeleteJobResponse>("DeleteJob", &DispatcherImpl::DeleteJob, r);
  }

  // Through ProducerHeartbeatOrWait, as the gRPC service does: a heartbeat that waits for work
  // is held by the dispatcher, and this call waits for its answer or Cancel(). Tried once when
  // it waits, like the gRPC client.
  absl::StatusOr<v1::ProducerHeartbeatResponse> ProducerHeartbeat(
      const v1::ProducerHeartbeatRequest& request) override {
    struct Answer {
      bool done = false;
      absl::StatusOr<v1::ProducerHeartbeatResponse> result;
    };
    auto answer = std::make_shared<Answer>();
    auto cancel = cancel_;
    const absl::Status started =
        Attempt("ProducerHeartbeat", request.wait_for_work_ms() == 0, [&](DispatcherImpl& impl) {
          impl.ProducerHeartbeatOrWait(
              request, [answer, cancel](absl::StatusOr<v1::ProducerHeartbeatResponse> result) {
                absl::MutexLock lock(&cancel->mu);
                answer->result = std::move(result);
                answer->done = true;
              });
          return absl::OkStatus();
        });
    if (!started.ok()) return started;
    absl::MutexLock lock(&cancel->mu);
    auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(cancel->mu) {
      return answer->done || cancel->cancelled;
    };
    cancel->mu.Await(absl::Condition(&ready));
    if (!answer->done) return Cancelled("ProducerHeartbeat");
    if (!answer->result.ok()) return Prefixed("ProducerHeartbeat", answer->result.status());
    return std::move(answer->result);
  }

  const std::string& address() const override { return name_; }

  void Cancel() override {
    absl::MutexLock lock(&cancel_->mu);
    cancel_->cancelled = true;
  }

 private:
  // What a call waiting for a held heartbeat waits on; the dispatcher's answer may come after
  // this client is gone.
  struct CancelState {
    absl::Mutex mu;
    bool cancelled ABSL_GUARDED_BY(mu) = false;
  };

  absl::Status Cancelled(const char* name) const {
    return absl::CancelledError(
        absl::StrCat("dispatcher ", name_, ": ", name, ": the client is cancelled"));
  }
  absl::Status Prefixed(const char* name, const absl::Status& status) const {
    return absl::Status(status.code(),
                        absl::StrCat("dispatcher ", name_, ": ", name, ": ", status.message()));
  }
  bool IsCancelled() const {
    absl::MutexLock lock(&cancel_->mu);
    return cancel_->cancelled;
  }

  // Runs `fn` on the running dispatcher; while there is none, UNAVAILABLE, retried with backoff
  // until the timeout, or the caller's CallDeadline if sooner, when `retry`.
  absl::Status Attempt(const char* name, bool retry,
                       const std::function<absl::Status(DispatcherImpl&)>& fn) {
    return RetryWithBackoff(
        absl::StrCat("dispatcher ", name_, ": ", name),
        std::min(absl::Now() + timeout_, CallDeadline::Current()),
        [&](int) -> absl::Status {
          if (IsCancelled()) return Cancelled(name);
          absl::ReaderMutexLock lock(&shared_->mu);
          if (shared_->impl == nullptr) {
            return absl::UnavailableError(
                absl::StrCat("dispatcher ", name_, " is down: failed to connect"));
          }
          return fn(*shared_->impl);
        },
        RetryOptions{.initial_backoff = absl::Milliseconds(5),
                     .max_backoff = absl::Milliseconds(200),
                     .retryable = [retry](const absl::Status& s) {
                       return retry && absl::IsUnavailable(s);
                     }});
  }

  template <typename Response, typename Request>
  absl::StatusOr<Response> Call(const char* name,
                                absl::StatusOr<Response> (DispatcherImpl::*method)(const Request&),
                                const Request& request) {
    absl::StatusOr<Response> result = absl::UnavailableError("not called");
    absl::Status status = Attempt(name, /*retry=*/true, [&](DispatcherImpl& impl) {
      result = (impl.*method)(request);
      // The dispatcher's own UNAVAILABLE (a journal it cannot write) is retried too, as the gRPC
      // client retries every UNAVAILABLE.
      return result.status();
    });
    if (!status.ok()) {
      // The dispatcher's own answers keep their text; retries that ran out say so.
      return result.status() == status ? Prefixed(name, status) : status;
    }
    return result;
  }

  const std::shared_ptr<InProcessDispatcher::Shared> shared_;
  const std::string name_;
  const absl::Duration timeout_;
  const std::shared_ptr<CancelState> cancel_ = std::make_shared<CancelState>();
};

}  // namespace

InProcessDispatcher::InProcessDispatcher(InProcessDispatcherOptions options)
    : options_(std::move(options)), shared_(std::make_shared<Shared>()) {}

absl::StatusOr<std::unique_ptr<InProcessDispatcher>> InProcessDispatcher::Start(
    InProcessDispatcherOptions options) {
  std::unique_ptr<InProcessDispatcher> d(new InProcessDispatcher(std::move(options)));
  RETURN_IF_ERROR(d->Restart());
  d->ticker_ = std::thread([raw = d.get()] { raw->TickLoop(); });
  return d;
}

InProcessDispatcher::~InProcessDispatcher() {
  stop_.Notify();
  if (ticker_.joinable()) ticker_.join();
  Crash();
}

std::unique_ptr<ControlPlane> InProcessDispatcher::NewClient(absl::Duration timeout) {
  return std::make_unique<InProcessControlPlane>(shared_, options_.name, timeout);
}

void InProcessDispatcher::Crash() {
  std::unique_ptr<DispatcherImpl> gone;
  {
    absl::MutexLock lock(&shared_->mu);  // waits for the calls in progress
    gone = std::move(shared_->impl);
  }
  // Held heartbeats are answered (their producers beat again), then the state is dropped.
  if (gone) gone->StopWaiting();
}

absl::Status InProcessDispatcher::Restart() {
  Crash();
  ASSIGN_OR_RETURN(std::unique_ptr<DispatcherImpl> impl,
                   DispatcherImpl::Create(options_.dispatcher));
  absl::MutexLock lock(&shared_->mu);
  shared_->impl = std::move(impl);
  return absl::OkStatus();
}

absl::Status InProcessDispatcher::With(const std::function<void(DispatcherImpl&)>& fn) {
  absl::ReaderMutexLock lock(&shared_->mu);
  if (shared_->impl == nullptr) return absl::UnavailableError("the dispatcher is down");
  fn(*shared_->impl);
  return absl::OkStatus();
}

void InProcessDispatcher::TickLoop() {
  while (!stop_.WaitForNotificationWithTimeout(options_.tick_interval)) {
    (void)With([](DispatcherImpl& impl) { impl.Tick(); });
  }
}

}  // namespace croupier

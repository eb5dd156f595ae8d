#include "src/consumer/position_reporter.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/control/call_deadline.h"

namespace croupier {
namespace {

// The heartbeat interval an answer gives (1 s when it gives none).
absl::Duration IntervalOf(const v1::ConsumerHeartbeatResponse& response) {
  return absl::Milliseconds(response.heartbeat_interval_ms() ? response.heartbeat_interval_ms()
                                                             : 1000);
}

// The lease a heartbeat's answer renewed; an older dispatcher sends none: three intervals, its
// takeover time.
absl::Duration TakeoverOf(const v1::ConsumerHeartbeatResponse& response) {
  if (response.takeover_ms() != 0) return absl::Milliseconds(response.takeover_ms());
  return 3 * IntervalOf(response);
}

// How often ConfirmRank asks again while the dispatcher does not answer.
constexpr absl::Duration kConfirmRetry = absl::Milliseconds(100);

}  // namespace

absl::StatusOr<Registration> RegisterConsumer(ControlPlane& control, const std::string& job,
                                              uint32_t rank, uint32_t world, bool resume,
                                              absl::Duration timeout) {
  v1::ConsumerHeartbeatRequest request;
  request.set_job(job);
  request.set_rank(rank);
  request.set_world(world);
  request.set_resume(resume);
  const absl::Time deadline = absl::Now() + timeout;
  const CallDeadline bounded(deadline);  // no call outlives the consumer's own timeout
  absl::StatusOr<v1::ConsumerHeartbeatResponse> registered;
  bool said_waiting = false;
  absl::Time sent;
  while (true) {
    sent = absl::Now();
    registered = control.ConsumerHeartbeat(request);
    // ALREADY_EXISTS: a live consumer holds the rank (it is taken over once silent). NOT_FOUND:
    // the job does not exist yet (launchers start trainers and producers together, and
    // croupier.serve/produce create their job when they start): wait for it, saying so once.
    const bool wait =
        absl::IsAlreadyExists(registered.status()) || absl::IsNotFound(registered.status());
    if (!wait || absl::Now() + absl::Milliseconds(250) >= deadline) break;
    if (!said_waiting) {
      // Said at once, with what the dispatcher knows: a typo in the job's name shows now, not at
      // the deadline.
      said_waiting = true;
      // The message names the dispatcher already (the control plane's prefix).
      Log(LogLevel::kWarning, "consumer",
          absl::StrCat(registered.status().message(), "; rank ", rank, " waits up to ",
                       absl::FormatDuration(timeout),
                       absl::IsNotFound(registered.status()) ? " for the job to be created"
                                                             : " for the rank to be free"));
    }
    absl::SleepFor(absl::Milliseconds(250));
  }
  if (absl::IsNotFound(registered.status())) {
    return absl::NotFoundError(absl::StrCat(registered.status().message(), "; waited ",
                                            absl::FormatDuration(timeout), " for it"));
  }
  ASSIGN_OR_RETURN(v1::ConsumerHeartbeatResponse response, std::move(registered));
  Registration out;
  out.consumer_id = response.consumer_id();
  out.lease = response.lease();
  out.job = response.job();
  out.position = ConsumerPosition{response.epoch(), response.step()};
  out.heartbeat_interval = IntervalOf(response);
  out.job_state = response.job_state();
  out.takeover = TakeoverOf(response);
  out.sent = sent;
  Log(LogLevel::kDebug, "consumer",
      absl::StrCat("job '", job, "' rank ", rank, "/", world, " registered as consumer ",
                   out.consumer_id, " with ", control.address()));
  if (out.job_state == v1::JOB_STATE_DONE) {
    Log(LogLevel::kWarning, "consumer",
        absl::StrCat("job '", job, "' is done (every epoch delivered): rank ", rank,
                     " registered at epoch ", out.position.epoch, " step ", out.position.step,
                     " of its ", out.job.spec().num_epochs(),
                     " epochs, and has nothing left to read; to train again, create a job of "
                     "another name (or delete this one: croupier job delete)"));
  }
  return out;
}

PositionReporter::PositionReporter(ControlPlane* control, const Registration& registration,
                                   std::string job, uint32_t rank, uint32_t world)
    : control_(control),
      id_(registration.consumer_id),
      lease_(registration.lease),
      job_(std::move(job)),
      rank_(rank),
      world_(world),
      interval_(registration.heartbeat_interval),
      position_(registration.position),
      confirmed_sent_(registration.sent),
      takeover_(registration.takeover) {
  thread_ = std::thread([this] { Loop(); });
}

PositionReporter::~PositionReporter() { Stop(); }

ConsumerPosition PositionReporter::position() const {
  absl::MutexLock lock(&mu_);
  return position_;
}

void PositionReporter::SetPosition(ConsumerPosition position) {
  absl::MutexLock lock(&mu_);
  position_ = position;
}

void PositionReporter::Waited(absl::Duration waited) {
  wait_nanos_ += absl::ToInt64Nanoseconds(waited);
}

void PositionReporter::Received(uint64_t bytes) {
  ++batches_;
  bytes_ += bytes;
}

void PositionReporter::HeartbeatNow() {
  absl::Duration bound;
  {
    absl::MutexLock lock(&mu_);
    bound = takeover_;
  }
  const CallDeadline bounded(absl::Now() + bound);
  Send(/*leaving=*/false).IgnoreError();
}

void PositionReporter::Wake() {
  absl::MutexLock lock(&mu_);
  wake_ = true;
}

absl::Status PositionReporter::LastHeartbeatError() const {
  absl::MutexLock lock(&mu_);
  return last_error_;
}

absl::Status PositionReporter::Lost() const {
  absl::MutexLock lock(&mu_);
  return lost_;
}

bool PositionReporter::RankConfirmedLocked(absl::Time now) const {
  // The margin covers the two clocks' rates, which may differ slightly: the dispatcher's count
  // of the silence starts when it received the heartbeat, after this consumer sent it.
  return now < confirmed_sent_ + takeover_ - takeover_ / 10;
}

absl::Status PositionReporter::ConfirmRank(absl::Time deadline) {
  absl::Status last = absl::OkStatus();
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (!lost_.ok()) return lost_;
      if (stop_) return absl::CancelledError("the consumer is closed");
      if (RankConfirmedLocked(absl::Now())) return absl::OkStatus();
    }
    if (!last.ok() && absl::Now() >= deadline) {
      absl::MutexLock lock(&mu_);
      return absl::DeadlineExceededError(absl::StrCat(
          "job '", job_, "' rank ", rank_,
          ": no batch is handed over until the dispatcher confirms that this consumer still holds "
          "its rank (its last answer was to a heartbeat sent ",
          absl::FormatDuration(absl::Trunc(absl::Now() - confirmed_sent_, absl::Milliseconds(100))),
          " ago; a rank silent for ", absl::FormatDuration(takeover_),
          " may be taken over); last error: ", last.ToString()));
    }
    {
      const CallDeadline bounded(deadline);
      last = Send(/*leaving=*/false);
    }
    // Answered: the rank is this consumer's as of when that heartbeat was sent, just now.
    if (last.ok() || absl::IsAborted(last)) return last;
    {
      absl::MutexLock lock(&mu_);
      auto stopped = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stop_; };
      mu_.AwaitWithDeadline(absl::Condition(&stopped),
                            std::min(deadline, absl::Now() + kConfirmRetry));
    }
  }
}

void PositionReporter::Stop() {
  std::call_once(stop_once_, [this] {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    if (thread_.joinable()) thread_.join();
  });
}

void PositionReporter::Loop() {
  absl::Duration bound;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto woken = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return wake_ || stop_; };
      mu_.AwaitWithTimeout(absl::Condition(&woken), interval_);
      wake_ = false;
      if (stop_) break;
      bound = takeover_;
    }
    // A beat that cannot get through is given up after the takeover time (the next one tries
    // again), so that the thread reports and Stop() is not held for the client's whole timeout.
    const CallDeadline bounded(absl::Now() + bound);
    Send(/*leaving=*/false).IgnoreError();
  }
  // The final position, and the rank is free. Given up after an interval: a consumer that closes
  // is not held by a dispatcher that refuses or is gone (its rank is then taken over after the
  // takeover time instead).
  const CallDeadline bounded(absl::Now() + interval_);
  Send(/*leaving=*/true).IgnoreError();
}

absl::Status PositionReporter::Send(bool leaving) {
  if (absl::Status lost = Lost(); !lost.ok()) return lost;
  v1::ConsumerHeartbeatRequest request;
  request.set_consumer_id(id_);
  request.set_lease(lease_);
  request.set_job(job_);
  request.set_rank(rank_);
  request.set_world(world_);
  const ConsumerPosition p = position();
  request.set_epoch(p.epoch);
  request.set_step(p.step);
  request.set_batches_received(batches_);
  request.set_bytes_received(bytes_);
  request.set_wait_seconds(wait_nanos_ / 1e9);
  request.set_leaving(leaving);
  const absl::Time sent = absl::Now();
  auto response = control_->ConsumerHeartbeat(request);
  if (absl::IsNotFound(response.status()) || absl::IsPermissionDenied(response.status())) {
    // Removed: another consumer took the rank over (this one was silent too long), or it
    // expired; or the dispatcher does not know this consumer's lease. Serving on would deal this
    // rank's batches twice, so the consumer stops.
    const absl::Status lost = absl::AbortedError(
        absl::StrCat("job '", job_, "' rank ", rank_, ": this consumer lost its rank (",
                     response.status().message(), "); connect again"));
    Log(LogLevel::kError, "consumer", std::string(lost.message()));
    absl::MutexLock lock(&mu_);
    lost_ = lost;
    return lost;
  }
  if (!response.ok()) {
    Log(LogLevel::kWarning, "consumer",
        absl::StrCat("job '", job_, "' rank ", rank_,
                     ": heartbeat failed: ", response.status().ToString()));
    absl::MutexLock lock(&mu_);
    last_error_ = response.status();
    return response.status();
  }
  absl::MutexLock lock(&mu_);
  last_error_ = absl::OkStatus();
  confirmed_sent_ = std::max(confirmed_sent_, sent);
  takeover_ = TakeoverOf(*response);
  return absl::OkStatus();
}

}  // namespace croupier

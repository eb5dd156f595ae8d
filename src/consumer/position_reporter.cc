#include "src/consumer/position_reporter.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"

namespace croupier {

absl::StatusOr<Registration> RegisterConsumer(ControlPlane& control, const std::string& job,
                                              uint32_t rank, uint32_t world, bool resume,
                                              absl::Duration timeout) {
  v1::ConsumerHeartbeatRequest request;
  request.set_job(job);
  request.set_rank(rank);
  request.set_world(world);
  request.set_resume(resume);
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<v1::ConsumerHeartbeatResponse> registered;
  bool said_waiting = false;
  while (true) {
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
  out.heartbeat_interval = absl::Milliseconds(
      response.heartbeat_interval_ms() ? response.heartbeat_interval_ms() : 1000);
  out.job_state = response.job_state();
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
      position_(registration.position) {
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

void PositionReporter::HeartbeatNow() { Send(/*leaving=*/false); }

void PositionReporter::Wake() {
  absl::MutexLock lock(&mu_);
  wake_ = true;
}

absl::Status PositionReporter::Lost() const {
  absl::MutexLock lock(&mu_);
  return lost_;
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
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto woken = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return wake_ || stop_; };
      mu_.AwaitWithTimeout(absl::Condition(&woken), interval_);
      wake_ = false;
      if (stop_) break;
    }
    Send(/*leaving=*/false);
  }
  Send(/*leaving=*/true);  // the final position, and the rank is free
}

void PositionReporter::Send(bool leaving) {
  if (!Lost().ok()) return;
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
    return;
  }
  if (!response.ok()) {
    Log(LogLevel::kWarning, "consumer",
        absl::StrCat("job '", job_, "' rank ", rank_,
                     ": heartbeat failed: ", response.status().ToString()));
  }
}

}  // namespace croupier

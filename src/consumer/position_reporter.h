// A consumer's standing with the dispatcher: its registration, the heartbeat thread that
// acknowledges its position and statistics, and whether it still holds its rank. Knows nothing of
// batches or producers (batch_fetcher.h fetches them).
#ifndef CROUPIER_SRC_CONSUMER_POSITION_REPORTER_H_
#define CROUPIER_SRC_CONSUMER_POSITION_REPORTER_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "croupier/consumer.h"
#include "proto/croupier.pb.h"
#include "src/control/control_plane.h"

namespace croupier {

// What the dispatcher answered a registration.
struct Registration {
  uint64_t consumer_id = 0;
  std::string lease;  // what every later heartbeat carries (ConsumerHeartbeatRequest.lease)
  v1::JobInfo job;
  ConsumerPosition position;  // where the consumer was registered
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // The rank is this consumer's until `takeover` after the dispatcher received the registration,
  // which was sent at `sent` (ConsumerHeartbeatResponse.takeover_ms).
  absl::Duration takeover = absl::Seconds(3);
  absl::Time sent = absl::InfinitePast();
  // The job's state as of the registration (JOB_STATE_UNSPECIFIED from an older dispatcher).
  v1::JobState job_state = v1::JOB_STATE_UNSPECIFIED;
};

// Registers rank `rank` of `world` of `job`, at the rank's last position with `resume`. A rank
// still held by a consumer that just died is taken over once its holder has missed a few
// heartbeats: ALREADY_EXISTS is retried until `timeout`. A job that is done already (every
// epoch delivered: e.g. a saved state that resumed a finished job) is logged as a WARNING naming
// the job, its state and the position. Errors as ConsumerHeartbeat's (Consumer::Connect
// documents them).
absl::StatusOr<Registration> RegisterConsumer(ControlPlane& control, const std::string& job,
                                              uint32_t rank, uint32_t world, bool resume,
                                              absl::Duration timeout);

// Thread-safe. Starts its heartbeat thread at construction; Stop() (or the destructor) sends a
// last heartbeat that frees the rank, keeping its position for the rank's next consumer.
class PositionReporter {
 public:
  PositionReporter(ControlPlane* control, const Registration& registration, std::string job,
                   uint32_t rank, uint32_t world);
  ~PositionReporter();  // Stop()

  ConsumerPosition position() const;
  // Sets the position the next heartbeat acknowledges.
  void SetPosition(ConsumerPosition position);
  // Time a Next() spent waiting for data, whatever it returned.
  void Waited(absl::Duration waited);
  // One batch received, of `bytes`.
  void Received(uint64_t bytes);
  // Heartbeats now, on this thread, without waiting for the interval: a consumer going back
  // acknowledges how far it got first (ConsumerImpl::StartEpoch).
  void HeartbeatNow();
  // Wakes the heartbeat thread to acknowledge the position now.
  void Wake();
  // OK, or ABORTED once the dispatcher said another consumer took this rank over (this one was
  // silent too long): serving on would deal the rank's batches twice.
  absl::Status Lost() const;
  // OK once the rank is known to be this consumer's for a while yet: the last heartbeat the
  // dispatcher answered was sent less than its takeover time ago (less a margin), or a heartbeat
  // sent now is answered. A consumer hands its trainer a batch only after this: a process
  // frozen (SIGSTOP, a debugger, a swapped-out machine) past the takeover time, whose rank a new
  // process took over meanwhile, must not deliver the batch it had prefetched. ABORTED when the
  // rank is lost; DEADLINE_EXCEEDED naming the dispatcher's last answer when the dispatcher does
  // not answer before `deadline`; CANCELLED once stopped.
  absl::Status ConfirmRank(absl::Time deadline);
  // OK, or the error of the last heartbeat if it failed (the dispatcher unreachable, or its
  // journal refusing the acknowledgement): a wait that ends in an error says it too.
  absl::Status LastHeartbeatError() const;
  // Stops the thread after a last heartbeat that frees the rank. Idempotent.
  void Stop();

 private:
  void Loop();
  // One heartbeat: OK, ABORTED when the rank is lost, or the call's error.
  absl::Status Send(bool leaving);
  // Whether the rank is known to be this consumer's now (see ConfirmRank).
  bool RankConfirmedLocked(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ControlPlane* const control_;
  const uint64_t id_;
  const std::string lease_;
  const std::string job_;
  const uint32_t rank_, world_;
  const absl::Duration interval_;

  mutable absl::Mutex mu_;
  ConsumerPosition position_ ABSL_GUARDED_BY(mu_);
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status lost_ ABSL_GUARDED_BY(mu_);
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
  // When the last heartbeat the dispatcher answered was sent, and the lease it renewed.
  absl::Time confirmed_sent_ ABSL_GUARDED_BY(mu_);
  absl::Duration takeover_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> batches_{0}, bytes_{0};
  std::atomic<int64_t> wait_nanos_{0};
  std::thread thread_;
  std::once_flag stop_once_;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_CONSUMER_POSITION_REPORTER_H_

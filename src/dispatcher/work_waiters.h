// Heartbeats that wait for work. A producer with free task slots and nothing to do may ask the
// dispatcher to hold its heartbeat's answer until a change of the state can give it a task (a
// consumer registering, a task orphaned or reopened), instead of finding the new
// work only at its next heartbeat, a whole interval later.
#ifndef CROUPIER_SRC_DISPATCHER_WORK_WAITERS_H_
#define CROUPIER_SRC_DISPATCHER_WORK_WAITERS_H_

#include <cstdint>
#include <map>
#include <thread>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace croupier {

// Thread-safe. Owns one thread, which runs every callback, outside any lock of this class.
class WorkWaiters {
 public:
  // Why a callback runs.
  enum class Wake { kWorkMayBeAvailable, kDeadline, kStopped };
  using Callback = absl::AnyInvocable<void(Wake) &&>;

  WorkWaiters();
  // Stop(), then joins the thread.
  ~WorkWaiters();
  WorkWaiters(const WorkWaiters&) = delete;
  WorkWaiters& operator=(const WorkWaiters&) = delete;

  // Calls `done` exactly once, from this object's thread: after the next Notify(), at `deadline`
  // (real time), or at Stop(), whichever comes first. After Stop(), `done` runs at once, on the
  // caller's thread, with kStopped.
  void Wait(absl::Time deadline, Callback done);

  // Every waiter registered before this call (and any that comes before the thread sees the
  // notification) is called back with kWorkMayBeAvailable. Cheap
  // when nobody waits; never blocks on a callback.
  void Notify();

  // Calls back every waiter with kStopped and makes later Waits answer at once. Returns after
  // those callbacks have run. Idempotent. Not from a callback.
  void Stop();

  // Waiters not yet called back (for tests and the status page).
  size_t waiting() const;

 private:
  void Run();

  mutable absl::Mutex mu_;
  absl::CondVar wake_;  // the thread's: a notification, a new earliest deadline, or Stop
  // By deadline, then arrival.
  std::multimap<absl::Time, Callback> waiters_ ABSL_GUARDED_BY(mu_);
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
  bool rescan_ ABSL_GUARDED_BY(mu_) = false;  // a Wait added an earlier deadline
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;  // the thread has called back every waiter
  absl::CondVar stopped_cv_;
  std::thread thread_;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_DISPATCHER_WORK_WAITERS_H_

// A dispatcher in this process, and control planes (control_plane.h) that call its logic
// (DispatcherImpl) directly, without gRPC: the dispatcher of the in-process test cluster
// (src/testing/test_cluster.h). It ticks like a DispatcherNode (expiry, the producer advice), and
// can be crashed and restarted from its journal, as a process can, while its clients live on.
#ifndef CROUPIER_SRC_CONTROL_IN_PROCESS_H_
#define CROUPIER_SRC_CONTROL_IN_PROCESS_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "src/control/control_plane.h"
#include "src/dispatcher/dispatcher_impl.h"

namespace croupier {

struct InProcessDispatcherOptions {
  DispatcherOptions dispatcher;  // a journal_path makes Restart() replay it
  absl::Duration tick_interval =
      absl::Milliseconds(100);      // DispatcherImpl::Tick, as a node's ticker
  std::string name = "in-process";  // the clients' address(), for messages
};

// Thread-safe.
class InProcessDispatcher {
 public:
  // DispatcherImpl::Create's errors.
  static absl::StatusOr<std::unique_ptr<InProcessDispatcher>> Start(
      InProcessDispatcherOptions options);
  ~InProcessDispatcher();  // Crash(), then the ticker stops

  // A control plane calling this dispatcher. While the dispatcher is down (Crash), its calls
  // retry UNAVAILABLE until `timeout`, as the gRPC client does with a dispatcher process that
  // restarts. May outlive this object: its calls then fail UNAVAILABLE until their timeout.
  std::unique_ptr<ControlPlane> NewClient(absl::Duration timeout = absl::Seconds(10));

  // As a killed process: held heartbeats fail, every call fails UNAVAILABLE from now on, and the
  // volatile state is gone. Waits for the calls in progress. Idempotent.
  void Crash();
  // A new DispatcherImpl from the same options: the journal, if any, replayed. Crashes the
  // current one first if it runs.
  absl::Status Restart();

  // Runs `fn` on the running dispatcher (for tests that look at its state); UNAVAILABLE while
  // it is down.
  absl::Status With(const std::function<void(DispatcherImpl&)>& fn);

  // What clients share with this object: the running dispatcher, or none.
  struct Shared;

 private:
  explicit InProcessDispatcher(InProcessDispatcherOptions options);
  void TickLoop();

  const InProcessDispatcherOptions options_;
  std::shared_ptr<Shared> shared_;
  absl::Notification stop_;
  std::thread ticker_;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_CONTROL_IN_PROCESS_H_

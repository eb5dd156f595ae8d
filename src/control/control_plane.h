// The control plane as producers, consumers and the command line see it: the dispatcher's calls
// (proto/croupier.proto), whatever carries them. Two implementations:
//   rpc::DispatcherClient (src/rpc/dispatcher_client.h)  gRPC to a dispatcher process;
//   InProcessControlPlane (src/control/in_process.h)     calls a DispatcherImpl in this process
//                                                         (the in-process test cluster).
// Producers (ProducerNode) and consumers (ConnectConsumer) take this interface, so their logic is
// tested in one process with the dispatcher's real logic behind it.
#ifndef CROUPIER_SRC_CONTROL_CONTROL_PLANE_H_
#define CROUPIER_SRC_CONTROL_CONTROL_PLANE_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/croupier.pb.h"

namespace croupier {

// Thread-safe. Every call returns the dispatcher's answer or its error (DispatcherImpl's
// contracts, dispatcher_impl.h), or: DEADLINE_EXCEEDED naming the address and the last error when
// the dispatcher cannot be reached, or keeps answering UNAVAILABLE (a journal it cannot write),
// within the implementation's timeout, or by the caller's CallDeadline (call_deadline.h) if that
// comes first (UNAVAILABLE is retried until then); CANCELLED after Cancel().
class ControlPlane {
 public:
  virtual ~ControlPlane() = default;

  virtual absl::StatusOr<v1::CreateJobResponse> CreateJob(const v1::CreateJobRequest& request) = 0;
  virtual absl::StatusOr<v1::GetJobResponse> GetJob(const v1::GetJobRequest& request) = 0;
  // A heartbeat that asks to wait for work (wait_for_work_ms > 0) may be held by the dispatcher up
  // to that long; it is tried once, not retried (the producer beats again at its interval).
  virtual absl::StatusOr<v1::ProducerHeartbeatResponse> ProducerHeartbeat(
      const v1::ProducerHeartbeatRequest& request) = 0;
  virtual absl::StatusOr<v1::ConsumerHeartbeatResponse> ConsumerHeartbeat(
      const v1::ConsumerHeartbeatRequest& request) = 0;
  virtual absl::StatusOr<v1::LocateResponse> Locate(const v1::LocateRequest& request) = 0;
  virtual absl::StatusOr<v1::StatusResponse> GetStatus(const v1::StatusRequest& request) = 0;
  // Retried on UNAVAILABLE like the others: a deletion that took effect before its answer was
  // lost is then NOT_FOUND.
  virtual absl::StatusOr<v1::DeleteJobResponse> DeleteJob(const v1::DeleteJobRequest& request) = 0;

  // Where the dispatcher is, for messages: host:port, or a name for an in-process one.
  virtual const std::string& address() const = 0;

  // Cancels the calls in progress (they return CANCELLED at once, e.g. a heartbeat held while
  // the dispatcher waits for work) and makes every later call return CANCELLED. For a component
  // that stops.
  virtual void Cancel() = 0;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_CONTROL_CONTROL_PLANE_H_

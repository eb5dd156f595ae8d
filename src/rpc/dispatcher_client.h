// The control plane over gRPC (src/control/control_plane.h): a client of a dispatcher process for
// producers, consumers and the command line. Each call retries UNAVAILABLE with backoff
// (RetryWithBackoff) until its timeout, so a dispatcher that restarts is waited for, and an
// unreachable one gives DEADLINE_EXCEEDED naming its address.
#ifndef CROUPIER_SRC_RPC_DISPATCHER_CLIENT_H_
#define CROUPIER_SRC_RPC_DISPATCHER_CLIENT_H_

#include <grpcpp/support/channel_arguments.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/croupier.grpc.pb.h"
#include "src/control/control_plane.h"
#include "src/net/tls_config.h"
#include "src/rpc/grpc_util.h"

namespace croupier::rpc {

struct DispatcherClientOptions {
  std::string auth_token;  // resolved by the caller (ResolveAuthToken)
  absl::Duration call_timeout = absl::Seconds(10);  // one attempt
  absl::Duration timeout = absl::Seconds(60);       // all attempts of one call
  // TLS to the dispatcher (src/net/tls_config.h); none given: $CROUPIER_TLS_CERT/_KEY/_CA, else
  // plaintext.
  TlsConfig tls;
  // A TCP connection of this client's own. By default the clients of one process to the same
  // address share one (gRPC's subchannel pool); a benchmark that stands in for many processes
  // (bench/bench_dispatcher.cc) gives each of its threads its own, as separate processes have.
  bool own_connection = false;
  // Keepalive pings on the connection (kKeepaliveTime and kKeepaliveTimeout, grpc_util.h); tests
  // shorten them.
  absl::Duration keepalive_time = kKeepaliveTime;
  absl::Duration keepalive_timeout = kKeepaliveTimeout;
};

// Thread-safe.
class DispatcherClient final : public ControlPlane {
 public:
  static std::unique_ptr<DispatcherClient> Create(const std::string& address,
                                                  DispatcherClientOptions options = {});

  absl::StatusOr<v1::CreateJobResponse> CreateJob(const v1::CreateJobRequest& request) override;
  absl::StatusOr<v1::GetJobResponse> GetJob(const v1::GetJobRequest& request) override;
  // A heartbeat that waits for work (wait_for_work_ms > 0) is tried once, not retried: the
  // dispatcher holds it, so a dispatcher that dies fails it at once, and a retry made while the
  // dispatcher restarts was seen to leave gRPC's connection attempts hanging for seconds after
  // it is back. Its caller beats again at the interval.
  absl::StatusOr<v1::ProducerHeartbeatResponse> ProducerHeartbeat(
      const v1::ProducerHeartbeatRequest& request) override;
  absl::StatusOr<v1::ConsumerHeartbeatResponse> ConsumerHeartbeat(
      const v1::ConsumerHeartbeatRequest& request) override;
  absl::StatusOr<v1::LocateResponse> Locate(const v1::LocateRequest& request) override;
  absl::StatusOr<v1::StatusResponse> GetStatus(const v1::StatusRequest& request) override;
  absl::StatusOr<v1::DeleteJobResponse> DeleteJob(const v1::DeleteJobRequest& request) override;

  const std::string& address() const override { return address_; }
  void Cancel() override;

  // The arguments of its gRPC channel: message bounds, reconnection backoff, the bound of one
  // connection attempt (kConnectTimeout), and a connection of its own if `own_connection`.
  static grpc::ChannelArguments ChannelArgs(const DispatcherClientOptions& options);

  // The connections of its own this client made to learn why it could not connect
  // (net::ProbeTls): at most one every kProbeEvery, none once the dispatcher has answered it.
  uint64_t probes() const;

 private:
  DispatcherClient(std::string address, DispatcherClientOptions options);
  // One call, retried on UNAVAILABLE until options_.timeout when `retry` is set.
  template <typename Response, typename Request, typename Method>
  absl::StatusOr<Response> Call(const char* name, const Request& request, Method method,
                                bool retry = true);

  // Whether a connection failure (`failure`) may be explained by a probe now; counts it if so.
  bool ProbeDue(const grpc::Status& failure);

  // A cause the hint of a failed connection can name: plaintext or TLS.
  std::string ConnectionHint(const absl::Status& status) const;

  const std::string address_;
  const DispatcherClientOptions options_;
  absl::Status setup_error_;  // TLS files that cannot be read: every call fails with it
  std::unique_ptr<v1::Dispatcher::Stub> stub_;

  std::atomic<bool> answered_once_{false};  // a call was answered: TLS agrees, no probe needed
  mutable absl::Mutex mu_;
  absl::Time next_probe_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  uint64_t probes_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_set<grpc::ClientContext*> calls_ ABSL_GUARDED_BY(mu_);  // in progress
};

}  // namespace croupier::rpc

#endif  // CROUPIER_SRC_RPC_DISPATCHER_CLIENT_H_

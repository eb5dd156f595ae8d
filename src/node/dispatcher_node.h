// A running dispatcher: DispatcherImpl behind its gRPC service, plus the thread that expires
// silent producers and consumers. `croupier dispatcher` is this class and a signal handler.
#ifndef CROUPIER_SRC_NODE_DISPATCHER_NODE_H_
#define CROUPIER_SRC_NODE_DISPATCHER_NODE_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "src/dispatcher/dispatcher_impl.h"
#include "src/net/tls_config.h"
#include "src/node/metrics_server.h"
#include "src/node/status_history.h"
#include "src/rpc/dispatcher_service.h"
#include "src/rpc/grpc_listener.h"
#include "src/rpc/grpc_util.h"

namespace croupier {

struct DispatcherNodeOptions {
  std::string bind_address = "127.0.0.1";
  int port = 5050;  // 0: any free port (see port())
  // Holds the record-index cache (index/) and the journal (journal): a dispatcher started again
  // with the same work directory replays it and carries on with the same jobs, producers,
  // consumers, tasks and positions. Created if missing; must be writable.
  std::string work_dir;
  std::string auth_token;  // empty: no authentication
  // TLS on the gRPC port (src/net/tls_config.h: with a CA, clients need certificates it signed);
  // none given: $CROUPIER_TLS_CERT/_KEY/_CA, else plaintext.
  TlsConfig tls;
  // Limits of the gRPC server against floods and hostile clients: concurrent calls on one
  // connection, time to finish a (TLS) handshake, idle connections, and the memory gRPC may use
  // for buffers (beyond it, calls are refused with RESOURCE_EXHAUSTED rather than the process
  // growing). Messages are bounded by rpc::kMaxControlMessageBytes.
  int max_concurrent_streams = 64;
  absl::Duration handshake_timeout = rpc::kConnectTimeout;  // what the clients wait, 1 s
  absl::Duration max_connection_idle = absl::Minutes(10);
  size_t grpc_memory_bytes = size_t{512} << 20;
  // Descriptors the listener keeps free for the journal, the index cache and the metrics server:
  // a connection that would take one is closed at once (src/rpc/grpc_listener.h). 0: a
  // twentieth of the limit, at least 64.
  int descriptor_reserve = 0;
  DispatcherOptions dispatcher;
  // An HTTP server on bind_address:metrics_port (0: any free port; -1: none): Prometheus metrics
  // (GET /metrics), the web page (GET /) and what it draws from (GET /api/status, the status as
  // `croupier status --json` prints it; GET /api/history, the last minutes: StatusHistory).
  int metrics_port = -1;
};

// Thread-safe.
class DispatcherNode {
 public:
  // UNAVAILABLE naming the address if the port cannot be bound; the work directory's error if it
  // cannot be created or written; the journal's errors (DispatcherImpl::Create).
  static absl::StatusOr<std::unique_ptr<DispatcherNode>> Start(DispatcherNodeOptions options);
  ~DispatcherNode();  // Shutdown()

  int port() const { return port_; }
  // The metrics server's port, or 0 without one.
  int metrics_port() const { return metrics_ ? metrics_->port() : 0; }
  std::string address() const;
  // Stops serving within about a second: in-flight calls get a short grace period, then are
  // cancelled. Idempotent.
  void Shutdown();

 private:
  DispatcherNode() = default;

  DispatcherNodeOptions options_;
  std::unique_ptr<DispatcherImpl> impl_;
  std::unique_ptr<rpc::DispatcherService> service_;
  std::unique_ptr<rpc::GrpcListener> listener_;  // accepts for server_
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetricsServer> metrics_;
  StatusHistory history_;  // sampled by ticker_ each second
  int port_ = 0;
  absl::Notification stop_;
  std::thread ticker_;
  std::once_flag shutdown_once_;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_NODE_DISPATCHER_NODE_H_

// The dispatcher's listening socket, accepted by croupier rather than by gRPC, and each connection
// handed to the gRPC server (grpc::experimental::ExternalConnectionAcceptor).
//
// Why not gRPC's own listener: gRPC 1.51 (Debian 12's) stops accepting for good after one failed
// accept4 other than EAGAIN (`Failed accept4: Too many open files`), and it has no bound on
// connections. A dispatcher restarted under 10,000 reconnecting clients reached its descriptor
// limit that way and accepted nothing more for minutes (bench/notes.md, "Recovery at scale").
// This listener:
// - keeps `reserve` descriptors free for the rest of the process (the journal and its
//   compaction, the index cache, the metrics server): a connection accepted into that reserve is
//   closed at once, so that its client tries again after its backoff rather than waiting in the
//   accept queue. Linux gives the lowest free descriptor, so an accepted descriptor numbered N
//   means at least N + 1 are open;
// - survives a failed accept: out of descriptors (EMFILE, ENFILE) or memory, it closes a spare
//   descriptor it holds for the purpose, takes the waiting connection and closes it (so that its
//   client learns at once), takes the spare again, backs off briefly and goes on;
// - says what it shed in the log, at most once every 10 s per kind.
// Thread-safe.
#ifndef CROUPIER_SRC_RPC_GRPC_LISTENER_H_
#define CROUPIER_SRC_RPC_GRPC_LISTENER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/net/socket.h"

namespace croupier::rpc {

struct GrpcListenerOptions {
  // Descriptors kept free for the rest of the process; 0: max(64, a twentieth of the limit).
  int reserve = 0;
  // Names the server in the log, e.g. "dispatcher".
  std::string name = "dispatcher";
};

class GrpcListener {
 public:
  // Binds host:port (port 0: any free one) and registers an acceptor with `builder`, which must
  // not be built yet. UNAVAILABLE naming the address when the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<GrpcListener>> Create(
      grpc::ServerBuilder& builder, const std::string& host, int port,
      std::shared_ptr<grpc::ServerCredentials> credentials, GrpcListenerOptions options = {});
  ~GrpcListener();  // Stop()
  GrpcListener(const GrpcListener&) = delete;
  GrpcListener& operator=(const GrpcListener&) = delete;

  int port() const { return port_; }
  // Starts accepting; call once the server is built and started (gRPC drops a connection handed
  // to a server that is not).
  void Start();
  // Stops accepting and closes the listening socket; call before the server shuts down.
  // Idempotent.
  void Stop();

  // The soft limit of descriptors when created, and the highest descriptor number admitted.
  int limit() const { return limit_; }
  int reserve() const { return reserve_; }
  // Connections handed to gRPC, closed at once for the reserve, and accepts that failed (each
  // one a connection closed through the spare descriptor, or a back-off).
  uint64_t accepted() const { return accepted_.load(); }
  uint64_t shed() const { return shed_.load(); }
  uint64_t failed() const { return failed_.load(); }

 private:
  GrpcListener() = default;
  void AcceptLoop();
  // Accepts the waiting connection through the spare descriptor and closes it.
  void ShedThroughSpare();
  void Report(bool force);

  GrpcListenerOptions options_;
  net::Socket listener_;
  net::Socket spare_;  // /dev/null, given up to take a connection when out of descriptors
  std::unique_ptr<net::WakeEvent> stop_;
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor_;
  int port_ = 0;
  int limit_ = 0;
  int reserve_ = 0;
  std::thread thread_;
  absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> accepted_{0}, shed_{0}, failed_{0};
  // What was last logged (the loop's own thread only).
  uint64_t shed_logged_ = 0, failed_logged_ = 0;
  absl::Time last_report_ = absl::InfinitePast();
  int last_errno_ = 0;
};

}  // namespace croupier::rpc

#endif  // CROUPIER_SRC_RPC_GRPC_LISTENER_H_

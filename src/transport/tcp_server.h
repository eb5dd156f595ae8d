// The TCP data server: an acceptor thread and one thread per connection (protocol in frame.h).
#ifndef CROUPIER_SRC_TRANSPORT_TCP_SERVER_H_
#define CROUPIER_SRC_TRANSPORT_TCP_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "src/transport/batch_source.h"
#include "src/transport/socket.h"
#include "src/transport/tls.h"
#include "src/transport/transport.h"

namespace croupier {

// Thread-safe. A thread per connection is simple and, with at most max_connections consumers
// per producer, cheap enough; each thread blocks in the source or in poll, never spins.
class TcpDataServer final : public DataServer {
 public:
  // Binds, listens and starts accepting. INVALID_ARGUMENT for bad options; UNAVAILABLE when the
  // address cannot be bound.
  static absl::StatusOr<std::unique_ptr<DataServer>> Start(const DataServerOptions& options,
                                                           BatchSource* source);
  ~TcpDataServer() override;

  int port() const override { return port_; }
  std::string address() const override { return address_; }
  void Shutdown() override;

 private:
  TcpDataServer(const DataServerOptions& options, BatchSource* source, net::Socket listener,
                std::unique_ptr<net::WakeEvent> stop, std::shared_ptr<const net::TlsContext> tls);

  void AcceptLoop();
  // Starts a connection thread, or refuses the connection when at max_connections or at
  // max_connections_per_peer for its IP address.
  void Admit(net::Socket socket) ABSL_LOCKS_EXCLUDED(mu_);
  // Joins the threads of connections that have ended.
  void JoinFinished() ABSL_LOCKS_EXCLUDED(mu_);
  // Called by a connection thread as its last act.
  void Finished(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  const DataServerOptions options_;
  BatchSource* const source_;
  const int port_;
  const std::string address_;
  const std::unique_ptr<net::WakeEvent> stop_;        // fired by Shutdown; every wait polls it
  const std::shared_ptr<const net::TlsContext> tls_;  // null: plaintext

  // Used by the acceptor thread only, then closed by Shutdown once that thread has ended.
  net::Socket listener_;
  std::thread acceptor_;
  absl::once_flag shutdown_once_;

  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  struct Running {
    std::thread thread;
    std::string ip;  // the client's address without its port
  };
  absl::flat_hash_map<uint64_t, Running> running_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, size_t> per_ip_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> finished_ ABSL_GUARDED_BY(mu_);
};

}  // namespace croupier

#endif  // CROUPIER_SRC_TRANSPORT_TCP_SERVER_H_

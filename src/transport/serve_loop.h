// The accept loop of every data server (TCP with or without TLS, shared memory): an acceptor
// thread and one thread per admitted connection, within connection limits, until Shutdown;
// written once over what a transport does with an accepted socket.
#ifndef CROUPIER_SRC_TRANSPORT_SERVE_LOOP_H_
#define CROUPIER_SRC_TRANSPORT_SERVE_LOOP_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "src/net/socket.h"
#include "src/transport/transport.h"

namespace croupier {

// INVALID_ARGUMENT naming the option for DataServerOptions no data server can work with
// (max_connections, max_request_bytes, handshake_timeout, auth_token). A transport checks its own
// options (port, max_connections_per_peer) first.
absl::Status ValidateDataServerOptions(const DataServerOptions& options);

struct ServeLoopOptions {
  // Names the server in logs: "data server 127.0.0.1:7001", "shared-memory data server @...".
  std::string name;
  // Connections beyond these are refused: in all, and per host as `admit` names it.
  size_t max_connections = 256;
  size_t max_connections_per_peer = 128;
  // Whether a refused client is sent an ERROR frame UNAVAILABLE saying why before the close (a
  // TLS client expects a TLS handshake first: it sees the close, which is UNAVAILABLE too).
  bool send_refusal = true;
  // Called first with each accepted socket, on the acceptor thread: prepares it and returns the
  // host it counts against max_connections_per_peer.
  std::function<std::string(int fd)> admit;
  // The client's name in logs ("10.0.0.7:41234", "pid 42").
  std::function<std::string(int fd)> peer_name;
  // Serves one admitted connection on its own thread until the connection ends. `stop` fires at
  // Shutdown: every wait of the connection must poll it, so that it ends promptly.
  std::function<void(net::Socket socket, const net::WakeEvent* stop)> serve;
};

// Accepts on a listening socket and serves each connection on a thread of its own. A thread per
// connection is simple and, with at most max_connections consumers per producer, cheap enough;
// each thread blocks in the source or in poll, never spins. Thread-safe.
class ServeLoop {
 public:
  // Starts the acceptor thread on `listener` (non-blocking, listening). INTERNAL when no wake
  // event can be made.
  static absl::StatusOr<std::unique_ptr<ServeLoop>> Start(net::Socket listener,
                                                          ServeLoopOptions options);
  // Shutdown.
  ~ServeLoop();
  ServeLoop(const ServeLoop&) = delete;
  ServeLoop& operator=(const ServeLoop&) = delete;

  // Stops promptly: fires the stop event, joins the acceptor, closes the listener and joins
  // every connection thread; logs "<name> stopped". Idempotent.
  void Shutdown();

 private:
  ServeLoop(net::Socket listener, ServeLoopOptions options, std::unique_ptr<net::WakeEvent> stop);

  void AcceptLoop();
  // Starts a connection thread, or refuses the connection when at max_connections or at
  // max_connections_per_peer for its host.
  void Admit(net::Socket socket) ABSL_LOCKS_EXCLUDED(mu_);
  // Joins the threads of connections that have ended.
  void JoinFinished() ABSL_LOCKS_EXCLUDED(mu_);
  // Called by a connection thread as its last act.
  void Finished(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  const ServeLoopOptions options_;
  const std::unique_ptr<net::WakeEvent> stop_;  // fired by Shutdown; every wait polls it

  // Used by the acceptor thread only, then closed by Shutdown once that thread has ended.
  net::Socket listener_;
  std::thread acceptor_;
  absl::once_flag shutdown_once_;

  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  struct Running {
    std::thread thread;
    std::string host;  // what the connection counts against max_connections_per_peer
  };
  absl::flat_hash_map<uint64_t, Running> running_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, size_t> per_host_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> finished_ ABSL_GUARDED_BY(mu_);
};

}  // namespace croupier

#endif  // CROUPIER_SRC_TRANSPORT_SERVE_LOOP_H_

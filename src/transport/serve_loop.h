// The accept loop of every data server (TCP with or without TLS, shared memory): an acceptor
// thread and one thread per admitted connection, within connection limits, until Shutdown;
// written once over what a transport does with an accepted socket.
//
// Slots: a connection that has not proved the token yet holds one of a few handshake slots
// (max_handshakes in all, max_handshakes_per_peer from its host, for at most the handshake
// timeout); only once authenticated (ConnectionSlot::Authenticated) does it take one of the
// max_connections slots in all and of the max_connections_per_peer slots of its host. So a client
// without the token, however often it reconnects, never holds the slots of the consumers that
// have it. When the handshake slots are full, a new connection is not refused: it takes the slot
// of the oldest connection still in its handshake (its host's oldest when its host's slots are
// full, else the oldest of all), which is evicted: its thread is woken through the connection's
// own wake event and closes it. A client with the token proves it within a round trip or two, so
// it is rarely the oldest, while the silent connections of a flood are: a flood from a client's
// own address (one host, one NAT) cannot keep it from its handshake. Evicted connections whose
// threads have not ended yet are bounded too (max_handshakes); beyond them a new connection is
// refused. Refusals and evictions are logged through a RefusalLog: the first few of each kind,
// then one summary line per interval.
#ifndef CROUPIER_SRC_TRANSPORT_SERVE_LOOP_H_
#define CROUPIER_SRC_TRANSPORT_SERVE_LOOP_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "src/net/socket.h"
#include "src/transport/transport.h"

namespace croupier {

// The log component of the transports' server side.
inline constexpr char kTransportLog[] = "transport";

// Connections in their handshake at once, by default: enough for every consumer of a producer to
// reconnect together, few enough that threads and descriptors stay bounded under a flood.
inline constexpr size_t kDefaultMaxHandshakes = 64;
// And from one host (as ServeLoopOptions::admit names it), so that one host's flood leaves the
// other hosts' clients room to authenticate.
inline constexpr size_t kDefaultMaxHandshakesPerPeer = 16;
// A refusal log's interval, and how many refusals of one kind (host and reason) it logs one by
// one in each interval before it only counts them.
inline constexpr absl::Duration kRefusalLogInterval = absl::Seconds(10);
inline constexpr int kRefusalsLoggedPerInterval = 3;

// Logs refused connections without letting a client that is refused in a loop fill the log: per
// kind (host, reason), the first kRefusalsLoggedPerInterval of an interval as they come, then a
// count, logged as "<name> refused <n> more connections from <host> in the last 10s: <reason>"
// at the first refusal or Flush after the interval. Thread-safe.
class RefusalLog {
 public:
  // `now` is the clock (tests pass their own).
  explicit RefusalLog(std::string name, std::function<absl::Time()> now = &absl::Now,
                      absl::Duration interval = kRefusalLogInterval)
      : name_(std::move(name)), now_(std::move(now)), interval_(interval) {}
  ~RefusalLog() { Flush(/*all=*/true); }

  // One refusal of `peer` (as logs name it) from `host`, for `reason`.
  void Note(absl::string_view host, absl::string_view peer, absl::string_view reason)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Logs the counts of the intervals that have ended (`all`: of every interval).
  void Flush(bool all = false) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Kind {
    absl::Time start;
    int logged = 0;
    uint64_t suppressed = 0;
  };
  void FlushLocked(bool all) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string name_;
  const std::function<absl::Time()> now_;
  const absl::Duration interval_;
  absl::Mutex mu_;
  // (host, reason) -> its current interval.
  absl::flat_hash_map<std::pair<std::string, std::string>, Kind> kinds_ ABSL_GUARDED_BY(mu_);
};

class ServeLoop;

// What a connection thread holds of its server: its stop event, and its slot, which moves from
// the handshake slots to the authenticated ones. Thread-compatible: used by its connection's
// thread only; the loop outlives it.
class ConnectionSlot {
 public:
  // The connection's own event, fired at Shutdown and when the connection is evicted from its
  // handshake slot: every wait of the connection must poll it, so that it ends promptly.
  const net::WakeEvent* stop() const { return stop_; }
  // The client has proved the token (or the server has none): takes one of the max_connections
  // slots and one of its host's max_connections_per_peer. UNAVAILABLE "the data server is at its
  // limit of <n> connections[ from <host>]" when full (logged here, rate-limited); the caller
  // sends it as an ERROR and closes. CANCELLED when the connection was evicted from its handshake
  // slot before (logged by the loop) or the server is stopping: the caller closes.
  absl::Status Authenticated();
  // Logs the refusal of this connection for `reason`, rate-limited (RefusalLog).
  void LogRefusal(absl::string_view peer, absl::string_view reason);

 private:
  friend class ServeLoop;
  ConnectionSlot(ServeLoop* loop, uint64_t id, std::string host, const net::WakeEvent* stop)
      : loop_(loop), id_(id), host_(std::move(host)), stop_(stop) {}
  ServeLoop* const loop_;
  const uint64_t id_;
  const std::string host_;
  const net::WakeEvent* const stop_;
};

// INVALID_ARGUMENT naming the option for DataServerOptions no data server can work with
// (max_connections, max_request_bytes, handshake_timeout, auth_token). A transport checks its own
// options (port, max_connections_per_peer) first.
absl::Status ValidateDataServerOptions(const DataServerOptions& options);

struct ServeLoopOptions {
  // Names the server in logs: "data server 127.0.0.1:7001", "shared-memory data server @...".
  std::string name;
  // Authenticated connections beyond these are refused: in all, and per host as `admit` names it.
  size_t max_connections = 256;
  size_t max_connections_per_peer = 128;
  // Connections in their handshake at once: in all, and per host. A new connection beyond them
  // evicts the oldest (see the top of this file).
  size_t max_handshakes = kDefaultMaxHandshakes;
  size_t max_handshakes_per_peer = kDefaultMaxHandshakesPerPeer;
  // Whether a refused client is sent an ERROR frame UNAVAILABLE saying why before the close (a
  // TLS client expects a TLS handshake first: it sees the close, which is UNAVAILABLE too).
  bool send_refusal = true;
  // Called first with each accepted socket, on the acceptor thread: prepares it and returns the
  // host it counts against max_connections_per_peer.
  std::function<std::string(int fd)> admit;
  // The client's name in logs ("10.0.0.7:41234", "pid 42").
  std::function<std::string(int fd)> peer_name;
  // Serves one admitted connection on its own thread until the connection ends; it calls
  // slot->Authenticated() once the client has proved the token, before answering HELLO_OK.
  std::function<void(net::Socket socket, ConnectionSlot* slot)> serve;
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

  // Stops promptly: fires the stop event and every connection's, joins the acceptor, closes the
  // listener and joins every connection thread; logs "<name> stopped". Idempotent.
  void Shutdown();

 private:
  ServeLoop(net::Socket listener, ServeLoopOptions options, std::unique_ptr<net::WakeEvent> stop);

  void AcceptLoop();
  friend class ConnectionSlot;
  // Starts a connection thread in a handshake slot, evicting the oldest connection in its
  // handshake when they are all taken; refuses the connection when too many evicted ones are
  // still ending (or no wake event can be made).
  void Admit(net::Socket socket) ABSL_LOCKS_EXCLUDED(mu_);
  // ConnectionSlot::Authenticated.
  absl::Status Authenticate(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // Connection `id`, from `host`, leaves its handshake slot.
  void EndHandshake(uint64_t id, const std::string& host) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Joins the threads of connections that have ended.
  void JoinFinished() ABSL_LOCKS_EXCLUDED(mu_);
  // Called by a connection thread as its last act.
  void Finished(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  const ServeLoopOptions options_;
  const std::unique_ptr<net::WakeEvent> stop_;  // fired by Shutdown; the acceptor polls it
  RefusalLog refusals_;                         // thread-safe

  // Used by the acceptor thread only, then closed by Shutdown once that thread has ended.
  net::Socket listener_;
  std::thread acceptor_;
  absl::once_flag shutdown_once_;

  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  struct Running {
    std::thread thread;
    std::string host;  // what the connection counts against max_connections_per_peer
    std::string peer;  // as logs name the client
    // The connection's stop event (ConnectionSlot::stop); its thread holds it too.
    std::shared_ptr<net::WakeEvent> wake;
    bool authenticated = false;  // holds an authenticated slot, else a handshake slot
    bool evicted = false;        // lost its handshake slot; its thread is ending
  };
  absl::flat_hash_map<uint64_t, Running> running_ ABSL_GUARDED_BY(mu_);
  // The connections in their handshake, in all and per host, by id: the oldest first.
  std::set<uint64_t> handshaking_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::set<uint64_t>> handshaking_per_host_ ABSL_GUARDED_BY(mu_);
  // Evicted connections whose threads have not ended yet.
  size_t evicted_ ABSL_GUARDED_BY(mu_) = 0;
  size_t authenticated_ ABSL_GUARDED_BY(mu_) = 0;
  // Authenticated connections per host.
  absl::flat_hash_map<std::string, size_t> per_host_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> finished_ ABSL_GUARDED_BY(mu_);
};

}  // namespace croupier

#endif  // CROUPIER_SRC_TRANSPORT_SERVE_LOOP_H_

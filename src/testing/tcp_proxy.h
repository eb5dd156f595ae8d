// A TCP forwarder on 127.0.0.1 for tests of what a network does to a connection that stays open:
// Stall() freezes every connection made so far (nothing more forwarded either way, both sockets
// left open), as a NAT, load balancer or moved address that stops answering without a reset
// does. Connections made after it are forwarded again, so a client that gives up a stalled
// connection and reconnects is served.
//
//   ASSERT_OK_AND_ASSIGN(auto proxy, TcpProxy::Start(server_port));
//   ... a client of 127.0.0.1:proxy->port() ...
//   proxy->Stall();
#ifndef CROUPIER_SRC_TESTING_TCP_PROXY_H_
#define CROUPIER_SRC_TESTING_TCP_PROXY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace croupier::testing {

// Thread-safe.
class TcpProxy {
 public:
  // Listens on 127.0.0.1 (any free port) and forwards each connection to 127.0.0.1:upstream_port.
  static absl::StatusOr<std::unique_ptr<TcpProxy>> Start(int upstream_port);
  ~TcpProxy();  // closes the listener and every connection, joins its threads

  int port() const { return port_; }
  // Connections accepted so far.
  int64_t connections() const { return accepted_.load(); }
  // Every connection accepted so far stops forwarding and stays open.
  void Stall();

 private:
  struct Connection;
  TcpProxy() = default;
  void Accept();
  void Pump(Connection& connection);

  int upstream_port_ = 0;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> accepted_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Connection>> connections_;  // guarded by mu_
};

}  // namespace croupier::testing

#endif  // CROUPIER_SRC_TESTING_TCP_PROXY_H_

#include "src/testing/tcp_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace croupier::testing {

struct TcpProxy::Connection {
  int client = -1;
  int upstream = -1;
  std::atomic<bool> stalled{false};
  std::thread pump;
};

namespace {

sockaddr_in Loopback(int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return address;
}

// Writes all of [data, data + n) to `fd`; false once the peer is gone.
bool WriteAll(int fd, const char* data, ssize_t n) {
  while (n > 0) {
    const ssize_t wrote = ::send(fd, data, static_cast<size_t>(n), MSG_NOSIGNAL);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return false;
    data += wrote;
    n -= wrote;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpProxy>> TcpProxy::Start(int upstream_port) {
  std::unique_ptr<TcpProxy> proxy(new TcpProxy());
  proxy->upstream_port_ = upstream_port;
  proxy->listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address = Loopback(0);
  socklen_t length = sizeof(address);
  if (proxy->listener_ < 0 ||
      ::bind(proxy->listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(proxy->listener_, 64) != 0 ||
      ::getsockname(proxy->listener_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return absl::InternalError(absl::StrCat("a test proxy cannot listen on 127.0.0.1: ",
                                            std::strerror(errno)));
  }
  proxy->port_ = ntohs(address.sin_port);
  proxy->acceptor_ = std::thread([raw = proxy.get()] { raw->Accept(); });
  return proxy;
}

TcpProxy::~TcpProxy() {
  stopping_ = true;
  ::shutdown(listener_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  ::close(listener_);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& connection : connections_) {
    if (connection->pump.joinable()) connection->pump.join();
    ::close(connection->client);
    ::close(connection->upstream);
  }
}

void TcpProxy::Stall() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& connection : connections_) connection->stalled = true;
}

void TcpProxy::Accept() {
  while (!stopping_) {
    pollfd waiting{.fd = listener_, .events = POLLIN, .revents = 0};
    if (::poll(&waiting, 1, 50) <= 0) continue;
    const int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    const int upstream = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const sockaddr_in address = Loopback(upstream_port_);
    if (upstream < 0 ||
        ::connect(upstream, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
      ::close(client);
      if (upstream >= 0) ::close(upstream);
      continue;
    }
    ++accepted_;
    auto connection = std::make_unique<Connection>();
    connection->client = client;
    connection->upstream = upstream;
    Connection* raw = connection.get();
    std::lock_guard<std::mutex> lock(mu_);
    connection->pump = std::thread([this, raw] { Pump(*raw); });
    connections_.push_back(std::move(connection));
  }
}

// Forwards both ways until a side closes or the proxy stops; a stalled connection only waits.
void TcpProxy::Pump(Connection& connection) {
  char buffer[16384];
  while (!stopping_) {
    if (connection.stalled) {
      ::usleep(20000);
      continue;
    }
    pollfd fds[2] = {{.fd = connection.client, .events = POLLIN, .revents = 0},
                     {.fd = connection.upstream, .events = POLLIN, .revents = 0}};
    if (::poll(fds, 2, 20) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].revents == 0) continue;
      const ssize_t n = ::recv(fds[i].fd, buffer, sizeof(buffer), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || !WriteAll(fds[1 - i].fd, buffer, n)) {
        // One side left: the other is told, as a forwarder that closes both would.
        ::shutdown(connection.client, SHUT_RDWR);
        ::shutdown(connection.upstream, SHUT_RDWR);
        return;
      }
    }
  }
}

}  // namespace croupier::testing

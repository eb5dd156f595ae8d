#include "src/transport/tcp_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/transport/frame.h"
#include "src/transport/tcp_server_connection.h"

namespace croupier {
namespace {

constexpr char kComponent[] = "transport";

absl::Status ValidateOptions(const DataServerOptions& options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("data server port ", options.port, " is out of range"));
  }
  if (options.max_connections == 0 || options.max_connections_per_peer == 0) {
    return absl::InvalidArgumentError(
        "data server max_connections and max_connections_per_peer must be at least 1");
  }
  if (options.max_request_bytes < frame::kRequestFixedBytes) {
    return absl::InvalidArgumentError(absl::StrCat("data server max_request_bytes ",
                                                   options.max_request_bytes, " is below ",
                                                   frame::kRequestFixedBytes));
  }
  if (options.handshake_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("data server handshake_timeout must be positive");
  }
  if (options.auth_token.size() > frame::kMaxTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("auth token longer than ", frame::kMaxTokenBytes, " bytes"));
  }
  return absl::OkStatus();
}

// The client's IP address, without the port: connections are counted per host.
std::string PeerIp(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  char host[INET6_ADDRSTRLEN] = {0};
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "unknown";
  if (addr.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, host, sizeof(host));
  } else if (addr.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, host, sizeof(host));
  }
  return host;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DataServer>> TcpDataServer::Start(const DataServerOptions& options,
                                                                 BatchSource* source) {
  RETURN_IF_ERROR(ValidateOptions(options));
  if (source == nullptr) return absl::InvalidArgumentError("data server needs a BatchSource");
  std::shared_ptr<const net::TlsContext> tls;
  if (options.tls.enabled()) {
    ASSIGN_OR_RETURN(tls, net::TlsContext::ForServer(options.tls));
  }
  ASSIGN_OR_RETURN(net::Socket listener, net::Listen(options.bind_address, options.port));
  ASSIGN_OR_RETURN(std::unique_ptr<net::WakeEvent> stop, net::WakeEvent::Create());
  std::unique_ptr<TcpDataServer> server(
      new TcpDataServer(options, source, std::move(listener), std::move(stop), std::move(tls)));
  server->acceptor_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  Log(LogLevel::kInfo, kComponent,
      absl::StrCat("data server listening on ", server->address(),
                   server->tls_ == nullptr                ? ""
                   : server->tls_->requires_client_cert() ? " (mutual TLS)"
                                                          : " (TLS)"));
  return server;
}

TcpDataServer::TcpDataServer(const DataServerOptions& options, BatchSource* source,
                             net::Socket listener, std::unique_ptr<net::WakeEvent> stop,
                             std::shared_ptr<const net::TlsContext> tls)
    : options_(options),
      source_(source),
      port_(net::LocalPort(listener.fd())),
      address_(net::JoinHostPort(options.bind_address, port_)),
      stop_(std::move(stop)),
      tls_(std::move(tls)),
      listener_(std::move(listener)) {}

TcpDataServer::~TcpDataServer() { Shutdown(); }

void TcpDataServer::Shutdown() {
  absl::call_once(shutdown_once_, [this] {
    stop_->Notify();
    if (acceptor_.joinable()) acceptor_.join();
    listener_.Close();
    std::vector<std::thread> threads;
    {
      absl::MutexLock lock(&mu_);
      for (auto& [id, running] : running_) threads.push_back(std::move(running.thread));
      running_.clear();
      per_ip_.clear();
      for (auto& thread : finished_) threads.push_back(std::move(thread));
      finished_.clear();
    }
    // Every connection thread polls stop_, or returns from its source within kSourceSlice.
    for (std::thread& thread : threads) thread.join();
    Log(LogLevel::kInfo, kComponent, absl::StrCat("data server ", address_, " stopped"));
  });
}

void TcpDataServer::AcceptLoop() {
  while (!stop_->notified()) {
    JoinFinished();
    pollfd fds[2] = {{listener_.fd(), POLLIN, 0}, {stop_->fd(), POLLIN, 0}};
    // The timeout only bounds how long ended connection threads wait to be joined.
    if (::poll(fds, 2, /*timeout_ms=*/1000) <= 0 || fds[1].revents != 0) continue;
    while (!stop_->notified()) {
      const int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        Admit(net::Socket(fd));
        continue;
      }
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        // Out of descriptors or memory: the pending connection stays queued, so back off rather
        // than spin on a listener that stays readable.
        Log(LogLevel::kWarning, kComponent,
            absl::StrCat("data server ", address_, " cannot accept: ", std::strerror(errno)));
        pollfd wake{stop_->fd(), POLLIN, 0};
        ::poll(&wake, 1, /*timeout_ms=*/100);
      }
      break;
    }
  }
}

void TcpDataServer::Admit(net::Socket socket) {
  net::ConfigureDataSocket(socket.fd());
  std::string ip = PeerIp(socket.fd());
  std::string refusal;
  {
    absl::MutexLock lock(&mu_);
    size_t& from_ip = per_ip_[ip];
    if (running_.size() < options_.max_connections && from_ip < options_.max_connections_per_peer) {
      ++from_ip;
      const uint64_t id = next_id_++;
      // Started under the lock so that the thread's Finished(id) finds its entry.
      running_.emplace(
          id,
          Running{
              .thread = std::thread([this, id, s = std::move(socket)]() mutable {
                ServerConnection(std::move(s), options_, source_, stop_.get(), tls_.get()).Run();
                Finished(id);
              }),
              .ip = std::move(ip)});
      return;
    }
    if (from_ip == 0) per_ip_.erase(ip);
    refusal = running_.size() >= options_.max_connections
                  ? absl::StrCat("the data server is at its limit of ", options_.max_connections,
                                 " connections")
                  : absl::StrCat("the data server is at its limit of ",
                                 options_.max_connections_per_peer, " connections from ", ip);
  }
  const std::string peer = net::PeerName(socket.fd());
  Log(LogLevel::kWarning, kComponent,
      absl::StrCat("data server ", address_, " refuses ", peer, ": ", refusal));
  // A plaintext client reads this in place of HELLO_OK; short waits keep the acceptor
  // responsive. A TLS client expects a TLS handshake first, which the acceptor does not do: it
  // sees the connection closed during the handshake, which is also UNAVAILABLE.
  if (tls_ == nullptr) {
    net::SendAll(socket.fd(), frame::EncodeError(absl::UnavailableError(refusal)),
                 net::IoWait{.deadline = absl::Now() + absl::Milliseconds(20)}, peer)
        .IgnoreError();
  }
  net::CloseGracefully(std::move(socket), absl::Milliseconds(20));
}

void TcpDataServer::JoinFinished() {
  std::vector<std::thread> done;
  {
    absl::MutexLock lock(&mu_);
    done.swap(finished_);
  }
  for (std::thread& thread : done) thread.join();
}

void TcpDataServer::Finished(uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = running_.find(id);
  if (it == running_.end()) return;  // Shutdown has taken the thread to join it
  auto from_ip = per_ip_.find(it->second.ip);
  if (from_ip != per_ip_.end() && --from_ip->second == 0) per_ip_.erase(from_ip);
  finished_.push_back(std::move(it->second.thread));
  running_.erase(it);
}

}  // namespace croupier

#include "src/transport/tcp_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/transport/serve_loop.h"
#include "src/transport/tcp_server_connection.h"

namespace croupier {
namespace {

absl::Status ValidateOptions(const DataServerOptions& options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("data server port ", options.port, " is out of range"));
  }
  if (options.max_connections == 0 || options.max_connections_per_peer == 0) {
    return absl::InvalidArgumentError(
        "data server max_connections and max_connections_per_peer must be at least 1");
  }
  return ValidateDataServerOptions(options);
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
  std::unique_ptr<TcpDataServer> server(
      new TcpDataServer(options, source, net::LocalPort(listener.fd()), std::move(tls)));
  TcpDataServer* const s = server.get();
  ASSIGN_OR_RETURN(
      server->loop_,
      ServeLoop::Start(
          std::move(listener),
          ServeLoopOptions{.name = absl::StrCat("data server ", server->address_),
                           .max_connections = options.max_connections,
                           .max_connections_per_peer = options.max_connections_per_peer,
                           .max_handshakes = options.max_handshakes,
                           .max_handshakes_per_peer =
                               std::min(kDefaultMaxHandshakesPerPeer, options.max_handshakes),
                           .send_refusal = server->tls_ == nullptr,
                           .admit =
                               [](int fd) {
                                 net::ConfigureDataSocket(fd);
                                 return PeerIp(fd);
                               },
                           .peer_name = [](int fd) { return net::PeerName(fd); },
                           .serve =
                               [s](net::Socket socket, ConnectionSlot* slot) {
                                 TcpServerConnection(std::move(socket), s->options_, s->source_,
                                                     slot, s->tls_.get())
                                     .Run();
                               }}));
  Log(LogLevel::kInfo, kTransportLog,
      absl::StrCat("data server listening on ", server->address(),
                   server->tls_ == nullptr                ? ""
                   : server->tls_->requires_client_cert() ? " (mutual TLS)"
                                                          : " (TLS)"));
  return server;
}

TcpDataServer::TcpDataServer(const DataServerOptions& options, BatchSource* source, int port,
                             std::shared_ptr<const net::TlsContext> tls)
    : options_(options),
      source_(source),
      port_(port),
      address_(net::JoinHostPort(options.bind_address, port_)),
      tls_(std::move(tls)) {}

TcpDataServer::~TcpDataServer() { Shutdown(); }

void TcpDataServer::Shutdown() {
  if (loop_ != nullptr) loop_->Shutdown();
}

}  // namespace croupier

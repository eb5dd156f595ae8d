// The TCP data server (protocol in frame.h): a ServeLoop (serve_loop.h) of TcpServerConnections.
#ifndef CROUPIER_SRC_TRANSPORT_TCP_SERVER_H_
#define CROUPIER_SRC_TRANSPORT_TCP_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "src/net/tls_context.h"
#include "src/transport/batch_source.h"
#include "src/transport/serve_loop.h"
#include "src/transport/transport.h"

namespace croupier {

// Thread-safe.
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
  TcpDataServer(const DataServerOptions& options, BatchSource* source, int port,
                std::shared_ptr<const net::TlsContext> tls);

  // Constant after construction.
  const DataServerOptions options_;
  BatchSource* const source_;
  const int port_;
  const std::string address_;
  const std::shared_ptr<const net::TlsContext> tls_;  // null: plaintext
  // Set once by Start; its connection threads use the members above.
  std::unique_ptr<ServeLoop> loop_;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_TRANSPORT_TCP_SERVER_H_

// The framed-TCP Transport: the factory that ties TcpDataServer and TcpDataClient together.
#include "absl/strings/string_view.h"
#include "src/transport/tcp_client.h"
#include "src/transport/tcp_server.h"
#include "src/transport/transport.h"

namespace croupier {
namespace {

// Thread-safe: stateless.
class TcpTransport final : public Transport {
 public:
  absl::string_view name() const override { return "tcp"; }
  absl::StatusOr<std::unique_ptr<DataServer>> StartServer(const DataServerOptions& options,
                                                          BatchSource* source) override {
    return TcpDataServer::Start(options, source);
  }
  absl::StatusOr<std::unique_ptr<DataClient>> Connect(const std::string& address,
                                                      const DataClientOptions& options) override {
    return TcpDataClient::Connect(address, options);
  }
};

}  // namespace

Transport* Transport::Tcp() {
  static TcpTransport* const transport = new TcpTransport();
  return transport;
}

}  // namespace croupier

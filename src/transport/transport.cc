// The two transports: each is a name and the functions that start its server and connect its
// client. Both singletons live here, so that a transport is one table row, not a class each.
#include "src/transport/transport.h"

#include <memory>
#include <string>

#include "src/transport/shm_transport.h"
#include "src/transport/tcp_client.h"
#include "src/transport/tcp_server.h"

namespace croupier {
namespace {

// Thread-safe: stateless.
class FunctionTransport final : public Transport {
 public:
  using StartFn = absl::StatusOr<std::unique_ptr<DataServer>> (*)(const DataServerOptions&,
                                                                  BatchSource*);
  using ConnectFn = absl::StatusOr<std::unique_ptr<DataClient>> (*)(const std::string&,
                                                                    const DataClientOptions&);
  FunctionTransport(absl::string_view name, StartFn start, ConnectFn connect)
      : name_(name), start_(start), connect_(connect) {}

  absl::string_view name() const override { return name_; }
  absl::StatusOr<std::unique_ptr<DataServer>> StartServer(const DataServerOptions& options,
                                                          BatchSource* source) override {
    return start_(options, source);
  }
  absl::StatusOr<std::unique_ptr<DataClient>> Connect(const std::string& address,
                                                      const DataClientOptions& options) override {
    return connect_(address, options);
  }

 private:
  const absl::string_view name_;
  const StartFn start_;
  const ConnectFn connect_;
};

}  // namespace

Transport* Transport::Tcp() {
  static Transport* const transport =
      new FunctionTransport("tcp", &TcpDataServer::Start, &ConnectTcpDataClient);
  return transport;
}

Transport* Transport::Shm() {
  static Transport* const transport =
      new FunctionTransport("shm", &StartShmDataServer, &ConnectShmDataClient);
  return transport;
}

}  // namespace croupier

// The shared-memory Transport: the factory that ties the shm server and client together.
#include "src/transport/shm_transport.h"

namespace croupier {
namespace {

// Thread-safe: stateless.
class ShmTransport final : public Transport {
 public:
  absl::string_view name() const override { return "shm"; }
  absl::StatusOr<std::unique_ptr<DataServer>> StartServer(const DataServerOptions& options,
                                                          BatchSource* source) override {
    return StartShmDataServer(options, source);
  }
  absl::StatusOr<std::unique_ptr<DataClient>> Connect(const std::string& address,
                                                      const DataClientOptions& options) override {
    return ConnectShmDataClient(address, options);
  }
};

}  // namespace

Transport* Transport::Shm() {
  static ShmTransport* const transport = new ShmTransport();
  return transport;
}

}  // namespace croupier

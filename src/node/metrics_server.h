// An HTTP server for Prometheus: GET /metrics answers with the text that `render` returns, in
// the text exposition format. Anything else is 404. It runs on its own thread.
#ifndef CROUPIER_SRC_NODE_METRICS_SERVER_H_
#define CROUPIER_SRC_NODE_METRICS_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}

namespace croupier {

// Thread-safe; `render` is called from the server's thread.
class MetricsServer {
 public:
  // Listens on bind_address:port (0: any free port). UNAVAILABLE naming the address if it cannot.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& bind_address,
                                                              int port,
                                                              std::function<std::string()> render);
  ~MetricsServer();  // Stop()

  int port() const { return port_; }
  // Stops listening and joins the thread. Idempotent.
  void Stop();

 private:
  MetricsServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_NODE_METRICS_SERVER_H_

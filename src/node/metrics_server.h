// A small HTTP server for the figures: GET /metrics answers with Prometheus' text exposition
// format, and the dispatcher adds its web page (/) and the JSON it draws from (/api/status).
// Each route's body is rendered per request; any other path is 404. It runs on its own thread.
#ifndef CROUPIER_SRC_NODE_METRICS_SERVER_H_
#define CROUPIER_SRC_NODE_METRICS_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}

namespace croupier {

// An answer to a GET whose route reads the query (HttpRoute::handle).
struct HttpReply {
  int status = 200;
  std::string body;
};
// A request's query parameters (the first value of each).
using HttpQuery = std::map<std::string, std::string>;

// One path the server answers GET on.
struct HttpRoute {
  std::string path;
  std::string content_type;
  std::function<std::string()> render;  // called from the server's thread
  // Instead of render, when set: the answer to a request with this query (from the server's
  // thread).
  std::function<HttpReply(const HttpQuery&)> handle = nullptr;
};

// Thread-safe.
class MetricsServer {
 public:
  // Listens on bind_address:port (0: any free port) and serves `routes`. UNAVAILABLE naming the
  // address if it cannot.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& bind_address,
                                                              int port,
                                                              std::vector<HttpRoute> routes);
  // Serves only GET /metrics, with the text that `render` returns.
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

// The content type of Prometheus' text exposition format 0.0.4.
inline constexpr char kPrometheusContentType[] = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace croupier

#endif  // CROUPIER_SRC_NODE_METRICS_SERVER_H_

#include "src/node/metrics_server.h"

#include <httplib.h>

#include "absl/strings/str_cat.h"

namespace croupier {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& bind_address,
                                                                    int port,
                                                                    std::vector<HttpRoute> routes) {
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->server_ = std::make_unique<httplib::Server>();
  for (HttpRoute& route : routes) {
    const std::string path = route.path;
    server->server_->Get(
        path, [route = std::move(route)](const httplib::Request& req, httplib::Response& res) {
          if (route.handle) {
            HttpQuery query;
            for (const auto& [key, value] : req.params) query.emplace(key, value);
            HttpReply reply = route.handle(query);
            res.status = reply.status;
            res.set_content(std::move(reply.body), route.content_type);
          } else {
            res.set_content(route.render(), route.content_type);
          }
          // The figures change every second: no cache may keep them.
          res.set_header("Cache-Control", "no-store");
        });
  }
  server->port_ = port == 0 ? server->server_->bind_to_any_port(bind_address)
                            : (server->server_->bind_to_port(bind_address, port) ? port : -1);
  if (server->port_ <= 0) {
    return absl::UnavailableError(
        absl::StrCat("the metrics server cannot listen on ", bind_address, ":", port));
  }
  httplib::Server* raw = server->server_.get();
  server->thread_ = std::thread([raw] { raw->listen_after_bind(); });
  return server;
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& bind_address, int port, std::function<std::string()> render) {
  return Start(bind_address, port,
               std::vector<HttpRoute>{{"/metrics", kPrometheusContentType, std::move(render)}});
}

void MetricsServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

MetricsServer::~MetricsServer() { Stop(); }

}  // namespace croupier

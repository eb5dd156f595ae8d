// The store's address, and a pool of kept-alive HTTP connections to it (cpp-httplib clients, one
// per request in flight).
#ifndef CROUPIER_SRC_S3_S3_CONNECTIONS_H_
#define CROUPIER_SRC_S3_S3_CONNECTIONS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "src/s3/s3_options.h"

namespace httplib {
class Client;
}

namespace croupier::s3 {

// An endpoint split into its parts. Plain value.
struct Endpoint {
  std::string scheme;  // "http" or "https"
  std::string host;
  int port = 0;
  // "host" or "host:port" when the port is not the scheme's default: the Host header.
  std::string HostHeader(const std::string& host_name) const;
};

// Parses "http(s)://host[:port]" (no path). INVALID_ARGUMENT naming the text otherwise.
absl::StatusOr<Endpoint> ParseEndpoint(const std::string& url);

// Thread-safe. A taken client is the taker's alone until it gives it back.
class S3Connections {
 public:
  S3Connections(const S3Options& options, Endpoint endpoint);
  ~S3Connections();

  const Endpoint& endpoint() const { return endpoint_; }
  // A client connected (or connecting on first use) to `host` on the endpoint's port.
  std::unique_ptr<httplib::Client> Take(const std::string& host) ABSL_LOCKS_EXCLUDED(mu_);
  // Keeps `client` for the next request to `host`; a client whose request failed is dropped
  // instead, so a broken connection is never reused.
  void GiveBack(const std::string& host, std::unique_ptr<httplib::Client> client)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const S3Options options_;
  const Endpoint endpoint_;

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::vector<std::unique_ptr<httplib::Client>>> idle_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace croupier::s3

#endif  // CROUPIER_SRC_S3_S3_CONNECTIONS_H_

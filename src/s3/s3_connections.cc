#include "src/s3/s3_connections.h"

#include <httplib.h>

#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace croupier::s3 {
namespace {

// Idle connections kept per host: more than the producer's reading threads gains nothing.
constexpr size_t kMaxIdlePerHost = 32;

std::chrono::microseconds Micros(absl::Duration d) {
  return std::chrono::microseconds(absl::ToInt64Microseconds(d));
}

}  // namespace

std::string Endpoint::HostHeader(const std::string& host_name) const {
  const bool default_port = (scheme == "http" && port == 80) || (scheme == "https" && port == 443);
  return default_port ? host_name : absl::StrCat(host_name, ":", port);
}

absl::StatusOr<Endpoint> ParseEndpoint(const std::string& url) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("the S3 endpoint '", url, "' ", why));
  };
  Endpoint e;
  absl::string_view rest = url;
  if (absl::ConsumePrefix(&rest, "http://")) {
    e.scheme = "http";
    e.port = 80;
  } else if (absl::ConsumePrefix(&rest, "https://")) {
    e.scheme = "https";
    e.port = 443;
  } else {
    return bad("must start with http:// or https://");
  }
  while (absl::ConsumeSuffix(&rest, "/")) {
  }
  if (rest.find('/') != absl::string_view::npos) return bad("must not have a path");
  const size_t colon = rest.rfind(':');
  if (colon != absl::string_view::npos && rest.find(']') == absl::string_view::npos) {
    if (!absl::SimpleAtoi(rest.substr(colon + 1), &e.port) || e.port <= 0 || e.port > 65535) {
      return bad("has a bad port");
    }
    rest = rest.substr(0, colon);
  }
  if (rest.empty()) return bad("names no host");
  e.host = std::string(rest);
  return e;
}

S3Connections::S3Connections(const S3Options& options, Endpoint endpoint)
    : options_(options), endpoint_(std::move(endpoint)) {}

S3Connections::~S3Connections() = default;

std::unique_ptr<httplib::Client> S3Connections::Take(const std::string& host) {
  {
    absl::MutexLock lock(&mu_);
    auto it = idle_.find(host);
    if (it != idle_.end() && !it->second.empty()) {
      std::unique_ptr<httplib::Client> client = std::move(it->second.back());
      it->second.pop_back();
      return client;
    }
  }
  auto client = std::make_unique<httplib::Client>(
      absl::StrCat(endpoint_.scheme, "://", host, ":", endpoint_.port));
  client->set_keep_alive(true);
  // Paths and queries are encoded once, by the signer, and must go out exactly as signed.
  client->set_url_encode(false);
  client->set_connection_timeout(Micros(options_.connect_timeout));
  client->set_read_timeout(Micros(options_.read_timeout));
  client->set_write_timeout(Micros(options_.read_timeout));
  if (endpoint_.scheme == "https") {
    client->enable_server_certificate_verification(true);
    if (!options_.ca_bundle.empty()) client->set_ca_cert_path(options_.ca_bundle.c_str());
  }
  return client;
}

void S3Connections::GiveBack(const std::string& host, std::unique_ptr<httplib::Client> client) {
  absl::MutexLock lock(&mu_);
  std::vector<std::unique_ptr<httplib::Client>>& idle = idle_[host];
  if (idle.size() < kMaxIdlePerHost) idle.push_back(std::move(client));
}

}  // namespace croupier::s3

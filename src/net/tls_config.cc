#include "src/net/tls_config.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace croupier {
namespace {

std::string EnvOr(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

absl::StatusOr<std::string> ReadPemFile(const std::string& path, absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read the TLS ", what, " file ", path, ": ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("the TLS ", what, " file ", path, " holds no PEM block"));
  }
  return text.str();
}

absl::Status CheckPair(const TlsConfig& config) {
  if (config.cert_file.empty() != config.key_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS needs both a certificate and a key (--tls-cert and --tls-key); only the ",
                     config.cert_file.empty() ? "key" : "certificate", " was given"));
  }
  return absl::OkStatus();
}

}  // namespace

TlsConfig ResolveTlsConfig(const TlsConfig& given) {
  if (given.enabled()) return given;
  return TlsConfig{
      .cert_file = EnvOr(kTlsCertEnv), .key_file = EnvOr(kTlsKeyEnv), .ca_file = EnvOr(kTlsCaEnv)};
}

absl::StatusOr<TlsPem> LoadTlsPem(const TlsConfig& config) {
  if (absl::Status pair = CheckPair(config); !pair.ok()) return pair;
  TlsPem pem;
  if (!config.cert_file.empty()) {
    absl::StatusOr<std::string> cert = ReadPemFile(config.cert_file, "certificate");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPemFile(config.key_file, "key");
    if (!key.ok()) return key.status();
    pem.cert = *std::move(cert);
    pem.key = *std::move(key);
  }
  if (!config.ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadPemFile(config.ca_file, "CA");
    if (!ca.ok()) return ca.status();
    pem.ca = *std::move(ca);
  }
  return pem;
}

}  // namespace croupier

// TLS settings for every connection croupier makes: the files named by --tls-cert, --tls-key,
// --tls-ca or $CROUPIER_TLS_CERT/_KEY/_CA, and their PEM contents (for gRPC's credentials on the
// control plane; the data plane's OpenSSL context loads them in tls_context.h). No OpenSSL here:
// the control plane needs only this file.
//
// The policy, the same on both planes:
//   - a server uses TLS when it has a certificate and a key; with a CA as well it requires every
//     client to present a certificate signed by that CA (mutual TLS);
//   - a client uses TLS when any of the three is given; it verifies the server's certificate
//     against the CA (the system's roots without one) and the host or IP address it dialled, and
//     presents its own certificate when it has one.
#ifndef CROUPIER_SRC_NET_TLS_CONFIG_H_
#define CROUPIER_SRC_NET_TLS_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"

namespace croupier {

// Environment variables read when no TLS file is given explicitly (ResolveTlsConfig).
inline constexpr char kTlsCertEnv[] = "CROUPIER_TLS_CERT";
inline constexpr char kTlsKeyEnv[] = "CROUPIER_TLS_KEY";
inline constexpr char kTlsCaEnv[] = "CROUPIER_TLS_CA";

// Paths of PEM files; all empty means plaintext. A value type (thread-compatible).
struct TlsConfig {
  std::string cert_file;  // this process's certificate chain
  std::string key_file;   // its private key
  std::string ca_file;    // the CA that peers' certificates must chain to
  bool enabled() const { return !cert_file.empty() || !key_file.empty() || !ca_file.empty(); }
};

// `given` when it names any file, else the three environment variables.
TlsConfig ResolveTlsConfig(const TlsConfig& given);

// The contents of the files (for gRPC). INVALID_ARGUMENT naming the file when one cannot be read
// or holds no PEM block, or when only one of cert and key is given. Reads the files on every call.
struct TlsPem {
  std::string cert;
  std::string key;
  std::string ca;
};
absl::StatusOr<TlsPem> LoadTlsPem(const TlsConfig& config);

}  // namespace croupier

#endif  // CROUPIER_SRC_NET_TLS_CONFIG_H_

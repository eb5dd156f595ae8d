// --tls-cert, --tls-key and --tls-ca, the same on every subcommand that talks to the network.
#ifndef CROUPIER_TOOLS_TLS_FLAGS_H_
#define CROUPIER_TOOLS_TLS_FLAGS_H_

#include "src/net/tls_config.h"
#include "tools/cli_args.h"

namespace croupier::cli {

// For the usage texts.
inline constexpr char kTlsUsage[] = R"(
TLS: --tls-cert FILE --tls-key FILE (PEM: this process's certificate and key) and --tls-ca FILE
(the CA that signed the peers' certificates), or CROUPIER_TLS_CERT, CROUPIER_TLS_KEY and
CROUPIER_TLS_CA when no flag is given. A server (dispatcher, producer data port) with a certificate
speaks only TLS, and with --tls-ca also requires client certificates signed by that CA (mutual
TLS). A client with any of them speaks TLS, checks the server's certificate against --tls-ca and
the address it dials, and presents its own certificate if it has one.
)";

// The TLS files the flags name (ResolveTlsConfig adds the environment).
inline TlsConfig TlsFromFlags(const Args& args) {
  TlsConfig tls;
  tls.cert_file = args.Get("tls-cert");
  tls.key_file = args.Get("tls-key");
  tls.ca_file = args.Get("tls-ca");
  return tls;
}

}  // namespace croupier::cli

#endif  // CROUPIER_TOOLS_TLS_FLAGS_H_

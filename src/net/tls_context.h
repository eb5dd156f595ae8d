// The OpenSSL context of one side of the data plane's TLS, built from a TlsConfig (tls_config.h,
// whose policy it implements): the certificate and key it presents, the CA it verifies peers
// against, and the protocol settings every connection of that side shares (tls_stream.h).
#ifndef CROUPIER_SRC_NET_TLS_CONTEXT_H_
#define CROUPIER_SRC_NET_TLS_CONTEXT_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "src/net/tls_config.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace croupier::net {

// An OpenSSL context for one side, built once and shared by all its connections. Thread-safe.
class TlsContext {
 public:
  // Needs cert and key; with a CA, client certificates are required. INVALID_ARGUMENT naming the
  // file and OpenSSL's reason when a file does not load or the key does not match.
  static absl::StatusOr<std::shared_ptr<const TlsContext>> ForServer(const TlsConfig& config);
  // Cert and key are optional (both or neither).
  static absl::StatusOr<std::shared_ptr<const TlsContext>> ForClient(const TlsConfig& config);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  SSL_CTX* get() const { return ctx_; }
  bool server() const { return server_; }
  bool requires_client_cert() const { return requires_client_cert_; }

 private:
  // The probe (tls_probe.h) builds a client context that verifies nothing.
  friend absl::Status ProbeTls(const std::string&, const TlsConfig&, absl::string_view,
                               absl::Duration);
  TlsContext(SSL_CTX* ctx, bool server, bool requires_client_cert)
      : ctx_(ctx), server_(server), requires_client_cert_(requires_client_cert) {}
  SSL_CTX* const ctx_;
  const bool server_;
  const bool requires_client_cert_;
};

}  // namespace croupier::net

#endif  // CROUPIER_SRC_NET_TLS_CONTEXT_H_

#include "src/net/tls_probe.h"

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/net/socket.h"
#include "src/net/tls_context.h"
#include "src/net/tls_stream.h"

namespace croupier::net {

absl::Status ProbeTls(const std::string& address, const TlsConfig& tls, absl::string_view peer,
                      absl::Duration timeout) {
  absl::StatusOr<std::pair<std::string, int>> host_port = SplitHostPort(address);
  if (!host_port.ok()) return absl::UnavailableError(host_port.status().message());
  const IoWait wait{.deadline = absl::Now() + timeout};
  absl::StatusOr<Socket> socket = Dial(address, wait);
  if (!socket.ok()) return absl::UnavailableError(socket.status().message());
  Stream stream(*std::move(socket));
  if (!tls.enabled()) {
    // Does the server speak TLS? A handshake that verifies nothing tells.
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == nullptr) return absl::UnavailableError("cannot create a TLS context");
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
    const TlsContext probe(ctx, /*server=*/false, false);
    if (stream.StartTls(probe, host_port->first, wait, peer).ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          peer,
          " speaks TLS and this client does not: give it --tls-ca (or CROUPIER_TLS_CA), and "
          "--tls-cert and --tls-key if the server requires client certificates"));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::shared_ptr<const TlsContext>> context = TlsContext::ForClient(tls);
  if (!context.ok()) return absl::FailedPreconditionError(context.status().message());
  absl::Status handshake = stream.StartTls(**context, host_port->first, wait, peer);
  if (absl::IsUnauthenticated(handshake) || absl::IsFailedPrecondition(handshake)) {
    return handshake;
  }
  if (!handshake.ok()) {
    // Closed at once: a plaintext server that read our ClientHello as garbage.
    if (absl::StrContains(handshake.message(), "closed")) {
      return absl::FailedPreconditionError(
          absl::StrCat(handshake.message(), " (does ", peer,
                       " speak TLS? start it with --tls-cert and --tls-key)"));
    }
    return absl::UnavailableError(handshake.message());
  }
  // TLS 1.3: a server refuses a client certificate after the client's side of the handshake.
  char byte;
  absl::StatusOr<size_t> got =
      stream.RecvSome(&byte, 1, IoWait{.deadline = absl::Now() + absl::Milliseconds(300)}, peer);
  if (!got.ok() &&
      (absl::IsUnauthenticated(got.status()) || absl::IsFailedPrecondition(got.status()))) {
    return got.status();
  }
  if (got.ok() && *got == 0) {
    // Some servers (gRPC's) refuse a client certificate by closing without an alert.
    std::string why = tls.cert_file.empty()
                          ? "this client presented no certificate (--tls-cert, --tls-key) and the "
                            "server may require one"
                          : absl::StrCat("it may have refused this client's certificate ",
                                         tls.cert_file, " (signed by a CA it does not trust?)");
    if (X509* own = SSL_CTX_get0_certificate((*context)->get());
        own != nullptr && X509_cmp_current_time(X509_get0_notAfter(own)) < 0) {
      why = absl::StrCat("this client's certificate ", tls.cert_file, " has expired");
    }
    return absl::UnauthenticatedError(
        absl::StrCat(peer, " closed the connection right after the TLS handshake: ", why));
  }
  return absl::OkStatus();
}

}  // namespace croupier::net

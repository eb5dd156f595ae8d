#include "src/net/tls_error.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cstring>
#include <initializer_list>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace croupier::net {
namespace {

// OpenSSL's queued errors, oldest first; clears the queue.
std::vector<unsigned long> TakeErrors() {
  std::vector<unsigned long> errors;
  while (const unsigned long e = ERR_get_error()) errors.push_back(e);
  return errors;
}

std::string Describe(const std::vector<unsigned long>& errors) {
  std::vector<std::string> parts;
  for (unsigned long e : errors) {
    const char* reason = ERR_reason_error_string(e);
    if (reason != nullptr) {
      parts.push_back(reason);
    } else {
      char buf[256];
      ERR_error_string_n(e, buf, sizeof(buf));
      parts.push_back(buf);
    }
  }
  return parts.empty() ? "unknown TLS error" : absl::StrJoin(parts, "; ");
}

bool HasReason(const std::vector<unsigned long>& errors, std::initializer_list<int> reasons) {
  for (unsigned long e : errors) {
    for (int r : reasons) {
      if (ERR_GET_REASON(e) == r) return true;
    }
  }
  return false;
}

// The peer refused our certificate (its alert) or sent none.
constexpr std::initializer_list<int> kCertificateRefused = {
    SSL_R_TLSV1_ALERT_UNKNOWN_CA,
    SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED,
    SSL_R_SSLV3_ALERT_BAD_CERTIFICATE,
    SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN,
    SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED,
    SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE,
    SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED,
    SSL_R_TLSV1_ALERT_ACCESS_DENIED,
    SSL_R_TLSV1_ALERT_DECRYPT_ERROR,
    SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE};
// What arrives when the peer speaks something other than TLS.
constexpr std::initializer_list<int> kNotTls = {
    SSL_R_WRONG_VERSION_NUMBER,   SSL_R_HTTP_REQUEST,           SSL_R_HTTPS_PROXY_REQUEST,
    SSL_R_PACKET_LENGTH_TOO_LONG, SSL_R_RECORD_LENGTH_MISMATCH, SSL_R_UNKNOWN_PROTOCOL,
    SSL_R_UNSUPPORTED_PROTOCOL};

}  // namespace

std::string TakeTlsErrorText() { return Describe(TakeErrors()); }

absl::Status TlsError(SSL* ssl, int ssl_error, int saved_errno, absl::string_view doing,
                      absl::string_view peer) {
  const std::vector<unsigned long> errors = TakeErrors();
  const std::string prefix = absl::StrCat(doing, " ", peer, " failed: ");
  if (ssl_error == SSL_ERROR_ZERO_RETURN ||
      (ssl_error == SSL_ERROR_SYSCALL && errors.empty() && saved_errno == 0) ||
      HasReason(errors, {SSL_R_UNEXPECTED_EOF_WHILE_READING})) {
    const bool handshake = !SSL_is_init_finished(ssl);
    return absl::UnavailableError(absl::StrCat(
        prefix, "the connection was closed",
        handshake ? " during the TLS handshake (a server without TLS closes so, as does one at its "
                    "connection limit)"
                  : ""));
  }
  if (ssl_error == SSL_ERROR_SYSCALL && errors.empty()) {
    return absl::UnavailableError(absl::StrCat(prefix, std::strerror(saved_errno)));
  }
  const long verify = SSL_get_verify_result(ssl);
  if (HasReason(errors, {SSL_R_CERTIFICATE_VERIFY_FAILED}) && verify != X509_V_OK) {
    return absl::UnauthenticatedError(absl::StrCat(
        prefix, "its certificate does not verify: ", X509_verify_cert_error_string(verify)));
  }
  if (HasReason(errors, {SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE})) {
    return absl::UnauthenticatedError(absl::StrCat(
        prefix, "it presented no certificate, and this server requires one (mutual TLS)"));
  }
  if (HasReason(errors, kCertificateRefused)) {
    return absl::UnauthenticatedError(
        absl::StrCat(prefix, "it refused this side's certificate: ", Describe(errors)));
  }
  if (HasReason(errors, kNotTls)) {
    return absl::FailedPreconditionError(
        absl::StrCat(prefix, "it does not speak TLS (", Describe(errors), ")"));
  }
  return absl::UnavailableError(absl::StrCat(prefix, Describe(errors)));
}

}  // namespace croupier::net

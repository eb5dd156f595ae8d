#include "src/net/tls_context.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "absl/strings/str_cat.h"
#include "src/net/tls_error.h"

namespace croupier::net {
namespace {

absl::StatusOr<SSL_CTX*> NewContext(const TlsConfig& config, bool server) {
  // Each file is read once here, so that a missing one is named (OpenSSL's own message would not);
  // this also refuses a certificate without a key or a key without a certificate.
  absl::StatusOr<TlsPem> pem = LoadTlsPem(config);
  if (!pem.ok()) return pem.status();
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (ctx == nullptr) return absl::InternalError("cannot create a TLS context");
  auto fail = [ctx](absl::string_view what) {
    const std::string why = TakeTlsErrorText();
    SSL_CTX_free(ctx);
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", why));
  };
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // Partial writes let SendAll advance through a batch; released buffers keep an idle
  // connection's memory small; an EOF without close_notify (a peer that crashed) is a plain
  // close, as on a plaintext connection: the framing detects truncation.
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
  if (!config.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, config.cert_file.c_str()) != 1) {
      return fail(absl::StrCat("cannot load the TLS certificate ", config.cert_file));
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, config.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      return fail(absl::StrCat("cannot load the TLS key ", config.key_file));
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
      return fail(absl::StrCat("the TLS key ", config.key_file, " does not match the certificate ",
                               config.cert_file));
    }
  }
  if (!config.ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, config.ca_file.c_str(), nullptr) != 1) {
      return fail(absl::StrCat("cannot load the TLS CA ", config.ca_file));
    }
  } else if (!server && SSL_CTX_set_default_verify_paths(ctx) != 1) {
    return fail("cannot load the system's CA certificates");
  }
  if (server) {
    // No session tickets: a client's idle pooled connection must stay silent (PeerHungUpOrSpoke).
    SSL_CTX_set_num_tickets(ctx, 0);
    SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    if (!config.ca_file.empty()) {
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    }
  } else {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  }
  return ctx;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const TlsContext>> TlsContext::ForServer(const TlsConfig& config) {
  if (config.cert_file.empty()) {
    return absl::InvalidArgumentError(
        "a TLS server needs a certificate and a key (--tls-cert and --tls-key)");
  }
  absl::StatusOr<SSL_CTX*> ctx = NewContext(config, /*server=*/true);
  if (!ctx.ok()) return ctx.status();
  return std::shared_ptr<const TlsContext>(
      new TlsContext(*ctx, /*server=*/true, !config.ca_file.empty()));
}

absl::StatusOr<std::shared_ptr<const TlsContext>> TlsContext::ForClient(const TlsConfig& config) {
  absl::StatusOr<SSL_CTX*> ctx = NewContext(config, /*server=*/false);
  if (!ctx.ok()) return ctx.status();
  return std::shared_ptr<const TlsContext>(new TlsContext(*ctx, /*server=*/false, false));
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

}  // namespace croupier::net

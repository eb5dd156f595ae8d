// TLS for every connection croupier makes: the settings (files named by --tls-cert, --tls-key,
// --tls-ca or $CROUPIER_TLS_CERT/_KEY/_CA), their PEM contents for gRPC's credentials on the
// control plane, and for the data plane an OpenSSL context and a Stream: a connected socket,
// plaintext or TLS, with the same bounded, cancellable I/O calls as socket.h.
//
// The policy, the same on both planes:
//   - a server uses TLS when it has a certificate and a key; with a CA as well it requires every
//     client to present a certificate signed by that CA (mutual TLS);
//   - a client uses TLS when any of the three is given; it verifies the server's certificate
//     against the CA (the system's roots without one) and the host or IP address it dialled, and
//     presents its own certificate when it has one.
//
// Handshake errors name the peer and the cause: UNAUTHENTICATED for a certificate that does not
// verify (the peer's or, as the peer's alert says, ours), UNAVAILABLE for a connection closed or
// timed out during the handshake, FAILED_PRECONDITION for a peer that does not speak TLS.
#ifndef CROUPIER_SRC_TRANSPORT_TLS_H_
#define CROUPIER_SRC_TRANSPORT_TLS_H_

#include <sys/uio.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "src/transport/socket.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace croupier {

// Environment variables read when no TLS file is given explicitly (ResolveTlsConfig).
inline constexpr char kTlsCertEnv[] = "CROUPIER_TLS_CERT";
inline constexpr char kTlsKeyEnv[] = "CROUPIER_TLS_KEY";
inline constexpr char kTlsCaEnv[] = "CROUPIER_TLS_CA";

// Paths of PEM files; all empty means plaintext.
struct TlsConfig {
  std::string cert_file;  // this process's certificate chain
  std::string key_file;   // its private key
  std::string ca_file;    // the CA that peers' certificates must chain to
  bool enabled() const { return !cert_file.empty() || !key_file.empty() || !ca_file.empty(); }
};

// `given` when it names any file, else the three environment variables.
TlsConfig ResolveTlsConfig(const TlsConfig& given);

// The contents of the files (for gRPC). INVALID_ARGUMENT naming the file when one cannot be read
// or holds no PEM block, or when only one of cert and key is given.
struct TlsPem {
  std::string cert;
  std::string key;
  std::string ca;
};
absl::StatusOr<TlsPem> LoadTlsPem(const TlsConfig& config);

namespace net {

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
  friend absl::Status ProbeTls(const std::string&, const TlsConfig&, absl::string_view,
                               absl::Duration);
  TlsContext(SSL_CTX* ctx, bool server, bool requires_client_cert)
      : ctx_(ctx), server_(server), requires_client_cert_(requires_client_cert) {}
  SSL_CTX* const ctx_;
  const bool server_;
  const bool requires_client_cert_;
};

// A connected socket, plaintext until StartTls succeeds. Move-only; thread-compatible (one
// thread does I/O at a time; `wait.wake` may be fired from anywhere).
class Stream {
 public:
  Stream() = default;
  explicit Stream(Socket socket) : socket_(std::move(socket)) {}
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  int fd() const { return socket_.fd(); }
  bool valid() const { return socket_.valid(); }
  bool tls() const { return ssl_ != nullptr; }

  // Runs the TLS handshake as client (verifying that the server's certificate names `host`) or
  // as server (context.server()), by `wait`. Errors as in the file comment, naming `peer`.
  absl::Status StartTls(const TlsContext& context, absl::string_view host, const IoWait& wait,
                        absl::string_view peer);

  // As net::SendAll, RecvSome, RecvAll, PeerHungUpOrSpoke over this stream.
  absl::Status SendAll(absl::Span<iovec> iov, const IoWait& wait, absl::string_view peer);
  absl::Status SendAll(absl::string_view bytes, const IoWait& wait, absl::string_view peer);
  absl::StatusOr<size_t> RecvSome(char* dst, size_t n, const IoWait& wait, absl::string_view peer);
  absl::Status RecvAll(char* dst, size_t n, const IoWait& wait, absl::string_view peer);
  bool PeerHungUpOrSpoke();
  // As net::PeerHungUp (TLS's close_notify comes before the close it announces).
  bool PeerHungUp() { return net::PeerHungUp(fd()); }

  // Sends TLS's close_notify (best effort, briefly), then as net::CloseGracefully.
  static void CloseGracefully(Stream stream, absl::Duration linger);

 private:
  void FreeTls();

  Socket socket_;
  SSL* ssl_ = nullptr;
};

// Explains why a TLS or plaintext connection to `address` fails, by trying a TLS handshake of its
// own (for a client library such as gRPC's whose errors do not say). `peer` names the server in
// messages, e.g. "dispatcher 10.0.0.1:5050". Returns UNAUTHENTICATED or FAILED_PRECONDITION with
// the cause (a certificate refused either way; a server that speaks TLS to a plaintext client, or
// not TLS to a TLS one), OK when the handshake agrees with `tls`, UNAVAILABLE when the address
// cannot be reached (nothing learnt). Bounded by `timeout`.
absl::Status ProbeTls(const std::string& address, const TlsConfig& tls, absl::string_view peer,
                      absl::Duration timeout);

// Reads the first bytes a client sent without consuming them: true when they begin a TLS record
// (a ClientHello), false for anything else. UNAVAILABLE/DEADLINE_EXCEEDED/CANCELLED as RecvSome
// when nothing arrives.
absl::StatusOr<bool> PeekIsTls(int fd, const IoWait& wait, absl::string_view peer);

}  // namespace net
}  // namespace croupier

#endif  // CROUPIER_SRC_TRANSPORT_TLS_H_

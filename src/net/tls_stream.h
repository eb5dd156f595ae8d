// The data plane's byte stream: a connected socket (socket.h), plaintext or TLS, with the same
// bounded, cancellable I/O calls as socket.h. TLS runs over the descriptor through a BIO of our
// own (sends with MSG_NOSIGNAL), with the OpenSSL context of its side (tls_context.h).
//
// Handshake errors name the peer and the cause, classified as in tls_error.h: UNAUTHENTICATED for
// a certificate that does not verify (the peer's or, as the peer's alert says, ours), UNAVAILABLE
// for a connection closed or timed out during the handshake, FAILED_PRECONDITION for a peer that
// does not speak TLS.
#ifndef CROUPIER_SRC_NET_TLS_STREAM_H_
#define CROUPIER_SRC_NET_TLS_STREAM_H_

#include <sys/uio.h>

#include <cstddef>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "src/net/socket.h"
#include "src/net/tls_context.h"

typedef struct ssl_st SSL;

namespace croupier::net {

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

// Reads the first bytes a client sent without consuming them: true when they begin a TLS record
// (a ClientHello), false for anything else. UNAVAILABLE/DEADLINE_EXCEEDED/CANCELLED as RecvSome
// when nothing arrives.
absl::StatusOr<bool> PeekIsTls(int fd, const IoWait& wait, absl::string_view peer);

}  // namespace croupier::net

#endif  // CROUPIER_SRC_NET_TLS_STREAM_H_

#include "src/net/tls_stream.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/net/tls_error.h"

namespace croupier::net {
namespace {

// A socket BIO that sends with MSG_NOSIGNAL: a peer gone must be an error, not a SIGPIPE.
int BioWrite(BIO* bio, const char* data, int length) {
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(bio)));
  BIO_clear_retry_flags(bio);
  const ssize_t n = ::send(fd, data, static_cast<size_t>(length), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    BIO_set_retry_write(bio);
  }
  return static_cast<int>(n);
}

int BioRead(BIO* bio, char* data, int length) {
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(bio)));
  BIO_clear_retry_flags(bio);
  const ssize_t n = ::recv(fd, data, static_cast<size_t>(length), MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    BIO_set_retry_read(bio);
  }
  return static_cast<int>(n);
}

long BioCtrl(BIO*, int cmd, long, void*) { return cmd == BIO_CTRL_FLUSH ? 1 : 0; }

int BioCreate(BIO* bio) {
  BIO_set_init(bio, 1);
  return 1;
}

const BIO_METHOD* SocketBioMethod() {
  static const BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "croupier socket");
    BIO_meth_set_write(m, BioWrite);
    BIO_meth_set_read(m, BioRead);
    BIO_meth_set_ctrl(m, BioCtrl);
    BIO_meth_set_create(m, BioCreate);
    return m;
  }();
  return method;
}

bool IsIpAddress(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return ::inet_pton(AF_INET, host.c_str(), buf) == 1 ||
         ::inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

}  // namespace

Stream::~Stream() { FreeTls(); }

Stream::Stream(Stream&& other) noexcept : socket_(std::move(other.socket_)), ssl_(other.ssl_) {
  other.ssl_ = nullptr;
}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    FreeTls();
    socket_ = std::move(other.socket_);
    ssl_ = other.ssl_;
    other.ssl_ = nullptr;
  }
  return *this;
}

void Stream::FreeTls() {
  if (ssl_ == nullptr) return;
  // Say goodbye (close_notify) when the socket has room for it: never waits.
  if (SSL_is_init_finished(ssl_)) SSL_shutdown(ssl_);
  ERR_clear_error();
  SSL_free(ssl_);  // the BIO does not own the descriptor
  ssl_ = nullptr;
}

absl::Status Stream::StartTls(const TlsContext& context, absl::string_view host, const IoWait& wait,
                              absl::string_view peer) {
  ERR_clear_error();
  SSL* ssl = SSL_new(context.get());
  BIO* bio = ssl != nullptr ? BIO_new(SocketBioMethod()) : nullptr;
  if (bio == nullptr) {
    if (ssl != nullptr) SSL_free(ssl);
    return absl::InternalError(absl::StrCat("cannot start TLS with ", peer, ": out of memory"));
  }
  BIO_set_data(bio, reinterpret_cast<void*>(static_cast<intptr_t>(socket_.fd())));
  SSL_set_bio(ssl, bio, bio);
  FreeTls();
  ssl_ = ssl;
  if (context.server()) {
    SSL_set_accept_state(ssl);
  } else {
    SSL_set_connect_state(ssl);
    const std::string name(host);
    if (IsIpAddress(name)) {
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str());
    } else {
      SSL_set_tlsext_host_name(ssl, name.c_str());
      SSL_set1_host(ssl, name.c_str());
    }
  }
  while (true) {
    ERR_clear_error();
    errno = 0;
    const int r = SSL_do_handshake(ssl);
    if (r == 1) return absl::OkStatus();
    const int saved_errno = errno;
    const int error = SSL_get_error(ssl, r);
    if (error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE) {
      return TlsError(ssl, error, saved_errno, "TLS handshake with", peer);
    }
    absl::Status ready = WaitReady(fd(), error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, wait,
                                   absl::Now(), "in the TLS handshake with", peer);
    if (absl::IsDeadlineExceeded(ready)) {
      return absl::UnavailableError(
          absl::StrCat("TLS handshake with ", peer, " failed: timed out"));
    }
    if (!ready.ok()) return ready;
  }
}

absl::Status Stream::SendAll(absl::Span<iovec> iov, const IoWait& wait, absl::string_view peer) {
  if (ssl_ == nullptr) return net::SendAll(fd(), iov, wait, peer);
  absl::Time progress = absl::Now();
  for (iovec& part : iov) {
    while (part.iov_len > 0) {
      if (wait.wake != nullptr && wait.wake->notified()) {
        return absl::CancelledError(absl::StrCat("cancelled while sending to ", peer));
      }
      ERR_clear_error();
      errno = 0;
      size_t written = 0;
      const int r = SSL_write_ex(ssl_, part.iov_base, part.iov_len, &written);
      if (r == 1) {
        part.iov_base = static_cast<char*>(part.iov_base) + written;
        part.iov_len -= written;
        progress = absl::Now();
        continue;
      }
      const int saved_errno = errno;
      const int error = SSL_get_error(ssl_, r);
      if (error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE) {
        return TlsError(ssl_, error, saved_errno, "sending to", peer);
      }
      absl::Status ready = WaitReady(fd(), error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, wait,
                                     progress, "sending to", peer);
      if (!ready.ok()) return ready;
    }
  }
  return absl::OkStatus();
}

absl::Status Stream::SendAll(absl::string_view bytes, const IoWait& wait, absl::string_view peer) {
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  return SendAll(absl::MakeSpan(&iov, 1), wait, peer);
}

absl::StatusOr<size_t> Stream::RecvSome(char* dst, size_t n, const IoWait& wait,
                                        absl::string_view peer) {
  if (ssl_ == nullptr) return net::RecvSome(fd(), dst, n, wait, peer);
  const absl::Time progress = absl::Now();
  while (true) {
    if (wait.wake != nullptr && wait.wake->notified()) {
      return absl::CancelledError(absl::StrCat("cancelled while receiving from ", peer));
    }
    ERR_clear_error();
    errno = 0;
    size_t got = 0;
    const int r = SSL_read_ex(ssl_, dst, n, &got);
    if (r == 1) return got;
    const int saved_errno = errno;
    const int error = SSL_get_error(ssl_, r);
    // A close with or without close_notify (a peer that crashed): the framing notices when it
    // cuts a frame short.
    if (error == SSL_ERROR_ZERO_RETURN ||
        (error == SSL_ERROR_SYSCALL && saved_errno == 0 && ERR_peek_error() == 0)) {
      return 0;
    }
    if (error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE) {
      return TlsError(ssl_, error, saved_errno, "receiving from", peer);
    }
    absl::Status ready = WaitReady(fd(), error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, wait,
                                   progress, "receiving from", peer);
    if (!ready.ok()) return ready;
  }
}

absl::Status Stream::RecvAll(char* dst, size_t n, const IoWait& wait, absl::string_view peer) {
  if (ssl_ == nullptr) return net::RecvAll(fd(), dst, n, wait, peer);
  return net::ReadFull(
      dst, 0, n, [&](char* p, size_t room) { return RecvSome(p, room, wait, peer); }, peer);
}

bool Stream::PeerHungUpOrSpoke() {
  if (ssl_ == nullptr) return net::PeerHungUpOrSpoke(fd());
  if (SSL_pending(ssl_) > 0) return true;
  if (!net::PeerHungUpOrSpoke(fd())) return false;
  // Something arrived: application data, a close, or only TLS's own messages (which do not
  // count: the connection is still idle and in step).
  ERR_clear_error();
  char byte;
  size_t got = 0;
  if (SSL_peek_ex(ssl_, &byte, 1, &got) == 1) return true;
  const int error = SSL_get_error(ssl_, 0);
  ERR_clear_error();
  return error != SSL_ERROR_WANT_READ;
}

void Stream::CloseGracefully(Stream stream, absl::Duration linger) {
  stream.FreeTls();  // sends close_notify
  net::CloseGracefully(std::move(stream.socket_), linger);
}

absl::StatusOr<bool> PeekIsTls(int fd, const IoWait& wait, absl::string_view peer) {
  const absl::Time progress = absl::Now();
  while (true) {
    unsigned char first[3];
    const ssize_t got = ::recv(fd, first, sizeof(first), MSG_PEEK | MSG_DONTWAIT);
    if (got == 0) {
      return absl::UnavailableError(absl::StrCat("connection closed by ", peer, " before a byte"));
    }
    // A TLS record of type handshake (22), version 3.x.
    if (got >= 2) return first[0] == 0x16 && first[1] == 0x03;
    if (got == 1 && first[0] != 0x16) return false;
    if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return absl::UnavailableError(
          absl::StrCat("receiving from ", peer, ": ", std::strerror(errno)));
    }
    absl::Status ready = WaitReady(fd, POLLIN, wait, progress, "receiving from", peer);
    if (!ready.ok()) return ready;
    if (got == 1) {
      // One byte so far: wait a moment for the second rather than spin on a readable socket.
      pollfd p{fd, POLLIN, 0};
      ::poll(&p, 1, 10);
    }
  }
}

}  // namespace croupier::net

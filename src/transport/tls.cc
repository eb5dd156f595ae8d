#include "src/transport/tls.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

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

// OpenSSL's queued errors, oldest first, as their reason strings; clears the queue.
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

// The error of a failed SSL call, classified as in tls.h. `doing` is e.g. "TLS handshake with".
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

namespace net {
namespace {

absl::StatusOr<SSL_CTX*> NewContext(const TlsConfig& config, bool server) {
  if (absl::Status pair = CheckPair(config); !pair.ok()) return pair;
  // Each file is read once here, so that a missing one is named (OpenSSL's own message would not).
  absl::StatusOr<TlsPem> pem = LoadTlsPem(config);
  if (!pem.ok()) return pem.status();
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (ctx == nullptr) return absl::InternalError("cannot create a TLS context");
  auto fail = [ctx](absl::string_view what) {
    const std::string why = Describe(TakeErrors());
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

}  // namespace net
}  // namespace croupier

// The socket primitives of every TCP connection croupier makes itself (the data plane's, and the
// control plane's TLS probe, tls_probe.h). Every socket is non-blocking and every wait is a poll()
// bounded by a deadline or a stall timeout, and woken by a WakeEvent, so that no call can hang
// and cancelling or shutting down is prompt.
//
// Errors name the peer: UNAVAILABLE (refused, reset, closed by the peer), DEADLINE_EXCEEDED (the
// wait ran out), CANCELLED (the WakeEvent fired).
#ifndef CROUPIER_SRC_NET_SOCKET_H_
#define CROUPIER_SRC_NET_SOCKET_H_

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace croupier::net {

// Owns a file descriptor. Move-only; thread-compatible.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { Close(); }
  Socket(Socket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Close();

 private:
  int fd_ = -1;
};

// A one-way wake-up for pollers: after Notify(), every wait that was given this event returns
// CANCELLED at once and every later one immediately. Thread-safe.
class WakeEvent {
 public:
  // INTERNAL when no eventfd can be made (out of descriptors).
  static absl::StatusOr<std::unique_ptr<WakeEvent>> Create();
  ~WakeEvent();
  WakeEvent(const WakeEvent&) = delete;
  WakeEvent& operator=(const WakeEvent&) = delete;

  void Notify();
  bool notified() const { return notified_.load(std::memory_order_acquire); }
  int fd() const { return fd_; }

 private:
  explicit WakeEvent(int fd) : fd_(fd) {}
  const int fd_;
  std::atomic<bool> notified_{false};
};

// How long one I/O call may wait. Each poll waits until the earlier of `deadline` and `stall`
// after the last progress; at least one of them must be finite. `wake` may be null.
struct IoWait {
  absl::Time deadline = absl::InfiniteFuture();
  absl::Duration stall = absl::InfiniteDuration();
  const WakeEvent* wake = nullptr;
};

// "host:port" split; IPv6 hosts in brackets ("[::1]:5051"). INVALID_ARGUMENT otherwise.
absl::StatusOr<std::pair<std::string, int>> SplitHostPort(absl::string_view address);
// "host:port", bracketing IPv6 hosts.
std::string JoinHostPort(absl::string_view host, int port);

// A listening socket on host:port (port 0: any free port). UNAVAILABLE naming the address when it
// cannot be bound.
absl::StatusOr<Socket> Listen(const std::string& host, int port);
// The local port of a bound socket, or -1.
int LocalPort(int fd);
// The remote "ip:port" of a connected socket, or "unknown peer".
std::string PeerName(int fd);

// Connects to `address` ("host:port") by `wait.deadline`, trying every address the host resolves
// to. UNAVAILABLE "cannot connect to data server <address>: <reason>" on failure.
absl::StatusOr<Socket> Dial(const std::string& address, const IoWait& wait);

// Makes an accepted or dialled socket ready for bulk data: TCP_NODELAY (requests and responses
// are whole frames; Nagle would only delay them), keepalive (finds dead peers on idle pooled
// connections), non-blocking and close-on-exec.
void ConfigureDataSocket(int fd);

// Sends every byte of `iov` (which is consumed: entries are advanced in place), with one
// sendmsg per socket-buffer's worth and MSG_NOSIGNAL so that a closed peer is an error, not a
// SIGPIPE.
absl::Status SendAll(int fd, absl::Span<iovec> iov, const IoWait& wait, absl::string_view peer);
absl::Status SendAll(int fd, absl::string_view bytes, const IoWait& wait, absl::string_view peer);

// Reads between 1 and `room` bytes into `dst`; 0 means the peer closed the stream cleanly.
using ReadSomeFn = absl::FunctionRef<absl::StatusOr<size_t>(char* dst, size_t room)>;
// Reads dst[done, n) with `read` until all n bytes are there: the one loop behind every "receive
// exactly n bytes" of the data plane. UNAVAILABLE naming `peer` and how many of the n bytes came
// when the peer closes first; read's own errors as they are.
absl::Status ReadFull(char* dst, size_t done, size_t n, ReadSomeFn read, absl::string_view peer);

// Receives exactly n bytes into dst. UNAVAILABLE when the peer closes first.
absl::Status RecvAll(int fd, char* dst, size_t n, const IoWait& wait, absl::string_view peer);
// Receives between 1 and n bytes; 0 means the peer closed the connection cleanly.
absl::StatusOr<size_t> RecvSome(int fd, char* dst, size_t n, const IoWait& wait,
                                absl::string_view peer);

// Waits until `fd` is ready for poll `events` (readiness includes errors and hang-ups), the wait
// runs out (DEADLINE_EXCEEDED "timed out <doing> <peer>", counting the stall from `progress`), or
// the wake event fires (CANCELLED). For I/O layered on the socket (tls_stream.h).
absl::Status WaitReady(int fd, short events, const IoWait& wait, absl::Time progress,
                       absl::string_view doing, absl::string_view peer);

// True when the peer has closed, reset or sent something: a pooled connection that is not idle
// and quiet any more. Does not wait.
bool PeerHungUpOrSpoke(int fd);
// True when the peer has closed its side or reset the connection, whether or not it sent
// something first (a server with pipelined requests waiting). Does not wait.
bool PeerHungUp(int fd);

// Half-closes, discards what the peer still sends for up to `linger` (so that closing with
// unread input does not turn into a reset that destroys the last frame we sent), then closes.
void CloseGracefully(Socket socket, absl::Duration linger);

// The soft limit of this process's open descriptors (RLIMIT_NOFILE) before and after
// RaiseOpenFileLimit.
struct OpenFileLimit {
  uint64_t before = 0;
  uint64_t after = 0;  // the hard limit, unless the hard limit is unlimited (then 1,048,576)
};
// Raises the soft limit of open descriptors to the hard limit, so that a flood of connections
// meets the hard limit rather than the common soft default of 1,024 (a server out of descriptors
// cannot accept even the connection that would ask it how it is). INTERNAL naming the cause when
// the limit cannot be read or set. Not thread-safe with other changes of the limit.
absl::StatusOr<OpenFileLimit> RaiseOpenFileLimit();

}  // namespace croupier::net

#endif  // CROUPIER_SRC_NET_SOCKET_H_

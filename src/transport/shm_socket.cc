#include "src/transport/shm_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/common/status_macros.h"

namespace croupier::net {
namespace {

// Fills `addr` with the abstract name `name` ("@..." -> "\0...") and returns its length.
absl::StatusOr<socklen_t> AbstractAddress(const std::string& name, sockaddr_un* addr) {
  if (name.size() < 2 || name[0] != '@') {
    return absl::InvalidArgumentError(
        absl::StrCat("shared-memory address '", name, "' is not an abstract socket name (@...)"));
  }
  if (name.size() > sizeof(addr->sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("shared-memory address '", name, "' is longer than ",
                                                   sizeof(addr->sun_path), " bytes"));
  }
  *addr = sockaddr_un{};
  addr->sun_family = AF_UNIX;
  addr->sun_path[0] = '\0';
  std::memcpy(addr->sun_path + 1, name.data() + 1, name.size() - 1);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
}

}  // namespace

absl::StatusOr<Socket> ListenUnix(const std::string& name) {
  sockaddr_un addr;
  auto len = AbstractAddress(name, &addr);
  if (!len.ok()) return len.status();
  Socket s(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!s.valid()) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", name, ": ", std::strerror(errno)));
  }
  if (::bind(s.fd(), reinterpret_cast<sockaddr*>(&addr), *len) != 0 ||
      ::listen(s.fd(), SOMAXCONN) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", name, ": ", std::strerror(errno)));
  }
  return s;
}

absl::StatusOr<Socket> DialUnix(const std::string& name, const IoWait& wait) {
  const std::string what = absl::StrCat("cannot connect to data server ", name);
  sockaddr_un addr;
  auto len = AbstractAddress(name, &addr);
  if (!len.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", len.status().message()));
  while (true) {
    if (wait.wake != nullptr && wait.wake->notified()) {
      return absl::CancelledError(absl::StrCat("cancelled while connecting to ", name));
    }
    Socket s(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!s.valid()) return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
    if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&addr), *len) == 0) return s;
    // A Unix connect completes at once; EAGAIN means the listener's backlog is full: retry
    // briefly until the deadline, as a TCP SYN would be retried.
    if (errno != EAGAIN && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
    }
    if (absl::Now() >= wait.deadline) {
      return absl::UnavailableError(absl::StrCat(what, ": its backlog stayed full"));
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
}

std::string UnixPeerName(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return "unknown peer";
  return absl::StrCat("pid ", cred.pid);
}

absl::Status SendAllWithFd(int fd, absl::string_view bytes, int fd_to_pass, const IoWait& wait,
                           absl::string_view peer) {
  return SendAllWithFds(fd, bytes, absl::MakeConstSpan(&fd_to_pass, 1), wait, peer);
}

absl::Status SendAllWithFds(int fd, absl::string_view bytes, absl::Span<const int> fds_to_pass,
                            const IoWait& wait, absl::string_view peer) {
  if (fds_to_pass.size() > kMaxFdsPerMessage) {
    return absl::InternalError(absl::StrCat(fds_to_pass.size(), " descriptors in one message"));
  }
  if (fds_to_pass.empty()) return SendAll(fd, bytes, wait, peer);
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds_to_pass.size());
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds_to_pass.size());
  std::memcpy(CMSG_DATA(cmsg), fds_to_pass.data(), sizeof(int) * fds_to_pass.size());
  while (true) {
    if (wait.wake != nullptr && wait.wake->notified()) {
      return absl::CancelledError(absl::StrCat("cancelled while sending to ", peer));
    }
    const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      // The descriptors went with the first bytes; the rest is plain.
      return SendAll(fd, bytes.substr(static_cast<size_t>(n)), wait, peer);
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      return absl::UnavailableError(absl::StrCat("sending to ", peer, ": ", std::strerror(errno)));
    }
    // The socket buffer is full (rare: frames here are small): wait for room.
    RETURN_IF_ERROR(WaitReady(fd, POLLOUT, wait, absl::Now(), "sending to", peer));
  }
}

absl::StatusOr<size_t> RecvSomeWithFds(int fd, char* dst, size_t n, const IoWait& wait,
                                       absl::string_view peer, std::vector<Socket>* fds) {
  const absl::Time progress = absl::Now();
  while (true) {
    if (wait.wake != nullptr && wait.wake->notified()) {
      return absl::CancelledError(absl::StrCat("cancelled while receiving from ", peer));
    }
    iovec iov{dst, n};
    // Room for a server's coalesced answers (kMaxFdsPerMessage); more is MSG_CTRUNC.
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t got = ::recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        return absl::UnavailableError(
            absl::StrCat("receiving from ", peer, ": ", std::strerror(errno)));
      }
      RETURN_IF_ERROR(WaitReady(fd, POLLIN, wait, progress, "receiving from", peer));
      continue;
    }
    // Take every descriptor that came, so that none leaks whatever the peer sent.
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int passed;
        std::memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds->emplace_back(passed);
      }
    }
    if ((msg.msg_flags & MSG_CTRUNC) != 0) {
      return absl::DataLossError(absl::StrCat("too many descriptors from ", peer));
    }
    return static_cast<size_t>(got);
  }
}

absl::Status RecvAllWithFds(int fd, char* dst, size_t n, const IoWait& wait,
                            absl::string_view peer, std::vector<Socket>* fds) {
  size_t done = 0;
  while (done < n) {
    ASSIGN_OR_RETURN(const size_t got, RecvSomeWithFds(fd, dst + done, n - done, wait, peer, fds));
    if (got == 0) {
      return absl::UnavailableError(
          absl::StrCat("connection closed by ", peer, " after ", done, " of ", n, " bytes"));
    }
    done += got;
  }
  return absl::OkStatus();
}

}  // namespace croupier::net

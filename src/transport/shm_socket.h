// Unix-socket primitives of the shared-memory transport: abstract-namespace listening and
// dialling, and passing one descriptor. Waits follow src/net/socket.h (IoWait: deadline, stall,
// wake).
#ifndef CROUPIER_SRC_TRANSPORT_SHM_SOCKET_H_
#define CROUPIER_SRC_TRANSPORT_SHM_SOCKET_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "src/net/socket.h"

namespace croupier::net {

// A listening socket on the abstract name `name` ("@..."). INVALID_ARGUMENT when the name does not
// start with '@' or is too long; UNAVAILABLE naming it when it is taken.
absl::StatusOr<Socket> ListenUnix(const std::string& name);

// Connects to the abstract name `name` by `wait.deadline`. UNAVAILABLE "cannot connect to data
// server <name>: <reason>" on failure; a name nobody listens on fails at once.
absl::StatusOr<Socket> DialUnix(const std::string& name, const IoWait& wait);

// "pid <n>" of the process at the other end of a Unix socket, or "unknown peer".
std::string UnixPeerName(int fd);

// Sends every byte of `bytes`, the first ones carrying `fd_to_pass` (SCM_RIGHTS). The caller
// keeps its own descriptor.
absl::Status SendAllWithFd(int fd, absl::string_view bytes, int fd_to_pass, const IoWait& wait,
                           absl::string_view peer);
// The same with every descriptor of `fds_to_pass` (at most kMaxFdsPerMessage) on the first
// bytes, in order.
inline constexpr size_t kMaxFdsPerMessage = 64;
absl::Status SendAllWithFds(int fd, absl::string_view bytes, absl::Span<const int> fds_to_pass,
                            const IoWait& wait, absl::string_view peer);

// Receives exactly n bytes, as RecvAll, and appends every descriptor that came with them to
// `fds` (owned, close-on-exec). UNAVAILABLE when the peer closes first.
absl::Status RecvAllWithFds(int fd, char* dst, size_t n, const IoWait& wait,
                            absl::string_view peer, std::vector<Socket>* fds);
// Receives between 1 and n bytes, as RecvSome (0: the peer closed), appending the descriptors
// that came with them to `fds`.
absl::StatusOr<size_t> RecvSomeWithFds(int fd, char* dst, size_t n, const IoWait& wait,
                                       absl::string_view peer, std::vector<Socket>* fds);

}  // namespace croupier::net

#endif  // CROUPIER_SRC_TRANSPORT_SHM_SOCKET_H_

// The client's side of one TCP data connection (protocol in frame.h).
#ifndef CROUPIER_SRC_TRANSPORT_TCP_CLIENT_CONNECTION_H_
#define CROUPIER_SRC_TRANSPORT_TCP_CLIENT_CONNECTION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "croupier/batch.h"
#include "src/transport/frame.h"
#include "src/transport/socket.h"
#include "src/transport/tls.h"
#include "src/transport/transport.h"

namespace croupier {

// How long past a call's deadline the client waits for the answer to start: the server answers
// at the deadline at the latest, and the answer needs time to arrive.
inline constexpr absl::Duration kResponseGrace = absl::Seconds(1);
// Once a response has started, it fails when no byte arrives for this long. Not the call's
// deadline: a large batch already on its way is worth finishing.
inline constexpr absl::Duration kClientStallTimeout = absl::Seconds(10);

// One connection to a data server, handshaken, used by one call at a time. Thread-compatible;
// `cancel` is shared by the pool and thread-safe.
class ClientConnection {
 public:
  // Connects, runs the TLS handshake when `tls` is not null, and handshakes by `deadline`.
  // UNAVAILABLE when the server cannot be reached or does not answer; UNAUTHENTICATED,
  // FAILED_PRECONDITION or UNAVAILABLE as the server says or as the TLS handshake fails (tls.h);
  // CANCELLED when `cancel` fires.
  static absl::StatusOr<std::unique_ptr<ClientConnection>> Open(const std::string& address,
                                                                const DataClientOptions& options,
                                                                absl::Time deadline,
                                                                const net::WakeEvent* cancel,
                                                                const net::TlsContext* tls);

  // Sends `request` and returns the batch the server answers with, and its global index, or
  // the error it answers with (code kept, message prefixed with "data server <address>: ").
  absl::StatusOr<std::pair<uint64_t, Batch>> Call(const frame::Request& request,
                                                  absl::Time deadline);

  // False once a call has failed in a way that may leave the byte stream out of step with the
  // frames (I/O error, timeout, malformed or refused response): such a connection is closed.
  bool reusable() const { return reusable_; }
  // True when it cannot serve another call: not reusable, or the server has closed it (e.g. for
  // idling) or sent something unasked.
  bool Stale() { return !reusable_ || stream_.PeerHungUpOrSpoke(); }

 private:
  ClientConnection(net::Stream stream, const std::string& address, uint64_t max_batch_bytes,
                   const net::WakeEvent* cancel);
  absl::Status Handshake(absl::string_view token, absl::Time deadline);
  // Reads the body of an ERROR frame of `length` bytes and returns the error it carries.
  absl::Status ReadError(uint64_t length);
  // Reads the body of a BATCH frame of `length` bytes straight into a new batch buffer.
  absl::StatusOr<std::pair<uint64_t, Batch>> ReadBatch(uint64_t length);
  // Reads the body of a BATCH_COMPRESSED frame of `length` bytes and decompresses it into a new
  // batch buffer.
  absl::StatusOr<std::pair<uint64_t, Batch>> ReadCompressedBatch(uint64_t length);

  net::Stream stream_;
  const std::string peer_;  // "data server <address>", for messages
  const uint64_t max_batch_bytes_;
  const net::WakeEvent* const cancel_;
  bool reusable_ = true;
  std::string compressed_;  // the last compressed body, reused across calls
};

}  // namespace croupier

#endif  // CROUPIER_SRC_TRANSPORT_TCP_CLIENT_CONNECTION_H_

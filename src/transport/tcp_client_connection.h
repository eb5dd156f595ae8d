// The client's side of one TCP data connection (protocol in frame.h).
#ifndef CROUPIER_SRC_TRANSPORT_TCP_CLIENT_CONNECTION_H_
#define CROUPIER_SRC_TRANSPORT_TCP_CLIENT_CONNECTION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "absl/time/time.h"
#include "croupier/batch.h"
#include "src/transport/frame.h"
#include "src/transport/recv_buffer.h"
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
// The most requests one call pipelines on one connection (DataClient::FetchBatches splits
// longer lists): bounds the bytes of requests written before any answer is read.
inline constexpr size_t kMaxPipelinedRequests = 64;

// One answer to a request: the batch and its global index, or the error.
using Answer = absl::StatusOr<std::pair<uint64_t, Batch>>;

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
  // Pipelined (protocol version 2): writes every request at once (at most
  // kMaxPipelinedRequests), then reads the answers in order, handing answer i to
  // `on_answer(i, answer)` as it arrives. An answer that is an error (as Call's) does not stop
  // the others unless it leaves the connection out of step (reusable() false): the call then
  // stops and returns that error, and the later requests get no answer. OK when every request
  // was answered.
  absl::Status CallMany(absl::Span<const frame::Request> requests, absl::Time deadline,
                        absl::FunctionRef<void(size_t, Answer)> on_answer);

  // False once a call has failed in a way that may leave the byte stream out of step with the
  // frames (I/O error, timeout, malformed or refused response): such a connection is closed.
  bool reusable() const { return reusable_; }
  // True when it cannot serve another call: not reusable, or the server has closed it (e.g. for
  // idling) or sent something unasked.
  bool Stale() { return !reusable_ || !in_.empty() || stream_.PeerHungUpOrSpoke(); }

 private:
  ClientConnection(net::Stream stream, const std::string& address, uint64_t max_batch_bytes,
                   const net::WakeEvent* cancel);
  absl::Status Handshake(absl::string_view token, absl::Time deadline);
  // Reads one answer frame; `answer_wait` bounds the wait for its first byte.
  Answer ReadAnswer(const net::IoWait& answer_wait);
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
  net::RecvBuffer in_;      // what the server sent and was not parsed yet
  std::string compressed_;  // the last compressed body, reused across calls
  std::string out_;         // the requests of the call being sent, reused across calls
};

}  // namespace croupier

#endif  // CROUPIER_SRC_TRANSPORT_TCP_CLIENT_CONNECTION_H_

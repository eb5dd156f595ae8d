// The server's side of one TCP data connection: the handshake, then one request at a time until
// the client leaves, misbehaves or the server stops (protocol in frame.h).
#ifndef CROUPIER_SRC_TRANSPORT_TCP_SERVER_CONNECTION_H_
#define CROUPIER_SRC_TRANSPORT_TCP_SERVER_CONNECTION_H_

#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "croupier/batch.h"
#include "src/transport/batch_source.h"
#include "src/transport/frame.h"
#include "src/transport/recv_buffer.h"
#include "src/transport/socket.h"
#include "src/transport/tls.h"
#include "src/transport/transport.h"

namespace croupier {

// How long the server waits on a client (constants rather than options: no caller has needed to
// tune them).
//   An idle pooled connection is closed after this, freeing its slot of max_connections; the
//   client notices before its next call (PeerHungUpOrSpoke) and opens a new one.
inline constexpr absl::Duration kServerIdleTimeout = absl::Minutes(5);
//   A frame, once begun, or a response being written, fails when no byte moves for this long.
inline constexpr absl::Duration kServerStallTimeout = absl::Seconds(30);
//   BatchSource has no way to be interrupted, so the server asks it in slices of at most this,
//   checking between slices whether the server is stopping or the client has gone. This bounds
//   how long Shutdown waits for a connection blocked in the source.
inline constexpr absl::Duration kSourceSlice = absl::Milliseconds(100);

// Serves one accepted connection on the calling thread. Thread-compatible: Run is called once,
// from the connection's own thread; `source` and `stop` are shared and thread-safe.
class ServerConnection {
 public:
  // `tls` null: plaintext; else every connection must complete a TLS handshake first.
  ServerConnection(net::Socket socket, const DataServerOptions& options, BatchSource* source,
                   const net::WakeEvent* stop, const net::TlsContext* tls);

  // Returns when the connection is closed. Logs handshake failures, malformed frames and I/O
  // errors, naming the client's address.
  void Run();

 private:
  // The TLS handshake, or the refusal of a client that does not speak TLS (a croupier client is
  // told why in an ERROR frame).
  absl::Status StartTls();
  absl::Status Handshake();
  // The next request, or nullopt when the client closed the connection between requests.
  absl::StatusOr<std::optional<frame::Request>> ReadRequest();
  // Answers one request into pending_ (written by Flush). An error means the connection must be
  // closed.
  absl::Status Serve(const frame::Request& request);
  // Whether to hold the pending answers back for the next one: the client has pipelined another
  // request for a batch the source has ready, and the held answers are few and small.
  bool HoldForNext();
  // Writes every pending answer in one sendmsg, then tells the source which batches were served.
  absl::Status Flush(const net::IoWait& wait);
  // Asks the source in slices (see kSourceSlice) until it answers for real or `deadline`.
  // nullopt when the answer no longer matters: the server is stopping or the client has gone.
  std::optional<absl::StatusOr<std::pair<uint64_t, Batch>>> AskSource(const frame::Request& request,
                                                                      absl::Time deadline);
  absl::Status SendError(const absl::Status& status);

  // An answer built and not written yet.
  struct Pending {
    std::array<char, frame::kHeaderBytes + frame::kCompressedFixedBytes> prefix;
    size_t prefix_bytes = 0;
    std::optional<Batch> batch;  // keeps the bytes alive (BATCH, BATCH_COMPRESSED)
    std::string owned;  // the compressed body, or the whole ERROR frame; empty: batch->bytes()
    std::optional<BatchKey> served;  // the batch, when the answer carries one
    uint64_t batch_bytes = 0;
    bool any = false;  // answers a GET_ANY
  };

  net::Stream stream_;
  net::RecvBuffer in_;      // received and not parsed yet: pipelined requests (frame.h)
  std::vector<Pending> pending_;
  size_t pending_bytes_ = 0;
  const std::string peer_;  // "client <ip:port>", for messages and logs
  const DataServerOptions& options_;
  BatchSource* const source_;
  const net::WakeEvent* const stop_;
  const net::TlsContext* const tls_;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_TRANSPORT_TCP_SERVER_CONNECTION_H_

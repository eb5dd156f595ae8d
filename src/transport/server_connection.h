// The server's side of one data connection, whatever carries its bytes: the HELLO handshake,
// then requests one after the other until the client leaves, misbehaves or the server stops
// (protocol in frame.h), written once. A transport's connection (TCP with or without TLS in
// tcp_server_connection.h, shared memory in shm_server.cc) derives from it and supplies the
// byte stream and the frames that carry batches.
#ifndef CROUPIER_SRC_TRANSPORT_SERVER_CONNECTION_H_
#define CROUPIER_SRC_TRANSPORT_SERVER_CONNECTION_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "croupier/batch.h"
#include "src/net/socket.h"
#include "src/transport/batch_source.h"
#include "src/transport/frame.h"
#include "src/transport/recv_buffer.h"
#include "src/transport/serve_loop.h"
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
// The most answers held back to be written together (pipelined requests whose batches are
// ready, frame.h); a transport may bound their bytes too (HeldFull).
inline constexpr size_t kMaxHeldAnswers = 16;

// Serves one accepted connection on the calling thread. Thread-compatible: Run is called once,
// from the connection's own thread; the options, source and stop event are shared and
// thread-safe, and outlive it. The hooks are called once per read, per write or per request.
class ServerConnection {
 public:
  virtual ~ServerConnection() = default;
  ServerConnection(const ServerConnection&) = delete;
  ServerConnection& operator=(const ServerConnection&) = delete;

  // Returns when the connection is closed. Logs handshake failures, malformed frames and I/O
  // errors, naming the client.
  void Run();

 protected:
  // `peer` names the client in messages ("client <ip:port>"); `kind` names the connection in
  // logs ("connection", "shared-memory connection"); a HELLO must carry a version in
  // [oldest_version, version]. `slot` is the connection's place in its ServeLoop: its stop event,
  // its authenticated slot and its refusal log.
  ServerConnection(std::string peer, absl::string_view kind, uint32_t oldest_version,
                   uint32_t version, const DataServerOptions& options, BatchSource* source,
                   ConnectionSlot* slot);

  // The byte stream. Errors as src/net/socket.h's, naming peer_.
  virtual absl::Status SendAll(absl::string_view bytes, const net::IoWait& wait) = 0;
  virtual absl::StatusOr<size_t> RecvSome(char* dst, size_t room, const net::IoWait& wait) = 0;
  // As net::PeerHungUp: does not wait.
  virtual bool PeerHungUp() = 0;
  // As net::CloseGracefully, for a connection closed with a reason the client should read.
  virtual void CloseGracefully(absl::Duration linger) = 0;

  // Runs before the HELLO (TLS's handshake). OK by default; an error closes the connection.
  virtual absl::Status StartSession() { return absl::OkStatus(); }
  // The error to close with when the HELLO prefix `prefix` does not parse (`parse_error`).
  virtual absl::Status RefuseBadHello(absl::string_view prefix, absl::Status parse_error) {
    return parse_error;
  }
  // Frames a client may send besides GET_BATCH and GET_ANY (none by default), handled by
  // HandleFrame with their whole body; an error closes the connection.
  virtual bool AcceptsFrame(uint32_t type) const { return false; }
  virtual absl::Status HandleFrame(uint32_t type, absl::string_view body) {
    return absl::OkStatus();
  }

  // Holds the answer to `request` (the source's batch and its global index, or its error) for
  // WriteHeld; calls NoteServed for an answer that carries a batch.
  virtual void HoldAnswer(const frame::Request& request,
                          absl::StatusOr<std::pair<uint64_t, Batch>> answer) = 0;
  // True when the held answers should be written now whatever comes next (bytes, descriptors).
  virtual bool HeldFull() const = 0;
  // Writes every held answer at once; DropHeld then forgets them.
  virtual absl::Status WriteHeld(const net::IoWait& wait) = 0;
  virtual void DropHeld() = 0;

  // For HoldAnswer: once the held answers are written, the source hears OnServed(key, bytes);
  // when they are not, a GET_ANY batch (`any`) is logged as lost.
  void NoteServed(BatchKey key, uint64_t bytes, bool any);
  // Receives exactly n bytes, without the receive buffer (before any request).
  absl::Status RecvAll(char* dst, size_t n, const net::IoWait& wait);
  // Sends an ERROR frame carrying `status`.
  absl::Status SendError(const absl::Status& status);
  // Logs the refusal of this client for `reason` (rate-limited, ConnectionSlot::LogRefusal); the
  // close that follows is then not logged again.
  void LogRefusal(absl::string_view reason);

  // Constant after construction.
  const std::string peer_;
  const DataServerOptions& options_;
  BatchSource* const source_;
  ConnectionSlot* const slot_;
  const net::WakeEvent* const stop_;

 private:
  // The challenge and response (frame.h); takes an authenticated slot before HELLO_OK. Every
  // refusal is logged here (rate-limited) and sets refused_.
  absl::Status Handshake();

  // The next request, or nullopt when the client closed the connection between requests.
  absl::StatusOr<std::optional<frame::Request>> ReadRequest();
  // Answers one request into the held answers. An error means the connection must be closed.
  absl::Status Serve(const frame::Request& request);
  // Whether to hold the answers back for the next one: the client has pipelined another request
  // for a batch the source has ready, and the held answers are few and small.
  bool HoldForNext();
  // Writes every held answer, then tells the source which batches were served.
  absl::Status Flush(const net::IoWait& wait);
  // Asks the source in slices (see kSourceSlice) until it answers for real or `deadline`.
  // nullopt when the answer no longer matters: the server is stopping or the client has gone.
  std::optional<absl::StatusOr<std::pair<uint64_t, Batch>>> AskSource(const frame::Request& request,
                                                                      absl::Time deadline);
  // Logs why the connection ended at `stage`, at a level that matches who is at fault.
  void LogClose(absl::string_view stage, const absl::Status& status) const;

  struct Served {
    BatchKey key;
    uint64_t bytes = 0;
    bool any = false;  // answers a GET_ANY
  };

  const std::string kind_;
  bool refused_ = false;  // the handshake refused the client, and logged why
  const uint32_t oldest_version_;
  const uint32_t version_;
  net::RecvBuffer in_;          // received and not parsed yet: pipelined requests (frame.h)
  std::string body_;            // a frame body longer than in_ holds
  size_t held_ = 0;             // answers held
  std::vector<Served> served_;  // the held answers that carry a batch
};

}  // namespace croupier

#endif  // CROUPIER_SRC_TRANSPORT_SERVER_CONNECTION_H_

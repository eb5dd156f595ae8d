// The client's side of one data connection, whatever carries its bytes: the handshake, the
// pipelined call loop and ERROR answers (protocol in frame.h), written once. A transport's
// connection (TCP with or without TLS in tcp_client_connection.h, shared memory in
// shm_client.cc) derives from it and supplies the byte stream and the frames that carry batches.
#ifndef CROUPIER_SRC_TRANSPORT_CLIENT_CONNECTION_H_
#define CROUPIER_SRC_TRANSPORT_CLIENT_CONNECTION_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "croupier/batch.h"
#include "src/net/socket.h"
#include "src/transport/frame.h"
#include "src/transport/recv_buffer.h"

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

// One handshaken connection to a data server, used by one call at a time. Thread-compatible;
// the cancel event is shared by the pool and thread-safe. The hooks below are called once per
// read, per answer or per call, never per byte.
class ClientConnection {
 public:
  virtual ~ClientConnection() = default;
  ClientConnection(const ClientConnection&) = delete;
  ClientConnection& operator=(const ClientConnection&) = delete;

  // Sends `request` and returns the batch the server answers with, and its global index, or
  // the error it answers with (code kept, message prefixed with "data server <address>: ").
  Answer Call(const frame::Request& request, absl::Time deadline);
  // Pipelined: writes every request at once (at most kMaxPipelinedRequests), then reads the
  // answers in order, handing answer i to `on_answer(i, answer)` as it arrives. An answer that
  // is an error (as Call's) does not stop the others unless it leaves the connection out of step
  // (reusable() false): the call then stops and returns that error, and the later requests get
  // no answer. OK when every request was answered.
  absl::Status CallMany(absl::Span<const frame::Request> requests, absl::Time deadline,
                        absl::FunctionRef<void(size_t, Answer)> on_answer);

  // False once a call has failed in a way that may leave the byte stream out of step with the
  // frames (I/O error, timeout, malformed or refused response): such a connection is closed.
  bool reusable() const { return reusable_; }
  // True when it cannot serve another call: not reusable, or the server has closed it (e.g. for
  // idling) or sent something unasked.
  bool Stale() { return !reusable_ || !in_.empty() || PeerHungUpOrSpoke(); }

 protected:
  // `address` names the server in messages ("data server <address>").
  ClientConnection(absl::string_view address, uint64_t max_batch_bytes,
                   const net::WakeEvent* cancel);

  // The challenge and response of protocol `version` (frame.h) by `deadline`: sends HELLO with a
  // fresh nonce, checks the server's proof of `token` (when not empty) before sending anything
  // else, answers with its own proof and reads HELLO_OK. Each answer is read even when sending
  // failed (a server that refused us may have said why). UNAVAILABLE when no answer comes
  // ("handshake with data server <address> failed: ..."); UNAUTHENTICATED naming the address when
  // this client has a token and the server does not prove it holds it (no proof, or a wrong one);
  // the server's ERROR as its code says; FAILED_PRECONDITION for HELLO_OK with another version;
  // DATA_LOSS for anything else. The token itself never crosses the connection.
  absl::Status Handshake(uint32_t version, absl::string_view token, absl::Time deadline);

  // The byte stream. Errors as src/net/socket.h's, naming peer_.
  virtual absl::Status SendAll(absl::string_view bytes, const net::IoWait& wait) = 0;
  virtual absl::StatusOr<size_t> RecvSome(char* dst, size_t room, const net::IoWait& wait) = 0;
  // As net::PeerHungUpOrSpoke: does not wait.
  virtual bool PeerHungUpOrSpoke() = 0;
  // Reads the body of an answer frame that is not ERROR (its header consumed from in_) and
  // returns the batch; UnexpectedFrame for a type the transport does not answer with. Calls
  // set_in_step(true) once the frame has been read whole.
  virtual Answer ReadBatchFrame(const frame::FrameHeader& header) = 0;
  // Appends the frames that go before a call's requests, in the same write (none by default).
  virtual void AppendBeforeRequests(std::string* out) {}
  // Checked once the handshake's answer (`handshake`) or a call's answers have been read:
  // DATA_LOSS when something came that no frame accounts for. OK by default.
  virtual absl::Status CheckNothingLeft(bool handshake) { return absl::OkStatus(); }

  // For the hooks: reads through in_ until it holds `n` bytes (Fill), or copies the next `n`
  // bytes of the stream into `dst` (Take), waiting as `wait` says.
  absl::Status Fill(size_t n, const net::IoWait& wait);
  absl::Status Take(char* dst, size_t n, const net::IoWait& wait);
  // The wait for the rest of a frame that has begun: bounded by kClientStallTimeout.
  net::IoWait BodyWait() const {
    return net::IoWait{.stall = kClientStallTimeout, .wake = cancel_};
  }
  // DATA_LOSS "malformed response from data server <address>: <status's message>".
  absl::Status Malformed(const absl::Status& status) const;
  absl::Status UnexpectedFrame(uint32_t type) const;
  void set_in_step(bool in_step) { reusable_ = in_step; }

  net::RecvBuffer in_;      // what the server sent and was not parsed yet
  const std::string peer_;  // "data server <address>", for messages
  const uint64_t max_batch_bytes_;
  const net::WakeEvent* const cancel_;

 private:
  // The header of the next handshake frame, not ERROR (read and returned as its error); `sent`
  // is how sending what it answers went.
  absl::StatusOr<frame::FrameHeader> ReadHandshakeFrame(const absl::Status& sent,
                                                        const net::IoWait& wait);
  // Reads one answer frame; `answer_wait` bounds the wait for its first byte.
  Answer ReadAnswer(const net::IoWait& answer_wait);
  // Reads the body of an ERROR frame of `length` bytes and returns the error it carries.
  absl::Status ReadError(uint64_t length);

  bool reusable_ = true;
  std::string out_;  // the frames of the call being sent, reused across calls
};

}  // namespace croupier

#endif  // CROUPIER_SRC_TRANSPORT_CLIENT_CONNECTION_H_

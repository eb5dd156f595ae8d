// The data plane: producers serve batches to consumers over a Transport. The dispatcher is never
// on this path. Two transports plug in behind the same three classes: framed TCP, and same-host
// shared memory (shm_transport.h); one test suite (transport_conformance_test.cc) runs against
// both.
//
// Errors every transport returns, whatever carries the bytes (each message names the peer):
//   UNAVAILABLE          cannot connect, connection reset or closed, server shutting down or at
//                        its connection limit: retry, perhaps elsewhere;
//   UNAUTHENTICATED      the server refused the auth token (the server logs a warning naming the
//                        peer), the server did not prove that it holds the client's token (it has
//                        another or none: a process squatting its address, for one), or a TLS
//                        certificate was refused by either side (src/net/tls_stream.h);
//   FAILED_PRECONDITION  the peers speak different protocol versions (both are named), or one
//                        speaks TLS and the other does not;
//   RESOURCE_EXHAUSTED   the batch is larger than DataClientOptions::max_batch_bytes;
//   DATA_LOSS            the server's response was malformed;
//   DEADLINE_EXCEEDED    no answer by the deadline (plus a short grace for the transfer to start);
//   CANCELLED            DataClient::Cancel was called;
//   anything else        the BatchSource's own error (NOT_FOUND, DEADLINE_EXCEEDED, OUT_OF_RANGE,
//                        DATA_LOSS...), forwarded with its code and its message.
#ifndef CROUPIER_SRC_TRANSPORT_TRANSPORT_H_
#define CROUPIER_SRC_TRANSPORT_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "croupier/batch.h"
#include "src/net/tls_config.h"
#include "src/transport/batch_source.h"

namespace croupier {

struct DataServerOptions {
  // Numeric address or host name to listen on; port 0 picks a free port (see DataServer::port).
  std::string bind_address = "127.0.0.1";
  int port = 0;
  // Clients must prove that they hold this token, and the server proves it to them (challenge and
  // response, frame.h; the token never crosses the connection). Empty: no authentication; any
  // client is served, and a client that has a token refuses this server.
  std::string auth_token;
  // Connections beyond this are refused with UNAVAILABLE.
  size_t max_connections = 256;
  // And beyond this many from one IP address, so that one host cannot take every slot.
  // Both count only authenticated connections: those whose client has proved the token (any
  // client, when the server has none).
  size_t max_connections_per_peer = 128;
  // Connections in their handshake at once (and 16 from one IP address over TCP); each holds its
  // slot for at most handshake_timeout. A new connection beyond them evicts the oldest one still
  // in its handshake (of its address, or of all), so that a flood without the token cannot keep
  // a client that has it from its handshake (serve_loop.h).
  size_t max_handshakes = 64;
  // A request frame larger than this is malformed: the server drops the connection.
  size_t max_request_bytes = 64 << 10;
  // A connection that has not completed its handshake by then is dropped.
  absl::Duration handshake_timeout = absl::Seconds(5);
  // TLS (src/net/tls_config.h): with a certificate and key every connection must speak TLS; with a
  // CA as well, clients must present a certificate it signed. None: plaintext.
  TlsConfig tls;
};

// A running server: serves the batches of one BatchSource until Shutdown. Thread-safe.
class DataServer {
 public:
  virtual ~DataServer() = default;
  // The port listened on (the one picked when DataServerOptions::port was 0).
  virtual int port() const = 0;
  // "host:port" of the listener, with the bind address as given ("[v6]:port" for IPv6).
  virtual std::string address() const = 0;
  // Stops promptly: closes the listener, wakes every connection (clients blocked in a call get
  // UNAVAILABLE), and joins every thread. The BatchSource is not called after it returns.
  // Idempotent; the destructor calls it.
  virtual void Shutdown() = 0;
};

struct DataClientOptions {
  // The client proves it, and refuses a server that does not prove it in turn (UNAUTHENTICATED
  // naming the address) before sending anything else. Empty: no authentication; any server is
  // accepted.
  std::string auth_token;
  // Bounds connecting plus the handshake, for each connection of the pool.
  absl::Duration connect_timeout = absl::Seconds(5);
  // A larger batch fails RESOURCE_EXHAUSTED before any memory is allocated for it.
  uint64_t max_batch_bytes = uint64_t{4} << 30;
  // Concurrent calls beyond this wait for a free connection (until their deadline).
  size_t max_connections = 8;
  // TLS (src/net/tls_config.h): any file given makes every connection TLS, verifying the server
  // against the CA.
  TlsConfig tls;
};

// A small pool of connections to one data server, one request at a time per connection;
// concurrent calls use separate connections, up to max_connections. Thread-safe.
class DataClient {
 public:
  virtual ~DataClient() = default;
  // Global batch `key`. The server hands `deadline` to its BatchSource; the call waits for the
  // answer until `deadline` plus a short grace for the transfer to start, then fails
  // DEADLINE_EXCEEDED. The returned batch was validated (Batch::FromBuffer) and owns its bytes.
  virtual absl::StatusOr<Batch> Fetch(const BatchKey& key, absl::Time deadline) = 0;
  // Global batches `batches` of (job, epoch), each as Fetch would return it, handed to
  // `on_batch(i, result)` (i indexes `batches`) in order, each as soon as it has arrived; every
  // index is handed over exactly once. The transports pipeline the requests on one connection
  // (frame.h), so that n small batches cost about one round trip instead of n. A batch's own
  // error does not stop the others; when the connection fails, the batches not answered yet get
  // that error. This default fetches one after the other.
  virtual void FetchBatches(absl::string_view job, uint64_t epoch,
                            absl::Span<const uint64_t> batches, absl::Time deadline,
                            absl::FunctionRef<void(size_t, absl::StatusOr<Batch>)> on_batch) {
    for (size_t i = 0; i < batches.size(); ++i) {
      on_batch(i, Fetch(BatchKey{std::string(job), epoch, batches[i]}, deadline));
    }
  }
  // first_come: any ready batch of (job, epoch) with its global batch index. OUT_OF_RANGE when
  // the server holds no more batches of the epoch; DEADLINE_EXCEEDED when none became ready.
  virtual absl::StatusOr<std::pair<uint64_t, Batch>> FetchAny(absl::string_view job, uint64_t epoch,
                                                              absl::Time deadline) = 0;
  // Wakes every blocked call with CANCELLED; every later call fails CANCELLED. Idempotent.
  virtual void Cancel() = 0;
  // For a client the caller stops using but must keep alive for calls in flight: closes its idle
  // connections now and each busy one when its call ends, so that it holds none of the server's
  // connection slots (max_connections, max_connections_per_peer). Later calls still work.
  virtual void Retire() {}
};

// A way of moving batches. Implementations are stateless singletons. Thread-safe.
class Transport {
 public:
  virtual ~Transport() = default;
  // "tcp", ...
  virtual absl::string_view name() const = 0;
  // Starts serving `source`, which must outlive the server. UNAVAILABLE when the address cannot
  // be bound (e.g. the port is taken); INVALID_ARGUMENT for bad options.
  virtual absl::StatusOr<std::unique_ptr<DataServer>> StartServer(const DataServerOptions& options,
                                                                  BatchSource* source) = 0;
  // Connects to the server at `address` ("host:port") and completes the handshake, so that a
  // bad address, token or protocol version fails here (INVALID_ARGUMENT for an address that is not
  // host:port, UNAVAILABLE for one that cannot be reached, UNAUTHENTICATED, FAILED_PRECONDITION)
  // rather than at the first fetch.
  virtual absl::StatusOr<std::unique_ptr<DataClient>> Connect(const std::string& address,
                                                              const DataClientOptions& options) = 0;

  // The framed-TCP transport (protocol in frame.h).
  static Transport* Tcp();
  // Same-host shared memory: batches as sealed memfd segments passed over a Unix socket
  // (shm_transport.h). Addresses are abstract socket names ("@...").
  static Transport* Shm();
};

}  // namespace croupier

#endif  // CROUPIER_SRC_TRANSPORT_TRANSPORT_H_

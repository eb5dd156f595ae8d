// The client's side of one TCP data connection, plain or TLS (protocol in frame.h): the byte
// stream and the BATCH and BATCH_COMPRESSED answers; the rest is ClientConnection's.
#ifndef CROUPIER_SRC_TRANSPORT_TCP_CLIENT_CONNECTION_H_
#define CROUPIER_SRC_TRANSPORT_TCP_CLIENT_CONNECTION_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "src/net/socket.h"
#include "src/net/tls_stream.h"
#include "src/transport/client_connection.h"
#include "src/transport/frame.h"
#include "src/transport/transport.h"

namespace croupier {

// Thread-compatible, as ClientConnection.
class TcpClientConnection final : public ClientConnection {
 public:
  // Connects, runs the TLS handshake when `tls` is not null, and handshakes (protocol version
  // frame::kDataProtocolVersion) by `deadline`. UNAVAILABLE when the server cannot be reached or
  // does not answer; UNAUTHENTICATED, FAILED_PRECONDITION or UNAVAILABLE as the server says or
  // as the TLS handshake fails (src/net/tls_stream.h); CANCELLED when `cancel` fires.
  static absl::StatusOr<std::unique_ptr<TcpClientConnection>> Open(const std::string& address,
                                                                   const DataClientOptions& options,
                                                                   absl::Time deadline,
                                                                   const net::WakeEvent* cancel,
                                                                   const net::TlsContext* tls);

 private:
  TcpClientConnection(net::Stream stream, const std::string& address, uint64_t max_batch_bytes,
                      const net::WakeEvent* cancel);

  absl::Status SendAll(absl::string_view bytes, const net::IoWait& wait) override;
  absl::StatusOr<size_t> RecvSome(char* dst, size_t room, const net::IoWait& wait) override;
  bool PeerHungUpOrSpoke() override { return stream_.PeerHungUpOrSpoke(); }
  Answer ReadBatchFrame(const frame::FrameHeader& header) override;

  // Reads the body of a BATCH frame of `length` bytes straight into a new batch buffer.
  Answer ReadBatch(uint64_t length);
  // Reads the body of a BATCH_COMPRESSED frame of `length` bytes and decompresses it into a new
  // batch buffer.
  Answer ReadCompressedBatch(uint64_t length);

  net::Stream stream_;
  std::string compressed_;  // the last compressed body, reused across calls
};

}  // namespace croupier

#endif  // CROUPIER_SRC_TRANSPORT_TCP_CLIENT_CONNECTION_H_

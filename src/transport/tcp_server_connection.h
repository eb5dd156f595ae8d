// The server's side of one TCP data connection, plain or TLS (protocol in frame.h): the byte
// stream, the TLS handshake and the BATCH and BATCH_COMPRESSED answers, written together with
// one sendmsg; the rest is ServerConnection's.
#ifndef CROUPIER_SRC_TRANSPORT_TCP_SERVER_CONNECTION_H_
#define CROUPIER_SRC_TRANSPORT_TCP_SERVER_CONNECTION_H_

#include <array>
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
#include "src/net/tls_stream.h"
#include "src/transport/batch_source.h"
#include "src/transport/frame.h"
#include "src/transport/serve_loop.h"
#include "src/transport/server_connection.h"
#include "src/transport/transport.h"

namespace croupier {

// Thread-compatible, as ServerConnection.
class TcpServerConnection final : public ServerConnection {
 public:
  // `tls` null: plaintext; else the client must complete a TLS handshake first.
  TcpServerConnection(net::Socket socket, const DataServerOptions& options, BatchSource* source,
                      ConnectionSlot* slot, const net::TlsContext* tls);

 private:
  absl::Status SendAll(absl::string_view bytes, const net::IoWait& wait) override;
  absl::StatusOr<size_t> RecvSome(char* dst, size_t room, const net::IoWait& wait) override;
  bool PeerHungUp() override { return stream_.PeerHungUp(); }
  void CloseGracefully(absl::Duration linger) override;
  // The TLS handshake, or the refusal of a client that does not speak TLS (a croupier client is
  // told why in an ERROR frame).
  absl::Status StartSession() override;
  // A TLS client on a plaintext port is told to use a TLS port in the log.
  absl::Status RefuseBadHello(absl::string_view prefix, absl::Status parse_error) override;
  // Compresses the batch when its job asks for it (BatchSource::CompressionOf).
  void HoldAnswer(const frame::Request& request,
                  absl::StatusOr<std::pair<uint64_t, Batch>> answer) override;
  bool HeldFull() const override;
  absl::Status WriteHeld(const net::IoWait& wait) override;
  void DropHeld() override;

  // An answer built and not written yet.
  struct Pending {
    std::array<char, frame::kHeaderBytes + frame::kCompressedFixedBytes> prefix;
    size_t prefix_bytes = 0;
    std::optional<Batch> batch;  // keeps the bytes alive (BATCH, BATCH_COMPRESSED)
    std::string owned;  // the compressed body, or the whole ERROR frame; empty: batch->bytes()
  };

  net::Stream stream_;
  const net::TlsContext* const tls_;
  std::vector<Pending> pending_;
  size_t pending_bytes_ = 0;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_TRANSPORT_TCP_SERVER_CONNECTION_H_

#include "src/transport/tcp_server_connection.h"

#include <sys/uio.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/transport/compression.h"
#include "src/transport/serve_loop.h"

namespace croupier {
namespace {

// Bounds the bytes of the answers held back to be written together (kMaxHeldAnswers).
constexpr size_t kMaxHeldBytes = size_t{256} << 10;

}  // namespace

TcpServerConnection::TcpServerConnection(net::Socket socket, const DataServerOptions& options,
                                         BatchSource* source, ConnectionSlot* slot,
                                         const net::TlsContext* tls)
    : ServerConnection(absl::StrCat("client ", net::PeerName(socket.fd())), "connection",
                       frame::kOldestDataProtocolVersion, frame::kDataProtocolVersion, options,
                       source, slot),
      stream_(std::move(socket)),
      tls_(tls) {}

absl::Status TcpServerConnection::SendAll(absl::string_view bytes, const net::IoWait& wait) {
  return stream_.SendAll(bytes, wait, peer_);
}

absl::StatusOr<size_t> TcpServerConnection::RecvSome(char* dst, size_t room,
                                                     const net::IoWait& wait) {
  return stream_.RecvSome(dst, room, wait, peer_);
}

void TcpServerConnection::CloseGracefully(absl::Duration linger) {
  net::Stream::CloseGracefully(std::move(stream_), linger);
}

absl::Status TcpServerConnection::StartSession() {
  if (tls_ == nullptr) return absl::OkStatus();
  const net::IoWait wait{.deadline = absl::Now() + options_.handshake_timeout, .wake = stop_};
  ASSIGN_OR_RETURN(const bool is_tls, net::PeekIsTls(stream_.fd(), wait, peer_));
  if (!is_tls) {
    char prefix[frame::kHelloPrefixBytes];
    absl::Status got = stream_.RecvAll(prefix, sizeof(prefix), wait, peer_);
    absl::StatusOr<frame::HelloPrefix> hello =
        got.ok() ? frame::ParseHelloPrefix(absl::string_view(prefix, sizeof(prefix)))
                 : absl::StatusOr<frame::HelloPrefix>(got);
    const absl::Status refused = absl::FailedPreconditionError(
        "this data server requires TLS; give the client a CA (--tls-ca or CROUPIER_TLS_CA)" +
        std::string(tls_->requires_client_cert() ? " and a certificate and key" : ""));
    if (hello.ok()) {
      // A croupier client without TLS: read its payload (see Handshake) and tell it why.
      std::string payload(hello->payload_length, '\0');
      if (stream_.RecvAll(payload.data(), payload.size(), wait, peer_).ok()) {
        SendError(refused).IgnoreError();
      }
      LogRefusal("a plaintext croupier client on a TLS port");
    } else {
      LogRefusal(
          "it does not speak TLS (its first bytes are neither a TLS handshake nor a croupier "
          "HELLO)");
    }
    return refused;
  }
  const absl::Status status = stream_.StartTls(*tls_, "", wait, peer_);
  if (!status.ok() && !absl::IsCancelled(status)) {
    LogRefusal(status.message());
    return absl::UnauthenticatedError(status.message());
  }
  return status;
}

absl::Status TcpServerConnection::RefuseBadHello(absl::string_view prefix,
                                                 absl::Status parse_error) {
  if (!stream_.tls() && static_cast<unsigned char>(prefix[0]) == 0x16 &&
      static_cast<unsigned char>(prefix[1]) == 0x03) {
    LogRefusal(
        "it speaks TLS and this data server does not (start the producer with --tls-cert and "
        "--tls-key)");
    return absl::UnauthenticatedError("a TLS client on a plaintext port");
  }
  return parse_error;
}

void TcpServerConnection::HoldAnswer(const frame::Request& request,
                                     absl::StatusOr<std::pair<uint64_t, Batch>> answer) {
  if (pending_.capacity() < kMaxHeldAnswers) pending_.reserve(kMaxHeldAnswers);
  Pending& out = pending_.emplace_back();
  if (!answer.ok()) {
    out.owned = frame::EncodeError(answer.status());
    pending_bytes_ += out.owned.size();
    return;
  }

  auto& [index, batch] = *answer;
  out.batch.emplace(std::move(batch));
  const absl::string_view bytes = out.batch->bytes();
  NoteServed(BatchKey{request.job, request.epoch, index}, bytes.size(),
             request.type == frame::FrameType::kGetAny);
  // Compressed at send time, in this connection's thread: each batch is delivered once (dealt or
  // first_come), so compressing when it is made would save nothing but retries, would hold both
  // forms in the producer's buffer, and would cost the shared-memory path, which never
  // compresses. A batch that does not shrink goes as is, in a BATCH frame.
  const Codec codec = source_->CompressionOf(request.job);
  absl::StatusOr<std::string> compressed = absl::UnimplementedError("not compressed");
  if (codec != Codec::kNone && bytes.size() <= MaxCompressibleBytes(codec)) {
    compressed = Compress(codec, bytes);
    if (!compressed.ok()) {
      Log(LogLevel::kWarning, kTransportLog,
          absl::StrCat("sending batch ", index, " of job '", request.job,
                       "' uncompressed: ", compressed.status().message()));
    } else if (compressed->size() >= bytes.size()) {
      compressed = absl::UnimplementedError("did not shrink");
    }
  }
  if (compressed.ok()) {
    const auto prefix = frame::EncodeCompressedBatchPrefix(index, static_cast<uint32_t>(codec),
                                                           bytes.size(), compressed->size());
    std::copy(prefix.begin(), prefix.end(), out.prefix.begin());
    out.prefix_bytes = prefix.size();
    out.owned = *std::move(compressed);
  } else {
    // Written straight from the batch buffer: no copy in user space.
    const auto prefix = frame::EncodeBatchPrefix(index, bytes.size());
    std::copy(prefix.begin(), prefix.end(), out.prefix.begin());
    out.prefix_bytes = prefix.size();
  }
  pending_bytes_ += out.prefix_bytes + (out.owned.empty() ? bytes.size() : out.owned.size());
}

bool TcpServerConnection::HeldFull() const { return pending_bytes_ >= kMaxHeldBytes; }

absl::Status TcpServerConnection::WriteHeld(const net::IoWait& wait) {
  iovec iov[2 * kMaxHeldAnswers];
  size_t n = 0;
  for (Pending& p : pending_) {
    if (p.prefix_bytes > 0) iov[n++] = {p.prefix.data(), p.prefix_bytes};
    const absl::string_view body = p.owned.empty() ? p.batch->bytes() : absl::string_view(p.owned);
    iov[n++] = {const_cast<char*>(body.data()), body.size()};
  }
  // One sendmsg for every held answer: one trip through the kernel's TCP path and one wake-up
  // of the client for all of them.
  return stream_.SendAll(absl::MakeSpan(iov, n), wait, peer_);
}

void TcpServerConnection::DropHeld() {
  pending_.clear();
  pending_bytes_ = 0;
}

}  // namespace croupier

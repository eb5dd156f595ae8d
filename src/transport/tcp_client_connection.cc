#include "src/transport/tcp_client_connection.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/protocol.h"
#include "src/common/status_macros.h"
#include "src/transport/buffer_pool.h"
#include "src/transport/compression.h"

namespace croupier {
namespace {

// The largest compressed-body staging buffer a connection keeps between calls.
constexpr size_t kKeptStagingBytes = size_t{64} << 20;

// A parse error of what the server sent, as the caller sees it.
absl::Status Malformed(absl::string_view peer, const absl::Status& status) {
  return absl::DataLossError(
      absl::StrCat("malformed response from ", peer, ": ", status.message()));
}

}  // namespace

ClientConnection::ClientConnection(net::Stream stream, const std::string& address,
                                   uint64_t max_batch_bytes, const net::WakeEvent* cancel)
    : stream_(std::move(stream)),
      peer_(absl::StrCat("data server ", address)),
      max_batch_bytes_(max_batch_bytes),
      cancel_(cancel) {}

absl::StatusOr<std::unique_ptr<ClientConnection>> ClientConnection::Open(
    const std::string& address, const DataClientOptions& options, absl::Time deadline,
    const net::WakeEvent* cancel, const net::TlsContext* tls) {
  const net::IoWait wait{.deadline = deadline, .wake = cancel};
  ASSIGN_OR_RETURN(net::Socket socket, net::Dial(address, wait));
  net::Stream stream(std::move(socket));
  if (tls != nullptr) {
    ASSIGN_OR_RETURN(auto host_port, net::SplitHostPort(address));
    RETURN_IF_ERROR(
        stream.StartTls(*tls, host_port.first, wait, absl::StrCat("data server ", address)));
  }
  std::unique_ptr<ClientConnection> connection(
      new ClientConnection(std::move(stream), address, options.max_batch_bytes, cancel));
  RETURN_IF_ERROR(connection->Handshake(options.auth_token, deadline));
  return connection;
}

absl::Status ClientConnection::Handshake(absl::string_view token, absl::Time deadline) {
  const net::IoWait wait{.deadline = deadline, .wake = cancel_};
  const absl::Status sent =
      stream_.SendAll(frame::EncodeHello(kProtocolVersion, token), wait, peer_);
  // Read the answer even when sending failed: a server that refused us may have said why before
  // it closed.
  char header[frame::kHeaderBytes];
  const absl::Status got = stream_.RecvAll(header, sizeof(header), wait, peer_);
  if (!got.ok()) {
    const absl::Status& cause = sent.ok() ? got : sent;
    if (absl::IsCancelled(cause)) return cause;
    // TLS 1.3: a server that refuses our certificate says so after our side of the handshake.
    if (absl::IsUnauthenticated(got) || absl::IsFailedPrecondition(got)) return got;
    // A server that does not complete the handshake is as good as unreachable: retry.
    return absl::UnavailableError(
        absl::StrCat("handshake with ", peer_, " failed: ", cause.message()));
  }
  absl::StatusOr<frame::FrameHeader> h =
      frame::ParseHeader(absl::string_view(header, sizeof(header)));
  if (!h.ok()) return Malformed(peer_, h.status());
  if (h->type == static_cast<uint32_t>(frame::FrameType::kError)) return ReadError(h->length);
  if (h->type != static_cast<uint32_t>(frame::FrameType::kHelloOk) ||
      h->length != frame::kHelloOkBytes) {
    return Malformed(peer_,
                     absl::DataLossError(absl::StrCat("frame type ", h->type, " of ", h->length,
                                                      " bytes in answer to the handshake")));
  }
  char body[frame::kHelloOkBytes];
  RETURN_IF_ERROR(stream_.RecvAll(body, sizeof(body), wait, peer_));
  absl::StatusOr<uint32_t> version = frame::ParseHelloOk(absl::string_view(body, sizeof(body)));
  if (!version.ok()) return Malformed(peer_, version.status());
  if (*version != kProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrCat("protocol version mismatch: ", peer_,
                                                      " speaks version ", *version,
                                                      ", this client version ", kProtocolVersion));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::pair<uint64_t, Batch>> ClientConnection::Call(const frame::Request& request,
                                                                  absl::Time deadline) {
  reusable_ = false;  // until the whole answer has been read
  const absl::Time now = absl::Now();
  deadline = std::min(deadline, now + frame::kMaxRequestTimeout);
  frame::Request timed = request;
  timed.timeout_ms = frame::TimeoutMs(deadline, now);
  const net::IoWait answer_wait{.deadline = deadline + kResponseGrace, .wake = cancel_};
  RETURN_IF_ERROR(stream_.SendAll(frame::EncodeRequest(timed), answer_wait, peer_));

  char header[frame::kHeaderBytes];
  absl::Status got = stream_.RecvAll(header, sizeof(header), answer_wait, peer_);
  if (absl::IsDeadlineExceeded(got)) {
    return absl::DeadlineExceededError(absl::StrCat(peer_, " did not answer by the deadline (plus ",
                                                    absl::FormatDuration(kResponseGrace),
                                                    " grace)"));
  }
  RETURN_IF_ERROR(got);
  absl::StatusOr<frame::FrameHeader> h =
      frame::ParseHeader(absl::string_view(header, sizeof(header)));
  if (!h.ok()) return Malformed(peer_, h.status());
  if (h->type == static_cast<uint32_t>(frame::FrameType::kBatch)) return ReadBatch(h->length);
  if (h->type == static_cast<uint32_t>(frame::FrameType::kBatchCompressed)) {
    return ReadCompressedBatch(h->length);
  }
  if (h->type == static_cast<uint32_t>(frame::FrameType::kError)) return ReadError(h->length);
  return Malformed(
      peer_, absl::DataLossError(absl::StrCat("frame type ", h->type, " in answer to a request")));
}

absl::Status ClientConnection::ReadError(uint64_t length) {
  if (length < frame::kErrorFixedBytes ||
      length > frame::kErrorFixedBytes + frame::kMaxErrorMessageBytes) {
    return Malformed(peer_, absl::DataLossError(absl::StrCat("ERROR frame of ", length, " bytes")));
  }
  std::string body(length, '\0');
  RETURN_IF_ERROR(stream_.RecvAll(
      body.data(), body.size(), net::IoWait{.stall = kClientStallTimeout, .wake = cancel_}, peer_));
  absl::StatusOr<frame::ErrorBody> error = frame::ParseError(body);
  if (!error.ok()) return Malformed(peer_, error.status());
  reusable_ = true;
  return absl::Status(error->code, absl::StrCat(peer_, ": ", error->message));
}

absl::StatusOr<std::pair<uint64_t, Batch>> ClientConnection::ReadBatch(uint64_t length) {
  if (length < frame::kBatchIndexBytes) {
    return Malformed(peer_, absl::DataLossError(absl::StrCat("BATCH frame of ", length, " bytes")));
  }
  const uint64_t size = length - frame::kBatchIndexBytes;
  // Refused before allocating: the size is the server's claim. The connection is dropped with
  // the unread bytes.
  if (size > max_batch_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "batch of ", size, " bytes from ", peer_, " exceeds max_batch_bytes ", max_batch_bytes_));
  }
  const net::IoWait wait{.stall = kClientStallTimeout, .wake = cancel_};
  char index_bytes[frame::kBatchIndexBytes];
  RETURN_IF_ERROR(stream_.RecvAll(index_bytes, sizeof(index_bytes), wait, peer_));
  const uint64_t index =
      frame::ParseBatchIndex(absl::string_view(index_bytes, sizeof(index_bytes)));
  // The bytes land in the batch's own aligned buffer: no copy after the kernel's.
  std::shared_ptr<uint8_t> buffer = BufferPool::Shared().Get(size);
  if (buffer == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", size, " bytes for a batch from ", peer_));
  }
  RETURN_IF_ERROR(stream_.RecvAll(reinterpret_cast<char*>(buffer.get()), size, wait, peer_));
  absl::StatusOr<Batch> batch = Batch::FromBuffer(std::move(buffer), size);
  if (!batch.ok()) {
    return absl::DataLossError(
        absl::StrCat("malformed batch ", index, " from ", peer_, ": ", batch.status().message()));
  }
  reusable_ = true;
  return std::make_pair(index, *std::move(batch));
}

absl::StatusOr<std::pair<uint64_t, Batch>> ClientConnection::ReadCompressedBatch(
    uint64_t length) {
  if (length < frame::kCompressedFixedBytes) {
    return Malformed(peer_, absl::DataLossError(
                                absl::StrCat("BATCH_COMPRESSED frame of ", length, " bytes")));
  }
  const uint64_t compressed_size = length - frame::kCompressedFixedBytes;
  const net::IoWait wait{.stall = kClientStallTimeout, .wake = cancel_};
  char fixed_bytes[frame::kCompressedFixedBytes];
  RETURN_IF_ERROR(stream_.RecvAll(fixed_bytes, sizeof(fixed_bytes), wait, peer_));
  absl::StatusOr<frame::CompressedBatchFixed> fixed =
      frame::ParseCompressedBatchFixed(absl::string_view(fixed_bytes, sizeof(fixed_bytes)));
  if (!fixed.ok()) return Malformed(peer_, fixed.status());
  if (!IsCompressingCodec(fixed->codec)) {
    return Malformed(peer_, absl::DataLossError(absl::StrCat("batch ", fixed->index,
                                                             " compressed with unknown codec ",
                                                             fixed->codec)));
  }
  const Codec codec = static_cast<Codec>(fixed->codec);
  const uint64_t size = fixed->uncompressed_bytes;
  // Both sizes are the server's claims: refused before allocating, as for BATCH. A compressed
  // body longer than the batch it claims to make is refused too (the server sends such a batch
  // uncompressed), which bounds the staging buffer by max_batch_bytes as well.
  if (size > max_batch_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("batch ", fixed->index, " of ", size, " bytes (uncompressed) from ", peer_,
                     " exceeds max_batch_bytes ", max_batch_bytes_));
  }
  if (compressed_size >= size) {
    return Malformed(peer_, absl::DataLossError(absl::StrCat(
                                "batch ", fixed->index, " compressed to ", compressed_size,
                                " bytes claims only ", size, " bytes uncompressed")));
  }
  compressed_.resize(compressed_size);
  RETURN_IF_ERROR(stream_.RecvAll(compressed_.data(), compressed_.size(), wait, peer_));
  // The consumer owns the uncompressed bytes: a batch buffer of its own, as for BATCH.
  std::shared_ptr<uint8_t> buffer = BufferPool::Shared().Get(size);
  if (buffer == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", size, " bytes for a batch from ", peer_));
  }
  if (absl::Status s =
          Decompress(codec, compressed_, reinterpret_cast<char*>(buffer.get()), size);
      !s.ok()) {
    // The frame was read whole: the stream is still in step, but the server sends bad data.
    return absl::DataLossError(absl::StrCat("corrupt ", CodecName(codec), " body of batch ",
                                            fixed->index, " from ", peer_, ": ", s.message()));
  }
  // Keep a staging buffer of usual batch sizes; let go of one an outsized batch left behind.
  if (compressed_.capacity() > kKeptStagingBytes) std::string().swap(compressed_);
  absl::StatusOr<Batch> batch = Batch::FromBuffer(std::move(buffer), size);
  if (!batch.ok()) {
    return absl::DataLossError(absl::StrCat("malformed batch ", fixed->index, " from ", peer_,
                                            ": ", batch.status().message()));
  }
  reusable_ = true;
  return std::make_pair(fixed->index, *std::move(batch));
}

}  // namespace croupier

#include "src/transport/tcp_client_connection.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/status_macros.h"
#include "src/io/buffer_pool.h"
#include "src/transport/compression.h"

namespace croupier {
namespace {

// The largest compressed-body staging buffer a connection keeps between calls.
constexpr size_t kKeptStagingBytes = size_t{64} << 20;

}  // namespace

TcpClientConnection::TcpClientConnection(net::Stream stream, const std::string& address,
                                         uint64_t max_batch_bytes, const net::WakeEvent* cancel)
    : ClientConnection(address, max_batch_bytes, cancel), stream_(std::move(stream)) {}

absl::StatusOr<std::unique_ptr<TcpClientConnection>> TcpClientConnection::Open(
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
  std::unique_ptr<TcpClientConnection> connection(
      new TcpClientConnection(std::move(stream), address, options.max_batch_bytes, cancel));
  RETURN_IF_ERROR(
      connection->Handshake(frame::kDataProtocolVersion, options.auth_token, deadline));
  return connection;
}

absl::Status TcpClientConnection::SendAll(absl::string_view bytes, const net::IoWait& wait) {
  return stream_.SendAll(bytes, wait, peer_);
}

absl::StatusOr<size_t> TcpClientConnection::RecvSome(char* dst, size_t room,
                                                     const net::IoWait& wait) {
  return stream_.RecvSome(dst, room, wait, peer_);
}

Answer TcpClientConnection::ReadBatchFrame(const frame::FrameHeader& h) {
  if (h.type == static_cast<uint32_t>(frame::FrameType::kBatch)) return ReadBatch(h.length);
  if (h.type == static_cast<uint32_t>(frame::FrameType::kBatchCompressed)) {
    return ReadCompressedBatch(h.length);
  }
  return UnexpectedFrame(h.type);
}

Answer TcpClientConnection::ReadBatch(uint64_t length) {
  if (length < frame::kBatchIndexBytes) {
    return Malformed(absl::DataLossError(absl::StrCat("BATCH frame of ", length, " bytes")));
  }
  const uint64_t size = length - frame::kBatchIndexBytes;
  // Refused before allocating: the size is the server's claim. The connection is dropped with
  // the unread bytes.
  if (size > max_batch_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "batch of ", size, " bytes from ", peer_, " exceeds max_batch_bytes ", max_batch_bytes_));
  }
  const net::IoWait wait = BodyWait();
  RETURN_IF_ERROR(Fill(frame::kBatchIndexBytes, wait));
  const uint64_t index = frame::ParseBatchIndex(in_.data().substr(0, frame::kBatchIndexBytes));
  in_.Consume(frame::kBatchIndexBytes);
  // The bytes land in the batch's own aligned buffer: copied from the receive buffer when they
  // came with the header (small batches), else straight from the kernel.
  std::shared_ptr<uint8_t> buffer = BufferPool::Shared().Get(size);
  if (buffer == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", size, " bytes for a batch from ", peer_));
  }
  RETURN_IF_ERROR(Take(reinterpret_cast<char*>(buffer.get()), size, wait));
  absl::StatusOr<Batch> batch = Batch::FromBuffer(std::move(buffer), size);
  if (!batch.ok()) {
    return absl::DataLossError(
        absl::StrCat("malformed batch ", index, " from ", peer_, ": ", batch.status().message()));
  }
  set_in_step(true);
  return std::make_pair(index, *std::move(batch));
}

Answer TcpClientConnection::ReadCompressedBatch(uint64_t length) {
  if (length < frame::kCompressedFixedBytes) {
    return Malformed(absl::DataLossError(
                                absl::StrCat("BATCH_COMPRESSED frame of ", length, " bytes")));
  }
  const uint64_t compressed_size = length - frame::kCompressedFixedBytes;
  const net::IoWait wait = BodyWait();
  RETURN_IF_ERROR(Fill(frame::kCompressedFixedBytes, wait));
  absl::StatusOr<frame::CompressedBatchFixed> fixed =
      frame::ParseCompressedBatchFixed(in_.data().substr(0, frame::kCompressedFixedBytes));
  in_.Consume(frame::kCompressedFixedBytes);
  if (!fixed.ok()) return Malformed(fixed.status());
  if (!IsCompressingCodec(fixed->codec)) {
    return Malformed(absl::DataLossError(absl::StrCat("batch ", fixed->index,
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
    return Malformed(absl::DataLossError(absl::StrCat(
                                "batch ", fixed->index, " compressed to ", compressed_size,
                                " bytes claims only ", size, " bytes uncompressed")));
  }
  compressed_.resize(compressed_size);
  RETURN_IF_ERROR(Take(compressed_.data(), compressed_.size(), wait));
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
  set_in_step(true);
  return std::make_pair(fixed->index, *std::move(batch));
}

}  // namespace croupier

#include "src/transport/tcp_client_connection.h"

#include <algorithm>
#include <optional>
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
      stream_.SendAll(frame::EncodeHello(frame::kDataProtocolVersion, token), wait, peer_);
  auto read = [&](char* dst, size_t room) { return stream_.RecvSome(dst, room, wait, peer_); };
  // Read the answer even when sending failed: a server that refused us may have said why before
  // it closed.
  const absl::Status got = in_.Fill(frame::kHeaderBytes, read, peer_);
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
      frame::ParseHeader(in_.data().substr(0, frame::kHeaderBytes));
  if (!h.ok()) return Malformed(peer_, h.status());
  in_.Consume(frame::kHeaderBytes);
  if (h->type == static_cast<uint32_t>(frame::FrameType::kError)) return ReadError(h->length);
  if (h->type != static_cast<uint32_t>(frame::FrameType::kHelloOk) ||
      h->length != frame::kHelloOkBytes) {
    return Malformed(peer_,
                     absl::DataLossError(absl::StrCat("frame type ", h->type, " of ", h->length,
                                                      " bytes in answer to the handshake")));
  }
  RETURN_IF_ERROR(in_.Fill(frame::kHelloOkBytes, read, peer_));
  absl::StatusOr<uint32_t> version =
      frame::ParseHelloOk(in_.data().substr(0, frame::kHelloOkBytes));
  in_.Consume(frame::kHelloOkBytes);
  if (!version.ok()) return Malformed(peer_, version.status());
  if (*version != frame::kDataProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "protocol version mismatch: ", peer_, " speaks version ", *version,
        ", this client version ", frame::kDataProtocolVersion));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::pair<uint64_t, Batch>> ClientConnection::Call(const frame::Request& request,
                                                                  absl::Time deadline) {
  std::optional<Answer> answer;
  const absl::Status status =
      CallMany(absl::MakeConstSpan(&request, 1), deadline,
               [&](size_t, Answer got) { answer = std::move(got); });
  if (!answer.has_value()) return status;  // failed before any answer, e.g. sending
  return *std::move(answer);
}

absl::Status ClientConnection::CallMany(absl::Span<const frame::Request> requests,
                                        absl::Time deadline,
                                        absl::FunctionRef<void(size_t, Answer)> on_answer) {
  reusable_ = false;  // until every answer has been read
  if (requests.size() > kMaxPipelinedRequests) {
    return absl::InvalidArgumentError(
        absl::StrCat(requests.size(), " requests in one call; at most ", kMaxPipelinedRequests));
  }
  const absl::Time now = absl::Now();
  deadline = std::min(deadline, now + frame::kMaxRequestTimeout);
  const uint64_t timeout_ms = frame::TimeoutMs(deadline, now);
  out_.clear();
  for (const frame::Request& request : requests) {
    frame::Request timed = request;
    timed.timeout_ms = timeout_ms;
    frame::AppendRequest(timed, &out_);
  }
  const net::IoWait answer_wait{.deadline = deadline + kResponseGrace, .wake = cancel_};
  RETURN_IF_ERROR(stream_.SendAll(out_, answer_wait, peer_));
  if (out_.capacity() > (size_t{1} << 20)) std::string().swap(out_);
  for (size_t i = 0; i < requests.size(); ++i) {
    reusable_ = false;
    Answer answer = ReadAnswer(answer_wait);
    const bool in_step = reusable_;
    const absl::Status status = answer.status();
    on_answer(i, std::move(answer));
    if (!in_step) return status.ok() ? absl::DataLossError("connection out of step") : status;
  }
  reusable_ = true;
  return absl::OkStatus();
}

Answer ClientConnection::ReadAnswer(const net::IoWait& answer_wait) {
  auto read_first = [&](char* dst, size_t room) {
    return stream_.RecvSome(dst, room, answer_wait, peer_);
  };
  absl::Status got = in_.Fill(frame::kHeaderBytes, read_first, peer_);
  if (absl::IsDeadlineExceeded(got)) {
    return absl::DeadlineExceededError(absl::StrCat(peer_, " did not answer by the deadline (plus ",
                                                    absl::FormatDuration(kResponseGrace),
                                                    " grace)"));
  }
  RETURN_IF_ERROR(got);
  absl::StatusOr<frame::FrameHeader> h =
      frame::ParseHeader(in_.data().substr(0, frame::kHeaderBytes));
  if (!h.ok()) return Malformed(peer_, h.status());
  in_.Consume(frame::kHeaderBytes);
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
  const net::IoWait wait{.stall = kClientStallTimeout, .wake = cancel_};
  RETURN_IF_ERROR(in_.Fill(
      length, [&](char* dst, size_t room) { return stream_.RecvSome(dst, room, wait, peer_); },
      peer_));
  absl::StatusOr<frame::ErrorBody> error = frame::ParseError(in_.data().substr(0, length));
  in_.Consume(length);
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
  auto read = [&](char* dst, size_t room) { return stream_.RecvSome(dst, room, wait, peer_); };
  RETURN_IF_ERROR(in_.Fill(frame::kBatchIndexBytes, read, peer_));
  const uint64_t index = frame::ParseBatchIndex(in_.data().substr(0, frame::kBatchIndexBytes));
  in_.Consume(frame::kBatchIndexBytes);
  // The bytes land in the batch's own aligned buffer: copied from the receive buffer when they
  // came with the header (small batches), else straight from the kernel.
  std::shared_ptr<uint8_t> buffer = BufferPool::Shared().Get(size);
  if (buffer == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", size, " bytes for a batch from ", peer_));
  }
  RETURN_IF_ERROR(in_.Take(reinterpret_cast<char*>(buffer.get()), size, read, peer_));
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
  auto read = [&](char* dst, size_t room) { return stream_.RecvSome(dst, room, wait, peer_); };
  RETURN_IF_ERROR(in_.Fill(frame::kCompressedFixedBytes, read, peer_));
  absl::StatusOr<frame::CompressedBatchFixed> fixed =
      frame::ParseCompressedBatchFixed(in_.data().substr(0, frame::kCompressedFixedBytes));
  in_.Consume(frame::kCompressedFixedBytes);
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
  RETURN_IF_ERROR(in_.Take(compressed_.data(), compressed_.size(), read, peer_));
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

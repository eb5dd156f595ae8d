#include "src/transport/tcp_server_connection.h"

#include <sys/uio.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/protocol.h"
#include "src/common/status_macros.h"
#include "src/transport/token.h"

namespace croupier {
namespace {

constexpr char kComponent[] = "transport";
// How long a connection being refused lingers so that the client reads why before the close.
constexpr absl::Duration kRefusalLinger = absl::Milliseconds(200);
constexpr absl::Duration kSliceSlack = absl::Milliseconds(10);

// Why a connection ended, at a level that matches who is at fault: a misbehaving client is a
// warning, a client leaving or idling out is routine.
void LogClose(absl::string_view peer, absl::string_view stage, const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kCancelled:  // the server is stopping
      return;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kFailedPrecondition:
      return;  // logged by Handshake, where the reason is known
    case absl::StatusCode::kDataLoss:
      Log(LogLevel::kWarning, kComponent,
          absl::StrCat("closing the connection from ", peer, ": malformed ", stage, ": ",
                       status.message()));
      return;
    default:
      Log(LogLevel::kInfo, kComponent,
          absl::StrCat("closing the connection from ", peer, " during ", stage, ": ",
                       status.message()));
  }
}

}  // namespace

ServerConnection::ServerConnection(net::Socket socket, const DataServerOptions& options,
                                   BatchSource* source, const net::WakeEvent* stop,
                                   const net::TlsContext* tls)
    : stream_(std::move(socket)),
      peer_(absl::StrCat("client ", net::PeerName(stream_.fd()))),
      options_(options),
      source_(source),
      stop_(stop),
      tls_(tls) {}

void ServerConnection::Run() {
  absl::Status status = tls_ != nullptr ? StartTls() : absl::OkStatus();
  if (status.ok()) status = Handshake();
  if (!status.ok()) {
    LogClose(peer_, "handshake", status);
    if (absl::IsCancelled(status)) return;  // the socket closes with this object
    net::Stream::CloseGracefully(std::move(stream_), kRefusalLinger);
    return;
  }
  while (true) {
    absl::StatusOr<std::optional<frame::Request>> request = ReadRequest();
    if (!request.ok()) {
      status = request.status();
      LogClose(peer_, "request", status);
      break;
    }
    if (!request->has_value()) return;  // the client closed the connection
    status = Serve(**request);
    if (!status.ok()) {
      LogClose(peer_, "response", status);
      break;
    }
  }
  if (absl::IsDataLoss(status)) net::Stream::CloseGracefully(std::move(stream_), kRefusalLinger);
}

absl::Status ServerConnection::StartTls() {
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
      // A croupier client without TLS: read its token (see Handshake) and tell it why.
      std::string token(hello->token_length, '\0');
      if (stream_.RecvAll(token.data(), token.size(), wait, peer_).ok()) {
        SendError(refused).IgnoreError();
      }
      Log(LogLevel::kWarning, kComponent,
          absl::StrCat("refusing ", peer_, ": a plaintext croupier client on a TLS port"));
    } else {
      Log(LogLevel::kWarning, kComponent,
          absl::StrCat("refusing ", peer_, ": it does not speak TLS (its first bytes are neither ",
                       "a TLS handshake nor a croupier HELLO)"));
    }
    return refused;
  }
  const absl::Status status = stream_.StartTls(*tls_, "", wait, peer_);
  if (!status.ok() && !absl::IsCancelled(status)) {
    Log(LogLevel::kWarning, kComponent, absl::StrCat("refusing ", peer_, ": ", status.message()));
    return absl::UnauthenticatedError(status.message());  // logged here; LogClose stays quiet
  }
  return status;
}

absl::Status ServerConnection::Handshake() {
  const net::IoWait wait{.deadline = absl::Now() + options_.handshake_timeout, .wake = stop_};
  char prefix[frame::kHelloPrefixBytes];
  RETURN_IF_ERROR(stream_.RecvAll(prefix, sizeof(prefix), wait, peer_));
  absl::StatusOr<frame::HelloPrefix> parsed =
      frame::ParseHelloPrefix(absl::string_view(prefix, sizeof(prefix)));
  if (!parsed.ok() && !stream_.tls() && static_cast<unsigned char>(prefix[0]) == 0x16 &&
      static_cast<unsigned char>(prefix[1]) == 0x03) {
    Log(LogLevel::kWarning, kComponent,
        absl::StrCat("refusing ", peer_, ": it speaks TLS and this data server does not (start ",
                     "the producer with --tls-cert and --tls-key)"));
    return absl::UnauthenticatedError("a TLS client on a plaintext port");  // logged above
  }
  ASSIGN_OR_RETURN(const frame::HelloPrefix hello, std::move(parsed));
  // Read the token even when the version differs: leaving bytes unread would make our close a
  // reset, which can destroy the error frame before the client reads it.
  std::string token(hello.token_length, '\0');
  RETURN_IF_ERROR(stream_.RecvAll(token.data(), token.size(), wait, peer_));
  if (hello.version != kProtocolVersion) {
    const absl::Status mismatch = absl::FailedPreconditionError(
        absl::StrCat("protocol version mismatch: the data server speaks version ", kProtocolVersion,
                     ", the client version ", hello.version));
    Log(LogLevel::kWarning, kComponent, absl::StrCat("refusing ", peer_, ": ", mismatch.message()));
    SendError(mismatch).IgnoreError();
    return mismatch;
  }
  // A server without a token is open, as the dispatcher is: a client configured with a token for
  // a cluster that has none still connects.
  if (!options_.auth_token.empty() && !TokenMatches(token, options_.auth_token)) {
    const absl::Status refused = absl::UnauthenticatedError(
        token.empty() ? "the data server requires an auth token and none was given"
                      : "the data server refused the auth token");
    Log(LogLevel::kWarning, kComponent,
        absl::StrCat("refusing ", peer_, ": ", token.empty() ? "no" : "wrong", " auth token"));
    SendError(refused).IgnoreError();
    return refused;
  }
  return stream_.SendAll(frame::EncodeHelloOk(kProtocolVersion), wait, peer_);
}

absl::StatusOr<std::optional<frame::Request>> ServerConnection::ReadRequest() {
  char header[frame::kHeaderBytes];
  ASSIGN_OR_RETURN(
      const size_t got,
      stream_.RecvSome(header, sizeof(header),
                       net::IoWait{.deadline = absl::Now() + kServerIdleTimeout, .wake = stop_},
                       peer_));
  if (got == 0) return std::nullopt;
  const net::IoWait wait{.stall = kServerStallTimeout, .wake = stop_};
  RETURN_IF_ERROR(stream_.RecvAll(header + got, sizeof(header) - got, wait, peer_));
  ASSIGN_OR_RETURN(const frame::FrameHeader h,
                   frame::ParseHeader(absl::string_view(header, sizeof(header))));
  if (h.type != static_cast<uint32_t>(frame::FrameType::kGetBatch) &&
      h.type != static_cast<uint32_t>(frame::FrameType::kGetAny)) {
    return absl::DataLossError(absl::StrCat("frame type ", h.type, " is not a request"));
  }
  // Checked before allocating: the length is the client's claim, not a fact.
  if (h.length > options_.max_request_bytes) {
    return absl::DataLossError(absl::StrCat(
        "request of ", h.length, " bytes exceeds max_request_bytes ", options_.max_request_bytes));
  }
  std::string body(h.length, '\0');
  RETURN_IF_ERROR(stream_.RecvAll(body.data(), body.size(), wait, peer_));
  ASSIGN_OR_RETURN(frame::Request request, frame::ParseRequest(h, body));
  return std::optional<frame::Request>(std::move(request));
}

absl::Status ServerConnection::Serve(const frame::Request& request) {
  const absl::Time deadline = frame::DeadlineFromTimeoutMs(request.timeout_ms, absl::Now());
  std::optional<absl::StatusOr<std::pair<uint64_t, Batch>>> answer = AskSource(request, deadline);
  if (!answer.has_value()) {
    if (!stop_->notified()) return absl::UnavailableError(absl::StrCat(peer_, " went away"));
    // Tell the waiting client why. Best effort, and without the stop event, which has fired and
    // would abort the send.
    stream_
        .SendAll(frame::EncodeError(absl::UnavailableError("the data server is shutting down")),
                 net::IoWait{.deadline = absl::Now() + absl::Milliseconds(100)}, peer_)
        .IgnoreError();
    return absl::CancelledError("the data server is shutting down");
  }
  if (!answer->ok()) return SendError(answer->status());

  const auto& [index, batch] = **answer;
  const absl::string_view bytes = batch.bytes();
  // Compressed at send time, in this connection's thread: each batch is delivered once (dealt or
  // first_come), so compressing when it is made would save nothing but retries, would hold both
  // forms in the producer's buffer, and would cost the shared-memory path, which never
  // compresses. A batch that does not shrink goes as is, in a BATCH frame.
  const Codec codec = source_->CompressionOf(request.job);
  absl::StatusOr<std::string> compressed = absl::UnimplementedError("not compressed");
  if (codec != Codec::kNone && bytes.size() <= MaxCompressibleBytes(codec)) {
    compressed = Compress(codec, bytes);
    if (!compressed.ok()) {
      Log(LogLevel::kWarning, kComponent,
          absl::StrCat("sending batch ", index, " of job '", request.job,
                       "' uncompressed: ", compressed.status().message()));
    } else if (compressed->size() >= bytes.size()) {
      compressed = absl::UnimplementedError("did not shrink");
    }
  }
  absl::Status sent;
  const net::IoWait send_wait{.stall = kServerStallTimeout, .wake = stop_};
  if (compressed.ok()) {
    auto prefix = frame::EncodeCompressedBatchPrefix(index, static_cast<uint32_t>(codec),
                                                     bytes.size(), compressed->size());
    iovec iov[2] = {{prefix.data(), prefix.size()}, {compressed->data(), compressed->size()}};
    sent = stream_.SendAll(absl::MakeSpan(iov), send_wait, peer_);
  } else {
    auto prefix = frame::EncodeBatchPrefix(index, bytes.size());
    // One sendmsg of header and batch, straight from the batch buffer: no copy in user space.
    iovec iov[2] = {{prefix.data(), prefix.size()},
                    {const_cast<char*>(bytes.data()), bytes.size()}};
    sent = stream_.SendAll(absl::MakeSpan(iov), send_wait, peer_);
  }
  if (!sent.ok()) {
    if (request.type == frame::FrameType::kGetAny) {
      // The source handed this batch out once and for all; say so, since the consumer never
      // receives it.
      Log(LogLevel::kWarning, kComponent,
          absl::StrCat("batch ", index, " of job '", request.job, "' epoch ", request.epoch,
                       " was taken for ", peer_, " but not delivered: ", sent.message()));
    }
    return sent;
  }
  source_->OnServed(BatchKey{request.job, request.epoch, index}, bytes.size());
  return absl::OkStatus();
}

std::optional<absl::StatusOr<std::pair<uint64_t, Batch>>> ServerConnection::AskSource(
    const frame::Request& request, absl::Time deadline) {
  while (true) {
    const absl::Time slice_end = std::min(deadline, absl::Now() + kSourceSlice);
    absl::StatusOr<std::pair<uint64_t, Batch>> answer;
    if (request.type == frame::FrameType::kGetBatch) {
      absl::StatusOr<Batch> batch =
          source_->GetBatch(BatchKey{request.job, request.epoch, request.batch}, slice_end);
      if (batch.ok()) {
        answer = std::make_pair(request.batch, *std::move(batch));
      } else {
        answer = batch.status();
      }
    } else {
      answer = source_->GetAnyBatch(request.job, request.epoch, slice_end);
    }
    // Only a slice that ran out is worth another; a source that gave up well before the slice
    // ended meant it. The slack absorbs sources that wait on another clock and wake a hair
    // early, whose DEADLINE_EXCEEDED would otherwise reach the client long before its deadline.
    if (!absl::IsDeadlineExceeded(answer.status()) || slice_end >= deadline ||
        absl::Now() < slice_end - kSliceSlack) {
      return answer;
    }
    if (stop_->notified() || stream_.PeerHungUpOrSpoke()) return std::nullopt;
  }
}

absl::Status ServerConnection::SendError(const absl::Status& status) {
  return stream_.SendAll(frame::EncodeError(status),
                         net::IoWait{.stall = kServerStallTimeout, .wake = stop_}, peer_);
}

}  // namespace croupier

#include "src/transport/tcp_server_connection.h"

#include <sys/uio.h>

#include <algorithm>
#include <optional>
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
// Bounds on the answers held back to be written together (HoldForNext).
constexpr size_t kMaxHeldAnswers = 16;
constexpr size_t kMaxHeldBytes = size_t{256} << 10;

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
    if (status.ok() && !HoldForNext()) {
      status = Flush(net::IoWait{.stall = kServerStallTimeout, .wake = stop_});
    }
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
  if (hello.version < frame::kOldestDataProtocolVersion ||
      hello.version > frame::kDataProtocolVersion) {
    const absl::Status mismatch = absl::FailedPreconditionError(absl::StrCat(
        "protocol version mismatch: the data server speaks version ", frame::kDataProtocolVersion,
        " (and down to ", frame::kOldestDataProtocolVersion, "), the client version ",
        hello.version));
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
  // The client's own version: a version-1 client is served as before (it never pipelines).
  return stream_.SendAll(frame::EncodeHelloOk(hello.version), wait, peer_);
}

absl::StatusOr<std::optional<frame::Request>> ServerConnection::ReadRequest() {
  if (in_.empty()) {
    const net::IoWait idle{.deadline = absl::Now() + kServerIdleTimeout, .wake = stop_};
    ASSIGN_OR_RETURN(const size_t got, in_.ReadOnce([&](char* dst, size_t room) {
      return stream_.RecvSome(dst, room, idle, peer_);
    }));
    if (got == 0) return std::nullopt;
  }
  const net::IoWait wait{.stall = kServerStallTimeout, .wake = stop_};
  auto read = [&](char* dst, size_t room) { return stream_.RecvSome(dst, room, wait, peer_); };
  RETURN_IF_ERROR(in_.Fill(frame::kHeaderBytes, read, peer_));
  ASSIGN_OR_RETURN(const frame::FrameHeader h,
                   frame::ParseHeader(in_.data().substr(0, frame::kHeaderBytes)));
  if (h.type != static_cast<uint32_t>(frame::FrameType::kGetBatch) &&
      h.type != static_cast<uint32_t>(frame::FrameType::kGetAny)) {
    return absl::DataLossError(absl::StrCat("frame type ", h.type, " is not a request"));
  }
  // Checked before allocating: the length is the client's claim, not a fact.
  if (h.length > options_.max_request_bytes) {
    return absl::DataLossError(absl::StrCat(
        "request of ", h.length, " bytes exceeds max_request_bytes ", options_.max_request_bytes));
  }
  in_.Consume(frame::kHeaderBytes);
  if (h.length <= in_.capacity()) {
    RETURN_IF_ERROR(in_.Fill(h.length, read, peer_));
    ASSIGN_OR_RETURN(frame::Request request,
                     frame::ParseRequest(h, in_.data().substr(0, h.length)));
    in_.Consume(h.length);
    return std::optional<frame::Request>(std::move(request));
  }
  std::string body(h.length, '\0');
  RETURN_IF_ERROR(in_.Take(body.data(), body.size(), read, peer_));
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
    const net::IoWait brief{.deadline = absl::Now() + absl::Milliseconds(100)};
    if (Flush(brief).ok()) {
      stream_
          .SendAll(frame::EncodeError(absl::UnavailableError("the data server is shutting down")),
                   brief, peer_)
          .IgnoreError();
    }
    return absl::CancelledError("the data server is shutting down");
  }
  if (pending_.capacity() < kMaxHeldAnswers) pending_.reserve(kMaxHeldAnswers);
  Pending& out = pending_.emplace_back();
  out.any = request.type == frame::FrameType::kGetAny;
  if (!answer->ok()) {
    out.owned = frame::EncodeError(answer->status());
    pending_bytes_ += out.owned.size();
    return absl::OkStatus();
  }

  auto& [index, batch] = **answer;
  out.batch.emplace(std::move(batch));
  const absl::string_view bytes = out.batch->bytes();
  out.served = BatchKey{request.job, request.epoch, index};
  out.batch_bytes = bytes.size();
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
  return absl::OkStatus();
}

bool ServerConnection::HoldForNext() {
  if (pending_.size() >= kMaxHeldAnswers || pending_bytes_ >= kMaxHeldBytes) return false;
  // The next request, when it has arrived whole already.
  std::optional<frame::Request> next = frame::PeekGetBatch(in_.data());
  if (!next) return false;
  return source_->Ready(BatchKey{std::move(next->job), next->epoch, next->batch});
}

absl::Status ServerConnection::Flush(const net::IoWait& wait) {
  if (pending_.empty()) return absl::OkStatus();
  iovec iov[2 * kMaxHeldAnswers];
  size_t n = 0;
  for (Pending& p : pending_) {
    if (p.prefix_bytes > 0) iov[n++] = {p.prefix.data(), p.prefix_bytes};
    const absl::string_view body = p.owned.empty() ? p.batch->bytes() : absl::string_view(p.owned);
    iov[n++] = {const_cast<char*>(body.data()), body.size()};
  }
  // One sendmsg for every held answer: one trip through the kernel's TCP path and one wake-up
  // of the client for all of them.
  const absl::Status sent = stream_.SendAll(absl::MakeSpan(iov, n), wait, peer_);
  for (Pending& p : pending_) {
    if (!p.served.has_value()) continue;
    if (!sent.ok()) {
      if (p.any) {
        // The source handed this batch out once and for all; say so, since the consumer never
        // receives it.
        Log(LogLevel::kWarning, kComponent,
            absl::StrCat("batch ", p.served->batch, " of job '", p.served->job, "' epoch ",
                         p.served->epoch, " was taken for ", peer_,
                         " but not delivered: ", sent.message()));
      }
      continue;
    }
    source_->OnServed(*p.served, p.batch_bytes);
  }
  pending_.clear();
  pending_bytes_ = 0;
  return sent;
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
    // Hung up, not spoken: a pipelining client's next requests may be waiting already.
    if (stop_->notified() || stream_.PeerHungUp()) return std::nullopt;
  }
}

absl::Status ServerConnection::SendError(const absl::Status& status) {
  return stream_.SendAll(frame::EncodeError(status),
                         net::IoWait{.stall = kServerStallTimeout, .wake = stop_}, peer_);
}

}  // namespace croupier

#include "src/transport/server_connection.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/job/batch_key.h"
#include "src/net/token.h"
#include "src/transport/serve_loop.h"

namespace croupier {
namespace {

// How long a connection being refused lingers so that the client reads why before the close.
constexpr absl::Duration kRefusalLinger = absl::Milliseconds(200);
constexpr absl::Duration kSliceSlack = absl::Milliseconds(10);

}  // namespace

ServerConnection::ServerConnection(std::string peer, absl::string_view kind,
                                   uint32_t oldest_version, uint32_t version,
                                   const DataServerOptions& options, BatchSource* source,
                                   ConnectionSlot* slot)
    : peer_(std::move(peer)),
      options_(options),
      source_(source),
      slot_(slot),
      stop_(slot->stop()),
      kind_(kind),
      oldest_version_(oldest_version),
      version_(version) {}

void ServerConnection::Run() {
  absl::Status status = StartSession();
  if (status.ok()) status = Handshake();
  if (!status.ok()) {
    if (absl::IsCancelled(status)) return;  // the socket closes with this object
    // Before the handshake ends the client has proved nothing: whatever went wrong is logged
    // rate-limited, as the refusals are, so that a client failing in a loop cannot fill the log.
    if (!refused_) {
      LogRefusal(absl::IsDataLoss(status)
                     ? absl::StrCat("malformed handshake: ", status.message())
                     : std::string("it did not complete the handshake (it closed the connection, "
                                   "or was silent past the handshake timeout)"));
    }
    CloseGracefully(kRefusalLinger);
    return;
  }
  while (true) {
    absl::StatusOr<std::optional<frame::Request>> request = ReadRequest();
    if (!request.ok()) {
      status = request.status();
      LogClose("request", status);
      break;
    }
    if (!request->has_value()) return;  // the client closed the connection
    status = Serve(**request);
    if (status.ok() && !HoldForNext()) {
      status = Flush(net::IoWait{.stall = kServerStallTimeout, .wake = stop_});
    }
    if (!status.ok()) {
      LogClose("response", status);
      break;
    }
  }
  if (absl::IsDataLoss(status)) CloseGracefully(kRefusalLinger);
}

void ServerConnection::LogClose(absl::string_view stage, const absl::Status& status) const {
  switch (status.code()) {
    case absl::StatusCode::kCancelled:  // the server is stopping
      return;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kFailedPrecondition:
      return;  // logged by Handshake, where the reason is known
    case absl::StatusCode::kDataLoss:
      Log(LogLevel::kWarning, kTransportLog,
          absl::StrCat("closing the ", kind_, " from ", peer_, ": malformed ", stage, ": ",
                       status.message()));
      return;
    default:
      Log(LogLevel::kInfo, kTransportLog,
          absl::StrCat("closing the ", kind_, " from ", peer_, " during ", stage, ": ",
                       status.message()));
  }
}

absl::Status ServerConnection::RecvAll(char* dst, size_t n, const net::IoWait& wait) {
  return net::ReadFull(
      dst, 0, n, [&](char* p, size_t room) { return RecvSome(p, room, wait); }, peer_);
}

absl::Status ServerConnection::Handshake() {
  const net::IoWait wait{.deadline = absl::Now() + options_.handshake_timeout, .wake = stop_};
  char prefix[frame::kHelloPrefixBytes];
  RETURN_IF_ERROR(RecvAll(prefix, sizeof(prefix), wait));
  absl::StatusOr<frame::HelloPrefix> parsed =
      frame::ParseHelloPrefix(absl::string_view(prefix, sizeof(prefix)));
  if (!parsed.ok()) {
    return RefuseBadHello(absl::string_view(prefix, sizeof(prefix)), parsed.status());
  }
  const frame::HelloPrefix hello = *parsed;
  // Read the payload even when the version differs: leaving bytes unread would make our close a
  // reset, which can destroy the error frame before the client reads it.
  std::string client_nonce(hello.payload_length, '\0');
  RETURN_IF_ERROR(RecvAll(client_nonce.data(), client_nonce.size(), wait));
  if (hello.version < oldest_version_ || hello.version > version_) {
    const absl::Status mismatch = absl::FailedPreconditionError(
        absl::StrCat("protocol version mismatch: the data server speaks version ", version_,
                     " (and down to ", oldest_version_, "), the client version ", hello.version));
    LogRefusal(mismatch.message());
    SendError(mismatch).IgnoreError();
    return mismatch;
  }
  if (client_nonce.size() != kNonceBytes) {
    return absl::DataLossError(absl::StrCat("hello nonce of ", client_nonce.size(),
                                            " bytes; version ", hello.version, " sends ",
                                            kNonceBytes));
  }
  // Challenge: our nonce, and our proof that we hold the token, which the client checks before
  // it sends anything else. A server without a token sends no proof: a client with a token then
  // refuses it.
  ASSIGN_OR_RETURN(const std::string server_nonce, RandomBytes(kNonceBytes));
  const bool has_token = !options_.auth_token.empty();
  const std::string proof =
      has_token ? TokenProof(options_.auth_token, frame::ProofLabel(hello.version, true),
                             client_nonce, server_nonce)
                : std::string();
  RETURN_IF_ERROR(SendAll(frame::EncodeChallenge(server_nonce, proof), wait));

  // The client's AUTH, or its close when our proof did not convince it.
  char header[frame::kHeaderBytes];
  const absl::Status got = RecvAll(header, sizeof(header), wait);
  if (absl::IsUnavailable(got)) {
    const absl::Status left = absl::UnauthenticatedError(
        "the client left after the challenge (it holds another auth token, or this server has "
        "none and the client has one)");
    LogRefusal(left.message());
    return left;
  }
  RETURN_IF_ERROR(got);
  ASSIGN_OR_RETURN(const frame::FrameHeader h,
                   frame::ParseHeader(absl::string_view(header, sizeof(header))));
  if (h.type != static_cast<uint32_t>(frame::FrameType::kAuth) || h.length > kProofBytes) {
    return absl::DataLossError(absl::StrCat("frame type ", h.type, " of ", h.length,
                                            " bytes in place of AUTH"));
  }
  std::string body(h.length, '\0');
  RETURN_IF_ERROR(RecvAll(body.data(), body.size(), wait));
  ASSIGN_OR_RETURN(const std::string client_proof, frame::ParseAuth(body));
  // A server without a token is open, as the dispatcher is: any client connects.
  if (has_token && !ProofMatches(client_proof, options_.auth_token,
                                 frame::ProofLabel(hello.version, false), client_nonce,
                                 server_nonce)) {
    const absl::Status refused = absl::UnauthenticatedError(
        client_proof.empty() ? "the data server requires an auth token and none was given"
                             : "the data server refused the auth token");
    LogRefusal(client_proof.empty() ? "no auth token" : "wrong auth token");
    SendError(refused).IgnoreError();
    return refused;
  }
  // Only now does the connection count against the limits of authenticated connections.
  if (const absl::Status admitted = slot_->Authenticated(); !admitted.ok()) {
    if (!absl::IsCancelled(admitted)) {
      LogRefusal(admitted.message());
      SendError(admitted).IgnoreError();
    }
    return admitted;
  }
  // The client's own version.
  return SendAll(frame::EncodeHelloOk(hello.version), wait);
}

void ServerConnection::LogRefusal(absl::string_view reason) {
  refused_ = true;
  slot_->LogRefusal(peer_, reason);
}

absl::StatusOr<std::optional<frame::Request>> ServerConnection::ReadRequest() {
  while (true) {
    if (in_.empty()) {
      const net::IoWait idle{.deadline = absl::Now() + kServerIdleTimeout, .wake = stop_};
      ASSIGN_OR_RETURN(const size_t got, in_.ReadOnce([&](char* dst, size_t room) {
        return RecvSome(dst, room, idle);
      }));
      if (got == 0) return std::nullopt;
    }
    const net::IoWait wait{.stall = kServerStallTimeout, .wake = stop_};
    auto read = [&](char* dst, size_t room) { return RecvSome(dst, room, wait); };
    RETURN_IF_ERROR(in_.Fill(frame::kHeaderBytes, read, peer_));
    ASSIGN_OR_RETURN(const frame::FrameHeader h,
                     frame::ParseHeader(in_.data().substr(0, frame::kHeaderBytes)));
    const bool is_request = h.type == static_cast<uint32_t>(frame::FrameType::kGetBatch) ||
                            h.type == static_cast<uint32_t>(frame::FrameType::kGetAny);
    if (!is_request && !AcceptsFrame(h.type)) {
      return absl::DataLossError(absl::StrCat("frame type ", h.type, " is not a request"));
    }
    // Checked before allocating: the length is the client's claim, not a fact.
    if (h.length > options_.max_request_bytes) {
      return absl::DataLossError(absl::StrCat("request of ", h.length,
                                              " bytes exceeds max_request_bytes ",
                                              options_.max_request_bytes));
    }
    in_.Consume(frame::kHeaderBytes);
    // The body is parsed where it lies in the receive buffer when it fits there.
    absl::string_view body;
    size_t buffered = 0;
    if (h.length <= in_.capacity()) {
      RETURN_IF_ERROR(in_.Fill(h.length, read, peer_));
      body = in_.data().substr(0, h.length);
      buffered = h.length;
    } else {
      body_.resize(h.length);
      RETURN_IF_ERROR(in_.Take(body_.data(), body_.size(), read, peer_));
      body = body_;
    }
    if (is_request) {
      absl::StatusOr<frame::Request> request = frame::ParseRequest(h, body);
      in_.Consume(buffered);
      if (!request.ok()) return request.status();
      return std::optional<frame::Request>(*std::move(request));
    }
    const absl::Status handled = HandleFrame(h.type, body);
    in_.Consume(buffered);
    RETURN_IF_ERROR(handled);
  }
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
      SendAll(frame::EncodeError(absl::UnavailableError("the data server is shutting down")), brief)
          .IgnoreError();
    }
    return absl::CancelledError("the data server is shutting down");
  }
  if (served_.capacity() < kMaxHeldAnswers) served_.reserve(kMaxHeldAnswers);
  HoldAnswer(request, *std::move(answer));
  ++held_;
  return absl::OkStatus();
}

void ServerConnection::NoteServed(BatchKey key, uint64_t bytes, bool any) {
  served_.push_back(Served{std::move(key), bytes, any});
}

bool ServerConnection::HoldForNext() {
  if (held_ >= kMaxHeldAnswers || HeldFull()) return false;
  // The next request, when it has arrived whole already.
  std::optional<frame::Request> next = frame::PeekGetBatch(in_.data());
  if (!next) return false;
  return source_->Ready(BatchKey{std::move(next->job), next->epoch, next->batch});
}

absl::Status ServerConnection::Flush(const net::IoWait& wait) {
  if (held_ == 0) return absl::OkStatus();
  const absl::Status sent = WriteHeld(wait);
  for (const Served& s : served_) {
    if (!sent.ok()) {
      if (s.any) {
        // The source handed this batch out once and for all; say so, since the consumer never
        // receives it.
        Log(LogLevel::kWarning, kTransportLog,
            absl::StrCat(Describe(s.key), " was taken for ", peer_,
                         " but not delivered: ", sent.message()));
      }
      continue;
    }
    source_->OnServed(s.key, s.bytes);
  }
  served_.clear();
  DropHeld();
  held_ = 0;
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
    if (stop_->notified() || PeerHungUp()) return std::nullopt;
  }
}

absl::Status ServerConnection::SendError(const absl::Status& status) {
  return SendAll(frame::EncodeError(status),
                 net::IoWait{.stall = kServerStallTimeout, .wake = stop_});
}

}  // namespace croupier

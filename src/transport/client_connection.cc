#include "src/transport/client_connection.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/status_macros.h"
#include "src/net/token.h"

namespace croupier {

ClientConnection::ClientConnection(absl::string_view address, uint64_t max_batch_bytes,
                                   const net::WakeEvent* cancel)
    : peer_(absl::StrCat("data server ", address)),
      max_batch_bytes_(max_batch_bytes),
      cancel_(cancel) {}

absl::Status ClientConnection::Fill(size_t n, const net::IoWait& wait) {
  return in_.Fill(
      n, [&](char* dst, size_t room) { return RecvSome(dst, room, wait); }, peer_);
}

absl::Status ClientConnection::Take(char* dst, size_t n, const net::IoWait& wait) {
  return in_.Take(
      dst, n, [&](char* p, size_t room) { return RecvSome(p, room, wait); }, peer_);
}

absl::Status ClientConnection::Malformed(const absl::Status& status) const {
  return absl::DataLossError(
      absl::StrCat("malformed response from ", peer_, ": ", status.message()));
}

absl::Status ClientConnection::UnexpectedFrame(uint32_t type) const {
  return Malformed(
      absl::DataLossError(absl::StrCat("frame type ", type, " in answer to a request")));
}

absl::StatusOr<frame::FrameHeader> ClientConnection::ReadHandshakeFrame(
    const absl::Status& sent, const net::IoWait& wait) {
  // Read the answer even when sending failed: a server that refused us may have said why before
  // it closed.
  const absl::Status got = Fill(frame::kHeaderBytes, wait);
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
  if (!h.ok()) return Malformed(h.status());
  in_.Consume(frame::kHeaderBytes);
  if (h->type == static_cast<uint32_t>(frame::FrameType::kError)) return ReadError(h->length);
  return *h;
}

absl::Status ClientConnection::Handshake(uint32_t version, absl::string_view token,
                                         absl::Time deadline) {
  const net::IoWait wait{.deadline = deadline, .wake = cancel_};
  ASSIGN_OR_RETURN(const std::string client_nonce, RandomBytes(kNonceBytes));
  absl::Status sent = SendAll(frame::EncodeHello(version, client_nonce), wait);
  ASSIGN_OR_RETURN(frame::FrameHeader h, ReadHandshakeFrame(sent, wait));
  if (h.type != static_cast<uint32_t>(frame::FrameType::kChallenge) ||
      (h.length != kNonceBytes && h.length != kNonceBytes + kProofBytes)) {
    return Malformed(absl::DataLossError(absl::StrCat("frame type ", h.type, " of ", h.length,
                                                      " bytes in answer to the handshake")));
  }
  RETURN_IF_ERROR(Fill(h.length, wait));
  absl::StatusOr<frame::Challenge> challenge = frame::ParseChallenge(in_.data().substr(0, h.length));
  in_.Consume(h.length);
  if (!challenge.ok()) return Malformed(challenge.status());
  // The server proves that it holds the token before this client sends anything but its nonce or
  // accepts any batch: a process squatting the server's address, or a server of another cluster,
  // learns nothing and serves nothing.
  if (!token.empty()) {
    if (challenge->proof.empty()) {
      return absl::UnauthenticatedError(absl::StrCat(
          peer_, " has no auth token and this client has one: refusing it (a producer started "
                 "without the cluster's token, or another process listening on its address)"));
    }
    if (!ProofMatches(challenge->proof, token, frame::ProofLabel(version, /*by_server=*/true),
                      client_nonce, challenge->nonce)) {
      return absl::UnauthenticatedError(absl::StrCat(
          peer_, " did not prove that it holds this client's auth token: refusing it (a producer "
                 "with another token, or another process listening on its address)"));
    }
  }
  const std::string proof =
      token.empty() ? std::string()
                    : TokenProof(token, frame::ProofLabel(version, /*by_server=*/false),
                                 client_nonce, challenge->nonce);
  sent = SendAll(frame::EncodeAuth(proof), wait);
  ASSIGN_OR_RETURN(h, ReadHandshakeFrame(sent, wait));
  if (h.type != static_cast<uint32_t>(frame::FrameType::kHelloOk) ||
      h.length != frame::kHelloOkBytes) {
    return Malformed(absl::DataLossError(absl::StrCat("frame type ", h.type, " of ", h.length,
                                                      " bytes in answer to the handshake")));
  }
  RETURN_IF_ERROR(Fill(frame::kHelloOkBytes, wait));
  absl::StatusOr<uint32_t> spoken = frame::ParseHelloOk(in_.data().substr(0, frame::kHelloOkBytes));
  in_.Consume(frame::kHelloOkBytes);
  if (!spoken.ok()) return Malformed(spoken.status());
  if (*spoken != version) {
    return absl::FailedPreconditionError(absl::StrCat("protocol version mismatch: ", peer_,
                                                      " speaks version ", *spoken,
                                                      ", this client version ", version));
  }
  return CheckNothingLeft(/*handshake=*/true);
}

Answer ClientConnection::Call(const frame::Request& request, absl::Time deadline) {
  std::optional<Answer> answer;
  const absl::Status status = CallMany(absl::MakeConstSpan(&request, 1), deadline,
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
  AppendBeforeRequests(&out_);
  for (const frame::Request& request : requests) {
    frame::Request timed = request;
    timed.timeout_ms = timeout_ms;
    frame::AppendRequest(timed, &out_);
  }
  const net::IoWait answer_wait{.deadline = deadline + kResponseGrace, .wake = cancel_};
  RETURN_IF_ERROR(SendAll(out_, answer_wait));
  if (out_.capacity() > (size_t{1} << 20)) std::string().swap(out_);
  for (size_t i = 0; i < requests.size(); ++i) {
    reusable_ = false;
    Answer answer = ReadAnswer(answer_wait);
    const bool in_step = reusable_;
    const absl::Status status = answer.status();
    on_answer(i, std::move(answer));
    if (!in_step) return status.ok() ? absl::DataLossError("connection out of step") : status;
  }
  RETURN_IF_ERROR(CheckNothingLeft(/*handshake=*/false));
  reusable_ = true;
  return absl::OkStatus();
}

Answer ClientConnection::ReadAnswer(const net::IoWait& answer_wait) {
  absl::Status got = Fill(frame::kHeaderBytes, answer_wait);
  if (absl::IsDeadlineExceeded(got)) {
    return absl::DeadlineExceededError(absl::StrCat(peer_, " did not answer by the deadline (plus ",
                                                    absl::FormatDuration(kResponseGrace),
                                                    " grace)"));
  }
  RETURN_IF_ERROR(got);
  absl::StatusOr<frame::FrameHeader> h =
      frame::ParseHeader(in_.data().substr(0, frame::kHeaderBytes));
  if (!h.ok()) return Malformed(h.status());
  in_.Consume(frame::kHeaderBytes);
  if (h->type == static_cast<uint32_t>(frame::FrameType::kError)) return ReadError(h->length);
  return ReadBatchFrame(*h);
}

absl::Status ClientConnection::ReadError(uint64_t length) {
  if (length < frame::kErrorFixedBytes ||
      length > frame::kErrorFixedBytes + frame::kMaxErrorMessageBytes) {
    return Malformed(absl::DataLossError(absl::StrCat("ERROR frame of ", length, " bytes")));
  }
  RETURN_IF_ERROR(Fill(length, BodyWait()));
  absl::StatusOr<frame::ErrorBody> error = frame::ParseError(in_.data().substr(0, length));
  in_.Consume(length);
  if (!error.ok()) return Malformed(error.status());
  reusable_ = true;
  return absl::Status(error->code, absl::StrCat(peer_, ": ", error->message));
}

}  // namespace croupier

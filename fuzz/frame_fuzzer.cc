// Fuzz target: the data-plane frame decoders (src/transport/frame.h/.cc) and the BATCH payload,
// driven the way the TCP connections drive them (src/transport/tcp_server_connection.cc,
// tcp_client_connection.cc), without sockets.
//
// Input: one byte choosing a side, then the byte stream that side receives.
//   even: the server's view: a HELLO prefix, its token, then request frames (GET_BATCH/GET_ANY)
//         up to max_request_bytes, until the stream ends or a frame is refused;
//   odd:  the client's view: HELLO_OK or ERROR, then answers (BATCH or ERROR) until the end.
// Properties checked: every refusal is DATA_LOSS; nothing is read or allocated beyond what the
// connection code allows; accepted requests, HELLO_OKs and ERRORs encode back to the same bytes;
// a request's deadline lies within kMaxRequestTimeout; a BATCH body goes through
// Batch::FromBuffer as the client does; a BATCH_COMPRESSED body is bounded and decompressed as
// the client does (corrupt bodies are DATA_LOSS, the output never exceeds the claimed size).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "croupier/batch.h"
#include "fuzz/fuzz_util.h"
#include "src/transport/compression.h"
#include "src/transport/frame.h"

namespace croupier::fuzz {
namespace {

// The bytes a peer sent, consumed in order.
class Stream {
 public:
  explicit Stream(absl::string_view bytes) : bytes_(bytes) {}
  // The next n bytes, or false at the end (a short read is the peer closing).
  bool Take(uint64_t n, absl::string_view& out) {
    if (n > bytes_.size()) return false;
    out = bytes_.substr(0, n);
    bytes_.remove_prefix(n);
    return true;
  }

 private:
  absl::string_view bytes_;
};

constexpr uint64_t kMaxRequestBytes = 64 << 10;  // the server's default order of magnitude
constexpr uint64_t kMaxBatchBytes = 1 << 20;

void CheckRequest(const frame::FrameHeader& h, absl::string_view header, absl::string_view body) {
  auto request = frame::ParseRequest(h, body);
  if (RefusedAsDataLoss(request.status(), "request errors are DATA_LOSS")) return;
  FUZZ_CHECK(request->job.size() <= frame::kMaxJobBytes, "job name bounded");
  frame::Request canonical = *request;
  if (canonical.type == frame::FrameType::kGetAny) canonical.batch = 0;
  std::string expected = std::string(header) + std::string(body);
  if (request->type == frame::FrameType::kGetAny) {
    std::memset(expected.data() + frame::kHeaderBytes + 8, 0, 8);  // batch: ignored, written 0
  }
  FUZZ_CHECK(frame::EncodeRequest(canonical) == expected, "requests encode back");
  const absl::Time now = absl::FromUnixSeconds(1700000000);
  const absl::Time deadline = frame::DeadlineFromTimeoutMs(request->timeout_ms, now);
  FUZZ_CHECK(deadline >= now && deadline <= now + frame::kMaxRequestTimeout, "deadline clamped");
}

void Server(Stream in) {
  absl::string_view prefix, token;
  if (!in.Take(frame::kHelloPrefixBytes, prefix)) return;
  auto hello = frame::ParseHelloPrefix(prefix);
  if (RefusedAsDataLoss(hello.status(), "hello errors are DATA_LOSS")) return;
  FUZZ_CHECK(hello->payload_length <= frame::kMaxTokenBytes, "payload bounded before reading it");
  if (!in.Take(hello->payload_length, token)) return;
  FUZZ_CHECK(frame::EncodeHello(hello->version, token) == std::string(prefix) + std::string(token),
             "hello encodes back");
  while (true) {
    absl::string_view header, body;
    if (!in.Take(frame::kHeaderBytes, header)) return;
    auto h = frame::ParseHeader(header);
    if (RefusedAsDataLoss(h.status(), "header errors are DATA_LOSS")) return;
    if (h->type == static_cast<uint32_t>(frame::FrameType::kAuth)) {
      // Bounded before reading, as the server does.
      if (h->length > kProofBytes || !in.Take(h->length, body)) return;
      auto proof = frame::ParseAuth(body);
      if (RefusedAsDataLoss(proof.status(), "AUTH errors are DATA_LOSS")) return;
      FUZZ_CHECK(frame::EncodeAuth(*proof) == std::string(header) + std::string(body),
                 "AUTH encodes back");
      continue;
    }
    if (h->type != static_cast<uint32_t>(frame::FrameType::kGetBatch) &&
        h->type != static_cast<uint32_t>(frame::FrameType::kGetAny)) {
      return;
    }
    if (h->length > kMaxRequestBytes) return;  // checked before allocating, as the server does
    if (!in.Take(h->length, body)) return;
    CheckRequest(*h, header, body);
  }
}

void ClientError(const frame::FrameHeader& h, absl::string_view header, Stream& in) {
  absl::string_view body;
  if (h.length < frame::kErrorFixedBytes ||
      h.length > frame::kErrorFixedBytes + frame::kMaxErrorMessageBytes ||
      !in.Take(h.length, body)) {
    return;
  }
  auto error = frame::ParseError(body);
  if (RefusedAsDataLoss(error.status(), "ERROR errors are DATA_LOSS")) return;
  FUZZ_CHECK(error->code != absl::StatusCode::kOk, "an ERROR is never OK");
  FUZZ_CHECK(frame::EncodeError(absl::Status(error->code, error->message)) ==
                 std::string(header) + std::string(body),
             "ERROR encodes back");
}

void ClientBatch(const frame::FrameHeader& h, Stream& in) {
  absl::string_view index_bytes, batch_bytes;
  if (h.length < frame::kBatchIndexBytes) return;
  const uint64_t size = h.length - frame::kBatchIndexBytes;
  if (size > kMaxBatchBytes) return;  // refused before allocating, as the client does
  if (!in.Take(frame::kBatchIndexBytes, index_bytes) || !in.Take(size, batch_bytes)) return;
  (void)frame::ParseBatchIndex(index_bytes);
  std::shared_ptr<uint8_t> buffer = Batch::AllocateBuffer(size);
  FUZZ_CHECK(buffer != nullptr, "allocate");
  if (size > 0) std::memcpy(buffer.get(), batch_bytes.data(), size);
  auto batch = Batch::FromBuffer(std::move(buffer), size);
  FUZZ_CHECK(batch.ok() || absl::IsDataLoss(batch.status()), "batch errors are DATA_LOSS");
}

void ClientCompressedBatch(const frame::FrameHeader& h, absl::string_view header, Stream& in) {
  absl::string_view fixed_bytes, body;
  if (h.length < frame::kCompressedFixedBytes) return;
  const uint64_t compressed_size = h.length - frame::kCompressedFixedBytes;
  if (!in.Take(frame::kCompressedFixedBytes, fixed_bytes)) return;
  auto fixed = frame::ParseCompressedBatchFixed(fixed_bytes);
  if (RefusedAsDataLoss(fixed.status(), "BATCH_COMPRESSED errors are DATA_LOSS")) return;
  const auto prefix = frame::EncodeCompressedBatchPrefix(fixed->index, fixed->codec,
                                                         fixed->uncompressed_bytes, compressed_size);
  FUZZ_CHECK(absl::string_view(prefix.data(), prefix.size()) ==
                 std::string(header) + std::string(fixed_bytes),
             "BATCH_COMPRESSED prefix encodes back");
  // Refused before allocating, as the client does.
  if (!IsCompressingCodec(fixed->codec) || fixed->uncompressed_bytes > kMaxBatchBytes ||
      compressed_size >= fixed->uncompressed_bytes) {
    return;
  }
  if (!in.Take(compressed_size, body)) return;
  const uint64_t size = fixed->uncompressed_bytes;
  std::shared_ptr<uint8_t> buffer = Batch::AllocateBuffer(size);
  FUZZ_CHECK(buffer != nullptr, "allocate");
  const absl::Status s =
      Decompress(static_cast<Codec>(fixed->codec), body, reinterpret_cast<char*>(buffer.get()),
                 size);
  if (RefusedAsDataLoss(s, "decompression errors are DATA_LOSS")) return;
  auto batch = Batch::FromBuffer(std::move(buffer), size);
  FUZZ_CHECK(batch.ok() || absl::IsDataLoss(batch.status()), "batch errors are DATA_LOSS");
}

void Client(Stream in) {
  absl::string_view header, body;
  if (!in.Take(frame::kHeaderBytes, header)) return;
  auto h = frame::ParseHeader(header);
  if (!h.ok()) return;
  if (h->type == static_cast<uint32_t>(frame::FrameType::kError))
    return ClientError(*h, header, in);
  if (h->type == static_cast<uint32_t>(frame::FrameType::kChallenge)) {
    // Bounded before reading, as the client does.
    if (h->length > kNonceBytes + kProofBytes || !in.Take(h->length, body)) return;
    auto challenge = frame::ParseChallenge(body);
    if (RefusedAsDataLoss(challenge.status(), "CHALLENGE errors are DATA_LOSS")) return;
    FUZZ_CHECK(frame::EncodeChallenge(challenge->nonce, challenge->proof) ==
                   std::string(header) + std::string(body),
               "CHALLENGE encodes back");
    if (!in.Take(frame::kHeaderBytes, header)) return;
    h = frame::ParseHeader(header);
    if (!h.ok()) return;
    if (h->type == static_cast<uint32_t>(frame::FrameType::kError))
      return ClientError(*h, header, in);
  }
  if (h->type != static_cast<uint32_t>(frame::FrameType::kHelloOk) ||
      h->length != frame::kHelloOkBytes || !in.Take(frame::kHelloOkBytes, body)) {
    return;
  }
  auto version = frame::ParseHelloOk(body);
  if (!version.ok()) return;
  FUZZ_CHECK(frame::EncodeHelloOk(*version) == std::string(header) + std::string(body),
             "HELLO_OK encodes back");
  while (in.Take(frame::kHeaderBytes, header)) {
    h = frame::ParseHeader(header);
    if (!h.ok()) return;
    if (h->type == static_cast<uint32_t>(frame::FrameType::kBatch)) {
      ClientBatch(*h, in);
    } else if (h->type == static_cast<uint32_t>(frame::FrameType::kBatchCompressed)) {
      ClientCompressedBatch(*h, header, in);
    } else if (h->type == static_cast<uint32_t>(frame::FrameType::kError)) {
      ClientError(*h, header, in);
    } else {
      return;
    }
  }
}

}  // namespace
}  // namespace croupier::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  croupier::fuzz::Stream in(absl::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  if (data[0] % 2 == 0) {
    croupier::fuzz::Server(in);
  } else {
    croupier::fuzz::Client(in);
  }
  return 0;
}

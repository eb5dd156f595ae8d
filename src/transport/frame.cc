#include "src/transport/frame.h"

#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "src/net/token.h"

namespace croupier::frame {
namespace {

// Little-endian fields, written byte by byte so that the format does not depend on the host.
template <typename T>
void Put(char* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
template <typename T>
T Get(const char* p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

std::string Frame(FrameType type, size_t body_bytes) {
  std::string out(kHeaderBytes + body_bytes, '\0');
  const auto header = EncodeHeader(type, body_bytes);
  std::memcpy(out.data(), header.data(), header.size());
  return out;
}

// The longest prefix of `s` of at most `n` bytes that does not split a UTF-8 sequence.
absl::string_view CutUtf8(absl::string_view s, size_t n) {
  if (s.size() <= n) return s;
  size_t end = n;
  while (end > 0 && (static_cast<uint8_t>(s[end]) & 0xc0) == 0x80) --end;
  return s.substr(0, end);
}

}  // namespace

std::string EncodeHello(uint32_t version, absl::string_view payload) {
  std::string out(kHelloPrefixBytes, '\0');
  std::memcpy(out.data(), kHelloMagic, sizeof(kHelloMagic));
  Put<uint32_t>(out.data() + 4, version);
  Put<uint32_t>(out.data() + 8, static_cast<uint32_t>(payload.size()));
  out.append(payload.data(), payload.size());
  return out;
}

absl::StatusOr<HelloPrefix> ParseHelloPrefix(absl::string_view prefix) {
  if (prefix.size() != kHelloPrefixBytes) {
    return absl::DataLossError(absl::StrCat("hello of ", prefix.size(), " bytes"));
  }
  if (std::memcmp(prefix.data(), kHelloMagic, sizeof(kHelloMagic)) != 0) {
    return absl::DataLossError("bad magic in hello (not a croupier data client)");
  }
  HelloPrefix hello;
  hello.version = Get<uint32_t>(prefix.data() + 4);
  hello.payload_length = Get<uint32_t>(prefix.data() + 8);
  if (Get<uint32_t>(prefix.data() + 12) != 0) {
    return absl::DataLossError("reserved field of hello is not 0");
  }
  if (hello.payload_length > kMaxTokenBytes) {
    return absl::DataLossError(absl::StrCat("hello payload of ", hello.payload_length,
                                            " bytes exceeds the limit of ", kMaxTokenBytes));
  }
  return hello;
}

std::string ProofLabel(uint32_t version, bool by_server) {
  return absl::StrCat("croupier data v", version, by_server ? " server" : " client");
}

std::string EncodeChallenge(absl::string_view nonce, absl::string_view proof) {
  std::string out = Frame(FrameType::kChallenge, nonce.size() + proof.size());
  std::memcpy(out.data() + kHeaderBytes, nonce.data(), nonce.size());
  if (!proof.empty()) {
    std::memcpy(out.data() + kHeaderBytes + nonce.size(), proof.data(), proof.size());
  }
  return out;
}

absl::StatusOr<Challenge> ParseChallenge(absl::string_view body) {
  if (body.size() != kNonceBytes && body.size() != kNonceBytes + kProofBytes) {
    return absl::DataLossError(absl::StrCat("CHALLENGE body of ", body.size(), " bytes"));
  }
  return Challenge{std::string(body.substr(0, kNonceBytes)),
                   std::string(body.substr(kNonceBytes))};
}

std::string EncodeAuth(absl::string_view proof) {
  std::string out = Frame(FrameType::kAuth, proof.size());
  if (!proof.empty()) std::memcpy(out.data() + kHeaderBytes, proof.data(), proof.size());
  return out;
}

absl::StatusOr<std::string> ParseAuth(absl::string_view body) {
  if (!body.empty() && body.size() != kProofBytes) {
    return absl::DataLossError(absl::StrCat("AUTH body of ", body.size(), " bytes"));
  }
  return std::string(body);
}

std::array<char, kHeaderBytes> EncodeHeader(FrameType type, uint64_t length) {
  std::array<char, kHeaderBytes> out{};
  Put<uint32_t>(out.data(), static_cast<uint32_t>(type));
  Put<uint64_t>(out.data() + 8, length);
  return out;
}

absl::StatusOr<FrameHeader> ParseHeader(absl::string_view header) {
  if (header.size() != kHeaderBytes) {
    return absl::DataLossError(absl::StrCat("frame header of ", header.size(), " bytes"));
  }
  if (Get<uint32_t>(header.data() + 4) != 0) {
    return absl::DataLossError("reserved field of frame header is not 0");
  }
  return FrameHeader{Get<uint32_t>(header.data()), Get<uint64_t>(header.data() + 8)};
}

std::string EncodeRequest(const Request& request) {
  std::string out;
  AppendRequest(request, &out);
  return out;
}

void AppendRequest(const Request& request, std::string* out) {
  const size_t at = out->size();
  out->resize(at + kHeaderBytes + kRequestFixedBytes + request.job.size());
  const auto header = EncodeHeader(request.type, kRequestFixedBytes + request.job.size());
  std::memcpy(out->data() + at, header.data(), header.size());
  char* body = out->data() + at + kHeaderBytes;
  Put<uint64_t>(body, request.epoch);
  Put<uint64_t>(body + 8, request.type == FrameType::kGetBatch ? request.batch : 0);
  Put<uint64_t>(body + 16, request.timeout_ms);
  Put<uint32_t>(body + 24, static_cast<uint32_t>(request.job.size()));
  Put<uint32_t>(body + 28, 0);
  std::memcpy(body + kRequestFixedBytes, request.job.data(), request.job.size());
}

absl::StatusOr<Request> ParseRequest(const FrameHeader& header, absl::string_view body) {
  Request request;
  if (header.type == static_cast<uint32_t>(FrameType::kGetBatch)) {
    request.type = FrameType::kGetBatch;
  } else if (header.type == static_cast<uint32_t>(FrameType::kGetAny)) {
    request.type = FrameType::kGetAny;
  } else {
    return absl::DataLossError(absl::StrCat("frame type ", header.type, " is not a request"));
  }
  if (body.size() != header.length || body.size() < kRequestFixedBytes) {
    return absl::DataLossError(absl::StrCat("request body of ", body.size(), " bytes"));
  }
  const uint32_t job_length = Get<uint32_t>(body.data() + 24);
  if (job_length > kMaxJobBytes || kRequestFixedBytes + job_length != body.size()) {
    return absl::DataLossError(absl::StrCat("request job length ", job_length,
                                            " does not match its body of ", body.size(), " bytes"));
  }
  if (Get<uint32_t>(body.data() + 28) != 0) {
    return absl::DataLossError("reserved field of request is not 0");
  }
  request.epoch = Get<uint64_t>(body.data());
  request.batch = Get<uint64_t>(body.data() + 8);
  request.timeout_ms = Get<uint64_t>(body.data() + 16);
  request.job.assign(body.data() + kRequestFixedBytes, job_length);
  return request;
}

std::optional<Request> PeekGetBatch(absl::string_view buffered) {
  if (buffered.size() < kHeaderBytes) return std::nullopt;
  absl::StatusOr<FrameHeader> h = ParseHeader(buffered.substr(0, kHeaderBytes));
  if (!h.ok() || h->type != static_cast<uint32_t>(FrameType::kGetBatch) ||
      h->length > buffered.size() - kHeaderBytes) {
    return std::nullopt;
  }
  absl::StatusOr<Request> request = ParseRequest(*h, buffered.substr(kHeaderBytes, h->length));
  if (!request.ok()) return std::nullopt;
  return *std::move(request);
}

std::string EncodeHelloOk(uint32_t version) {
  std::string out = Frame(FrameType::kHelloOk, kHelloOkBytes);
  Put<uint32_t>(out.data() + kHeaderBytes, version);
  return out;
}

absl::StatusOr<uint32_t> ParseHelloOk(absl::string_view body) {
  if (body.size() != kHelloOkBytes || Get<uint32_t>(body.data() + 4) != 0) {
    return absl::DataLossError(absl::StrCat("malformed HELLO_OK body of ", body.size(), " bytes"));
  }
  return Get<uint32_t>(body.data());
}

std::string EncodeError(const absl::Status& status) {
  const absl::string_view message = CutUtf8(status.message(), kMaxErrorMessageBytes);
  std::string out = Frame(FrameType::kError, kErrorFixedBytes + message.size());
  char* body = out.data() + kHeaderBytes;
  // An OK status is a caller's bug; sending it as UNKNOWN keeps the peer's contract (never OK).
  const uint32_t code = status.ok() ? static_cast<uint32_t>(absl::StatusCode::kUnknown)
                                    : static_cast<uint32_t>(status.code());
  Put<uint32_t>(body, code);
  Put<uint32_t>(body + 4, static_cast<uint32_t>(message.size()));
  // An empty message's data() may be null, and memcpy from null is undefined even for 0 bytes.
  if (!message.empty()) std::memcpy(body + kErrorFixedBytes, message.data(), message.size());
  return out;
}

absl::StatusOr<ErrorBody> ParseError(absl::string_view body) {
  if (body.size() < kErrorFixedBytes) {
    return absl::DataLossError(absl::StrCat("ERROR body of ", body.size(), " bytes"));
  }
  const uint32_t code = Get<uint32_t>(body.data());
  const uint32_t length = Get<uint32_t>(body.data() + 4);
  if (code < 1 || code > 16) {
    return absl::DataLossError(absl::StrCat("ERROR frame with status code ", code));
  }
  if (length > kMaxErrorMessageBytes || kErrorFixedBytes + length != body.size()) {
    return absl::DataLossError(absl::StrCat("ERROR message length ", length,
                                            " does not match its body of ", body.size(), " bytes"));
  }
  return ErrorBody{static_cast<absl::StatusCode>(code), std::string(body.substr(kErrorFixedBytes))};
}

std::array<char, kBatchPrefixBytes> EncodeBatchPrefix(uint64_t index, uint64_t batch_bytes) {
  std::array<char, kBatchPrefixBytes> out{};
  const auto header = EncodeHeader(FrameType::kBatch, kBatchIndexBytes + batch_bytes);
  std::memcpy(out.data(), header.data(), header.size());
  Put<uint64_t>(out.data() + kHeaderBytes, index);
  return out;
}

std::array<char, kHeaderBytes + kCompressedFixedBytes> EncodeCompressedBatchPrefix(
    uint64_t index, uint32_t codec, uint64_t uncompressed_bytes, uint64_t compressed_bytes) {
  std::array<char, kHeaderBytes + kCompressedFixedBytes> out{};
  const auto header =
      EncodeHeader(FrameType::kBatchCompressed, kCompressedFixedBytes + compressed_bytes);
  std::memcpy(out.data(), header.data(), header.size());
  char* body = out.data() + kHeaderBytes;
  Put<uint64_t>(body, index);
  Put<uint32_t>(body + 8, codec);
  Put<uint64_t>(body + 16, uncompressed_bytes);
  return out;
}

absl::StatusOr<CompressedBatchFixed> ParseCompressedBatchFixed(absl::string_view fixed) {
  if (fixed.size() < kCompressedFixedBytes) {
    return absl::DataLossError(absl::StrCat("BATCH_COMPRESSED body of ", fixed.size(), " bytes"));
  }
  if (Get<uint32_t>(fixed.data() + 12) != 0) {
    return absl::DataLossError("reserved field of BATCH_COMPRESSED is not 0");
  }
  return CompressedBatchFixed{Get<uint64_t>(fixed.data()), Get<uint32_t>(fixed.data() + 8),
                              Get<uint64_t>(fixed.data() + 16)};
}

uint64_t ParseBatchIndex(absl::string_view index_bytes) {
  return index_bytes.size() < kBatchIndexBytes ? 0 : Get<uint64_t>(index_bytes.data());
}

uint64_t TimeoutMs(absl::Time deadline, absl::Time now) {
  if (deadline == absl::InfiniteFuture()) return kNoTimeout;
  if (deadline <= now) return 0;
  const absl::Duration left = absl::Ceil(deadline - now, absl::Milliseconds(1));
  const int64_t ms = absl::ToInt64Milliseconds(left);
  // Anything beyond the server's clamp means the same; stay far from kNoTimeout.
  const int64_t cap = absl::ToInt64Milliseconds(kMaxRequestTimeout);
  return static_cast<uint64_t>(ms > cap ? cap : ms);
}

absl::Time DeadlineFromTimeoutMs(uint64_t timeout_ms, absl::Time now) {
  const uint64_t cap = static_cast<uint64_t>(absl::ToInt64Milliseconds(kMaxRequestTimeout));
  const uint64_t ms = timeout_ms > cap ? cap : timeout_ms;
  return now + absl::Milliseconds(static_cast<int64_t>(ms));
}

}  // namespace croupier::frame

// The data-plane wire format of the TCP transport: encoding and parsing only, no sockets.
// docs/protocol.md describes the same format for reimplementers.
//
// Data-plane protocol version 1 is that of kProtocolVersion 1 (src/common/protocol.h; bump it on
// any incompatible change here); kProtocolVersion 2 changed only the control plane. Every
// integer is little-endian; every reserved field is written 0 and must read 0.
//
// A connection opens with the client's HELLO: 16 bytes, then a payload:
//   0 char[4] magic "CRDP"   4 u32 protocol version   8 u32 payload_length (<= 4096)
//   12 u32 reserved          16 payload_length bytes
// The payload is, from version 3, the client's nonce (kNonceBytes random bytes); in versions 1
// and 2 it was the auth token itself. A server reads the whole payload whatever the version, and
// answers a version it does not speak with ERROR (and closes). The 16-byte HELLO prefix and the
// HELLO_OK and ERROR frames are frozen across protocol versions, so that peers of different
// versions can always tell each other why they cannot talk.
//
// Version 3: mutual authentication by challenge and response; the token never crosses the
// connection. To a HELLO of its version the server answers CHALLENGE (or ERROR):
// type 22 CHALLENGE (server -> client), body 32 or 64 bytes:
//   0 the server's nonce (kNonceBytes random bytes)   32 the server's proof (kProofBytes), present
//   only when the server has a token: TokenProof(token, ProofLabel(version, server), client
//   nonce, server nonce) (src/net/token.h).
// The client checks the proof before it sends anything else. A client with a token refuses a
// server without a proof or with a wrong one (UNAUTHENTICATED naming the address) and closes the
// connection: it has sent nothing but its nonce. Otherwise it sends
// type 23 AUTH (client -> server), body 0 or 32 bytes: the client's proof, TokenProof(token,
//   ProofLabel(version, client), client nonce, server nonce); empty when the client has no token.
// The server with a token checks it and answers HELLO_OK, or ERROR UNAUTHENTICATED (and closes);
// a server without a token answers HELLO_OK to any AUTH.
//
// Data-plane versions: a client states kDataProtocolVersion (3) in its HELLO; a server accepts
// kOldestDataProtocolVersion (3) to kDataProtocolVersion and answers HELLO_OK with the client's
// version. Version 1 is that of the control plane's kProtocolVersion 1; version 2 adds
// pipelining; version 3 replaces the token in the HELLO by challenge and response (a version-3
// server refuses versions 1 and 2, whose clients send the token in the clear).
//
// Then the client sends request frames; the server answers each with one response frame, in the
// order of the requests. A version-1 client sends one request at a time; a version-2 client may
// send several before reading any answer (pipelining, at most kMaxPipelinedRequests in
// client_connection.h), and the server reads and serves them one after the other (a request
// waiting in its buffer does not count as the client going away). Every frame is a 16-byte header
// followed by `length` bytes of body:
//   0 u32 type   4 u32 reserved   8 u64 length (of the body)
//
// type 1 GET_BATCH (client -> server), body 32 + job_length bytes:
//   0 u64 epoch   8 u64 batch   16 u64 timeout_ms   24 u32 job_length (<= 4096)   28 u32 reserved
//   32 job_length bytes of job name
// type 2 GET_ANY (client -> server): the same body; batch is 0 and ignored.
//   timeout_ms counts from when the server has read the request; 2^64-1 means none. The server
//   clamps it to kMaxRequestTimeout and hands the deadline to its BatchSource.
//   The server drops the connection when length > its max_request_bytes or length != 32 +
//   job_length.
// type 16 HELLO_OK (server -> client), body 8 bytes:
//   0 u32 the protocol version spoken (the client's; see the versions above)   4 u32 reserved
// type 17 ERROR (server -> client), body 8 + message_length bytes:
//   0 u32 code (absl::StatusCode, 1..16)   4 u32 message_length (<= 16384)   8 message (UTF-8)
// type 18 BATCH (server -> client), body 8 + n bytes:
//   0 u64 global batch index   8 the n bytes of one batch buffer (layout in croupier/batch.h)
//   The client refuses n > its max_batch_bytes (before allocating) and validates the bytes with
//   Batch::FromBuffer.
// type 21 BATCH_COMPRESSED (server -> client), body 24 + m bytes: only for a job whose
//   JobSpec.compression is not "none", and only when compressing made the batch smaller.
//   0 u64 global batch index   8 u32 codec (1 zstd, 2 lz4)   12 u32 reserved
//   16 u64 uncompressed size n   24 the m bytes of one zstd frame or lz4 block (compression.h)
//   The client refuses n > its max_batch_bytes and a codec it does not know (before allocating),
//   decompresses into a buffer of exactly n bytes (DATA_LOSS naming the server and the batch
//   when the body does not decompress to exactly n bytes) and validates them as for BATCH.
// A peer that receives anything else (unknown type, reserved bits set, inconsistent lengths)
// closes the connection.
#ifndef CROUPIER_SRC_TRANSPORT_FRAME_H_
#define CROUPIER_SRC_TRANSPORT_FRAME_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "src/common/protocol.h"
#include "src/net/token.h"

namespace croupier::frame {

inline constexpr uint32_t kDataProtocolVersion = 3;
inline constexpr uint32_t kOldestDataProtocolVersion = 3;

inline constexpr char kHelloMagic[4] = {'C', 'R', 'D', 'P'};
inline constexpr size_t kHelloPrefixBytes = 16;
inline constexpr size_t kHeaderBytes = 16;
inline constexpr size_t kRequestFixedBytes = 32;
inline constexpr size_t kHelloOkBytes = 8;
inline constexpr size_t kErrorFixedBytes = 8;
inline constexpr size_t kBatchIndexBytes = 8;
// What precedes the batch bytes of a BATCH frame: the header and the batch index.
inline constexpr size_t kBatchPrefixBytes = kHeaderBytes + kBatchIndexBytes;
// The fixed part of a BATCH_COMPRESSED body: index, codec, reserved, uncompressed size.
inline constexpr size_t kCompressedFixedBytes = 24;

inline constexpr uint32_t kMaxTokenBytes = 4096;
inline constexpr uint32_t kMaxJobBytes = 4096;
inline constexpr uint32_t kMaxErrorMessageBytes = 16384;
inline constexpr uint64_t kNoTimeout = ~uint64_t{0};
inline constexpr absl::Duration kMaxRequestTimeout = absl::Hours(24);

enum class FrameType : uint32_t {
  kGetBatch = 1,
  kGetAny = 2,
  kHelloOk = 16,
  kError = 17,
  kBatch = 18,
  kBatchCompressed = 21,  // 19 and 20 are the shared-memory frames (shm_transport.h)
  kChallenge = 22,
  kAuth = 23,
};

// The HELLO, payload included (the client's nonce from version 3).
std::string EncodeHello(uint32_t version, absl::string_view payload);
struct HelloPrefix {
  uint32_t version = 0;
  uint32_t payload_length = 0;
};
// Parses the first kHelloPrefixBytes of a HELLO. DATA_LOSS on a wrong magic, reserved bits or a
// payload longer than kMaxTokenBytes. The version is returned, not checked.
absl::StatusOr<HelloPrefix> ParseHelloPrefix(absl::string_view prefix);

struct FrameHeader {
  uint32_t type = 0;  // a FrameType, unchecked: the reader decides what it accepts
  uint64_t length = 0;
};
std::array<char, kHeaderBytes> EncodeHeader(FrameType type, uint64_t length);
// Parses kHeaderBytes bytes. DATA_LOSS when the reserved field is not 0.
absl::StatusOr<FrameHeader> ParseHeader(absl::string_view header);

struct Request {
  FrameType type = FrameType::kGetBatch;  // kGetBatch or kGetAny
  std::string job;
  uint64_t epoch = 0;
  uint64_t batch = 0;
  uint64_t timeout_ms = kNoTimeout;
};
// The whole frame. Requires request.job.size() <= kMaxJobBytes.
std::string EncodeRequest(const Request& request);
// The same, appended to `out`.
void AppendRequest(const Request& request, std::string* out);
// Parses the body of a request frame whose header is `header`. DATA_LOSS naming the problem on a
// type that is not a request or inconsistent lengths.
absl::StatusOr<Request> ParseRequest(const FrameHeader& header, absl::string_view body);
// The GET_BATCH request at the start of `buffered` (bytes received and not yet read), when one has
// arrived whole and parses; nullopt otherwise (another frame, a partial one, or a malformed one,
// which the server's read of the next frame reports). Lets a server see whether the next answer
// could go out with the one it is about to write.
std::optional<Request> PeekGetBatch(absl::string_view buffered);

// The label of a proof (TokenProof, src/net/token.h) in protocol `version`, by the server or by
// the client: "croupier data v<version> server" or "... client". Tying the proof to the version
// keeps a proof made for one transport (their versions differ) from passing on another, and to
// the direction keeps a peer from answering a challenge with the other side's proof.
std::string ProofLabel(uint32_t version, bool by_server);

// Whole CHALLENGE frame: `nonce` (kNonceBytes) then `proof` (empty or kProofBytes).
std::string EncodeChallenge(absl::string_view nonce, absl::string_view proof);
struct Challenge {
  std::string nonce;
  std::string proof;  // empty: the server has no token
};
// DATA_LOSS when the body is neither 32 nor 64 bytes.
absl::StatusOr<Challenge> ParseChallenge(absl::string_view body);
// Whole AUTH frame carrying `proof` (empty or kProofBytes).
std::string EncodeAuth(absl::string_view proof);
// The proof of an AUTH body. DATA_LOSS when the body is neither 0 nor 32 bytes.
absl::StatusOr<std::string> ParseAuth(absl::string_view body);

// Whole HELLO_OK frame, and its body's parser (DATA_LOSS when malformed).
std::string EncodeHelloOk(uint32_t version);
absl::StatusOr<uint32_t> ParseHelloOk(absl::string_view body);

// The whole ERROR frame carrying `status` (not OK); a message longer than kMaxErrorMessageBytes is
// cut, at a UTF-8 character boundary.
std::string EncodeError(const absl::Status& status);
// What an ERROR body carries: a code that is not OK, and a message.
struct ErrorBody {
  absl::StatusCode code = absl::StatusCode::kUnknown;
  std::string message;
};
// DATA_LOSS when the body is malformed (code out of 1..16, lengths inconsistent).
absl::StatusOr<ErrorBody> ParseError(absl::string_view body);

// The header and batch index that precede `batch_bytes` bytes of batch in a BATCH frame.
std::array<char, kBatchPrefixBytes> EncodeBatchPrefix(uint64_t index, uint64_t batch_bytes);

// The header and fixed fields that precede `compressed_bytes` bytes of a BATCH_COMPRESSED frame.
std::array<char, kHeaderBytes + kCompressedFixedBytes> EncodeCompressedBatchPrefix(
    uint64_t index, uint32_t codec, uint64_t uncompressed_bytes, uint64_t compressed_bytes);
struct CompressedBatchFixed {
  uint64_t index = 0;
  uint32_t codec = 0;  // unchecked: the reader decides which codecs it knows
  uint64_t uncompressed_bytes = 0;
};
// Parses the first kCompressedFixedBytes of a BATCH_COMPRESSED body. DATA_LOSS on a short input
// or a reserved field that is not 0.
absl::StatusOr<CompressedBatchFixed> ParseCompressedBatchFixed(absl::string_view fixed);

// The global batch index of a BATCH body: its first kBatchIndexBytes bytes.
uint64_t ParseBatchIndex(absl::string_view index_bytes);

// `deadline` as a timeout_ms field: rounded up, 0 when past, kNoTimeout when infinite.
uint64_t TimeoutMs(absl::Time deadline, absl::Time now);
// The inverse on the server, clamped to now + kMaxRequestTimeout.
absl::Time DeadlineFromTimeoutMs(uint64_t timeout_ms, absl::Time now);

}  // namespace croupier::frame

#endif  // CROUPIER_SRC_TRANSPORT_FRAME_H_

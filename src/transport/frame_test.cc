#include "src/transport/frame.h"

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace croupier::frame {
namespace {

using ::testing::HasSubstr;

absl::string_view Header(const std::string& frame) {
  return absl::string_view(frame).substr(0, kHeaderBytes);
}
absl::string_view Body(const std::string& frame) {
  return absl::string_view(frame).substr(kHeaderBytes);
}

TEST(TransportFrameTest, HelloLayoutIsPinned) {
  const std::string hello = EncodeHello(1, "tok");
  EXPECT_EQ(hello, std::string("CRDP\x01\0\0\0\x03\0\0\0\0\0\0\0tok", 19));
  auto prefix = ParseHelloPrefix(absl::string_view(hello).substr(0, kHelloPrefixBytes));
  ASSERT_TRUE(prefix.ok()) << prefix.status();
  EXPECT_EQ(prefix->version, 1u);
  EXPECT_EQ(prefix->payload_length, 3u);
}

TEST(TransportFrameTest, HelloPrefixRejectsWhatIsNotAHello) {
  std::string hello = EncodeHello(1, "");
  hello[0] = 'G';
  EXPECT_THAT(ParseHelloPrefix(hello).status().message(), HasSubstr("bad magic"));
  hello = EncodeHello(1, "");
  hello[13] = 1;
  EXPECT_EQ(ParseHelloPrefix(hello).status().code(), absl::StatusCode::kDataLoss);
  hello = EncodeHello(1, std::string(kMaxTokenBytes + 1, 't')).substr(0, kHelloPrefixBytes);
  EXPECT_THAT(ParseHelloPrefix(hello).status().message(), HasSubstr("exceeds the limit of 4096"));
  EXPECT_EQ(ParseHelloPrefix("CRDP").status().code(), absl::StatusCode::kDataLoss);
}

// CHALLENGE carries the server's nonce and, when it has a token, its proof; AUTH the client's
// proof or nothing. Other lengths are malformed.
TEST(TransportFrameTest, ChallengeAndAuthRoundTrip) {
  const std::string nonce(kNonceBytes, 'n'), proof(kProofBytes, 'p');
  for (const std::string& with : {std::string(), proof}) {
    const std::string challenge = EncodeChallenge(nonce, with);
    auto header = ParseHeader(Header(challenge));
    ASSERT_TRUE(header.ok());
    EXPECT_EQ(header->type, static_cast<uint32_t>(FrameType::kChallenge));
    EXPECT_EQ(header->length, kNonceBytes + with.size());
    auto parsed = ParseChallenge(Body(challenge));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->nonce, nonce);
    EXPECT_EQ(parsed->proof, with);
    const std::string auth = EncodeAuth(with);
    EXPECT_EQ(ParseHeader(Header(auth))->type, static_cast<uint32_t>(FrameType::kAuth));
    auto got = ParseAuth(Body(auth));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, with);
  }
  EXPECT_EQ(ParseChallenge(std::string(33, 'x')).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ParseChallenge("").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ParseAuth(std::string(31, 'x')).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(ProofLabel(3, true), ProofLabel(3, false));
  EXPECT_NE(ProofLabel(3, true), ProofLabel(1004, true));
}

TEST(TransportFrameTest, RequestsRoundTrip) {
  const Request get{FrameType::kGetBatch, "train", 3, 77, 1500};
  const std::string bytes = EncodeRequest(get);
  // Pinned: the protocol document shows these bytes.
  EXPECT_EQ(bytes, std::string("\x01\0\0\0\0\0\0\0\x25\0\0\0\0\0\0\0"
                               "\x03\0\0\0\0\0\0\0\x4d\0\0\0\0\0\0\0"
                               "\xdc\x05\0\0\0\0\0\0\x05\0\0\0\0\0\0\0train",
                               53));
  auto header = ParseHeader(Header(bytes));
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->type, 1u);
  EXPECT_EQ(header->length, kRequestFixedBytes + 5);
  auto parsed = ParseRequest(*header, Body(bytes));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->type, FrameType::kGetBatch);
  EXPECT_EQ(parsed->job, "train");
  EXPECT_EQ(parsed->epoch, 3u);
  EXPECT_EQ(parsed->batch, 77u);
  EXPECT_EQ(parsed->timeout_ms, 1500u);

  const std::string any = EncodeRequest({FrameType::kGetAny, "j", 9, 123, kNoTimeout});
  auto any_parsed = ParseRequest(*ParseHeader(Header(any)), Body(any));
  ASSERT_TRUE(any_parsed.ok()) << any_parsed.status();
  EXPECT_EQ(any_parsed->type, FrameType::kGetAny);
  EXPECT_EQ(any_parsed->batch, 0u);  // not sent for GET_ANY
  EXPECT_EQ(any_parsed->timeout_ms, kNoTimeout);
}

TEST(TransportFrameTest, RequestParsingChecksEveryLength) {
  std::string bytes = EncodeRequest({FrameType::kGetBatch, "train", 1, 2, 3});
  FrameHeader header = *ParseHeader(Header(bytes));
  // A job length that disagrees with the body.
  std::string body(Body(bytes));
  body[24] = 6;
  EXPECT_THAT(ParseRequest(header, body).status().message(), HasSubstr("does not match"));
  body[24] = static_cast<char>(0xff);
  body[27] = static_cast<char>(0xff);
  EXPECT_EQ(ParseRequest(header, body).status().code(), absl::StatusCode::kDataLoss);
  // A body shorter than its fixed part.
  FrameHeader short_header{1, 8};
  EXPECT_EQ(ParseRequest(short_header, Body(bytes).substr(0, 8)).status().code(),
            absl::StatusCode::kDataLoss);
  // Not a request type.
  FrameHeader wrong_type{static_cast<uint32_t>(FrameType::kBatch), header.length};
  EXPECT_THAT(ParseRequest(wrong_type, Body(bytes)).status().message(),
              HasSubstr("is not a request"));
  // Reserved fields.
  body = std::string(Body(bytes));
  body[29] = 1;
  EXPECT_THAT(ParseRequest(header, body).status().message(), HasSubstr("reserved"));
  std::string raw_header(Header(bytes));
  raw_header[5] = 1;
  EXPECT_THAT(ParseHeader(raw_header).status().message(), HasSubstr("reserved"));
}

TEST(TransportFrameTest, PeekGetBatchSeesOnlyAWholeWellFormedGetBatch) {
  const std::string get = EncodeRequest({FrameType::kGetBatch, "train", 1, 2, 3});
  // Whole, and followed by more bytes: the request.
  std::optional<Request> r = PeekGetBatch(get + "more");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->job, "train");
  EXPECT_EQ(r->epoch, 1u);
  EXPECT_EQ(r->batch, 2u);
  // Every partial prefix: not yet.
  for (size_t n = 0; n < get.size(); ++n) EXPECT_FALSE(PeekGetBatch(get.substr(0, n))) << n;
  // Another type of request.
  EXPECT_FALSE(PeekGetBatch(EncodeRequest({FrameType::kGetAny, "train", 1, 0, 3})));
  // A body whose lengths do not add up (the job name's length disagrees with the body).
  std::string bad = get;
  bad[kHeaderBytes + 24] = 6;
  EXPECT_FALSE(PeekGetBatch(bad));
}

TEST(TransportFrameTest, ErrorsRoundTripAndLongMessagesAreCut) {
  const std::string bytes = EncodeError(absl::NotFoundError("batch 4 is elsewhere"));
  auto header = ParseHeader(Header(bytes));
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->type, static_cast<uint32_t>(FrameType::kError));
  auto error = ParseError(Body(bytes));
  ASSERT_TRUE(error.ok()) << error.status();
  EXPECT_EQ(error->code, absl::StatusCode::kNotFound);
  EXPECT_EQ(error->message, "batch 4 is elsewhere");

  // 'é' is two bytes; the cut must not split one.
  std::string message(kMaxErrorMessageBytes - 1, 'a');
  message += "\xc3\xa9tail";
  auto cut = ParseError(Body(EncodeError(absl::InternalError(message))));
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_EQ(cut->message, std::string(kMaxErrorMessageBytes - 1, 'a'));
}

// Regression (fuzz/frame_fuzzer): a status without a message (absl::CancelledError()) has a null
// message().data(), which EncodeError passed to memcpy: undefined behavior that UBSan reports.
TEST(TransportFrameTest, AnErrorWithoutAMessageRoundTrips) {
  const std::string bytes = EncodeError(absl::CancelledError());
  EXPECT_EQ(bytes.size(), kHeaderBytes + kErrorFixedBytes);
  auto error = ParseError(Body(bytes));
  ASSERT_TRUE(error.ok()) << error.status();
  EXPECT_EQ(error->code, absl::StatusCode::kCancelled);
  EXPECT_EQ(error->message, "");
}

TEST(TransportFrameTest, MalformedErrorBodiesAreDataLoss) {
  std::string body(Body(EncodeError(absl::NotFoundError("x"))));
  std::string bad_code = body;
  bad_code[0] = 0;  // OK is not an error
  EXPECT_THAT(ParseError(bad_code).status().message(), HasSubstr("status code 0"));
  bad_code[0] = 17;
  EXPECT_EQ(ParseError(bad_code).status().code(), absl::StatusCode::kDataLoss);
  std::string bad_length = body;
  bad_length[4] = 2;
  EXPECT_THAT(ParseError(bad_length).status().message(), HasSubstr("does not match"));
  EXPECT_EQ(ParseError("abc").status().code(), absl::StatusCode::kDataLoss);
}

TEST(TransportFrameTest, HelloOkAndBatchPrefix) {
  const std::string ok = EncodeHelloOk(1);
  EXPECT_EQ(ParseHeader(Header(ok))->length, kHelloOkBytes);
  EXPECT_EQ(*ParseHelloOk(Body(ok)), 1u);
  EXPECT_EQ(ParseHelloOk("1234").status().code(), absl::StatusCode::kDataLoss);

  const auto prefix = EncodeBatchPrefix(513, 1000);
  const absl::string_view view(prefix.data(), prefix.size());
  auto header = ParseHeader(view.substr(0, kHeaderBytes));
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->type, static_cast<uint32_t>(FrameType::kBatch));
  EXPECT_EQ(header->length, 1000 + kBatchIndexBytes);
  EXPECT_EQ(ParseBatchIndex(view.substr(kHeaderBytes)), 513u);
}

TEST(TransportFrameTest, TimeoutsRoundUpAndAreClamped) {
  const absl::Time now = absl::FromUnixSeconds(1000);
  EXPECT_EQ(TimeoutMs(now + absl::Microseconds(1500), now), 2u);
  EXPECT_EQ(TimeoutMs(now - absl::Seconds(1), now), 0u);
  EXPECT_EQ(TimeoutMs(absl::InfiniteFuture(), now), kNoTimeout);
  EXPECT_EQ(TimeoutMs(now + absl::Hours(100), now), 24u * 3600 * 1000);
  EXPECT_EQ(DeadlineFromTimeoutMs(250, now), now + absl::Milliseconds(250));
  EXPECT_EQ(DeadlineFromTimeoutMs(kNoTimeout, now), now + kMaxRequestTimeout);
}

TEST(TransportFrameTest, CompressedBatchPrefixLayoutIsPinned) {
  const auto prefix = EncodeCompressedBatchPrefix(7, 2, 1000, 300);
  const std::string bytes(prefix.data(), prefix.size());
  EXPECT_EQ(bytes, std::string("\x15\0\0\0\0\0\0\0\x44\x01\0\0\0\0\0\0"  // type 21, 24 + 300
                               "\x07\0\0\0\0\0\0\0\x02\0\0\0\0\0\0\0\xe8\x03\0\0\0\0\0\0",
                               40));
  auto fixed = ParseCompressedBatchFixed(absl::string_view(bytes).substr(kHeaderBytes));
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ(fixed->index, 7u);
  EXPECT_EQ(fixed->codec, 2u);
  EXPECT_EQ(fixed->uncompressed_bytes, 1000u);
  std::string reserved = bytes.substr(kHeaderBytes);
  reserved[12] = 1;
  EXPECT_EQ(ParseCompressedBatchFixed(reserved).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ParseCompressedBatchFixed(reserved.substr(0, 23)).status().code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace croupier::frame

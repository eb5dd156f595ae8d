#include "src/transport/recv_buffer.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/transport/frame.h"

namespace croupier::net {
namespace {

using ::testing::HasSubstr;

// A stream that hands out `bytes` in pieces of at most `piece` bytes per read, then ends.
struct FakeStream {
  std::string bytes;
  size_t piece;
  size_t at = 0;
  int reads = 0;
  absl::StatusOr<size_t> Read(char* dst, size_t room) {
    ++reads;
    const size_t n = std::min({piece, room, bytes.size() - at});
    std::copy_n(bytes.data() + at, n, dst);
    at += n;
    return n;
  }
};

// Frames as a server writes them: header, index and body, back to back.
std::string Frames(const std::vector<std::string>& bodies) {
  std::string out;
  for (size_t i = 0; i < bodies.size(); ++i) {
    const auto prefix = frame::EncodeBatchPrefix(i, bodies[i].size());
    out.append(prefix.data(), prefix.size());
    out += bodies[i];
  }
  return out;
}

// Parses every frame of `stream` as the clients do: header, index, then the body via Take.
std::vector<std::string> ParseAll(FakeStream& stream, RecvBuffer& in, size_t count) {
  auto read = [&](char* dst, size_t room) { return stream.Read(dst, room); };
  std::vector<std::string> got;
  for (size_t i = 0; i < count; ++i) {
    EXPECT_TRUE(in.Fill(frame::kBatchPrefixBytes, read, "peer").ok());
    auto h = frame::ParseHeader(in.data().substr(0, frame::kHeaderBytes));
    EXPECT_TRUE(h.ok());
    EXPECT_EQ(frame::ParseBatchIndex(in.data().substr(frame::kHeaderBytes, 8)), i);
    in.Consume(frame::kBatchPrefixBytes);
    std::string body(h->length - frame::kBatchIndexBytes, '\0');
    EXPECT_TRUE(in.Take(body.data(), body.size(), read, "peer").ok());
    got.push_back(body);
  }
  return got;
}

TEST(RecvBufferTest, ManySmallFramesCostOneRead) {
  const std::vector<std::string> bodies = {std::string(4096, 'a'), std::string(4096, 'b'),
                                           std::string(100, 'c'), std::string(4096, 'd')};
  FakeStream stream{Frames(bodies), 1 << 20};
  RecvBuffer in;
  EXPECT_EQ(ParseAll(stream, in, bodies.size()), bodies);
  EXPECT_EQ(stream.reads, 1);
  EXPECT_TRUE(in.empty());
}

TEST(RecvBufferTest, FramesSplitAtEveryByteParseTheSame) {
  const std::vector<std::string> bodies = {std::string(300, 'x'), "", std::string(17, 'y')};
  for (size_t piece : {1, 2, 7, 23, 24, 25, 1000}) {
    FakeStream stream{Frames(bodies), piece};
    RecvBuffer in(64);  // small, so that frames straddle compactions
    EXPECT_EQ(ParseAll(stream, in, bodies.size()), bodies) << "piece " << piece;
    EXPECT_TRUE(in.empty());
  }
}

TEST(RecvBufferTest, LargeBodyGoesStraightToTheDestination) {
  const std::vector<std::string> bodies = {std::string(1 << 20, 'L'), std::string(10, 's')};
  FakeStream stream{Frames(bodies), 256 << 10};
  RecvBuffer in(4096);
  EXPECT_EQ(ParseAll(stream, in, bodies.size()), bodies);
  // Reads of the large body are not capped by the 4 KiB buffer.
  EXPECT_LE(stream.reads, 8);
}

TEST(RecvBufferTest, CloseMidFrameNamesThePeerAndTheCount) {
  FakeStream stream{std::string(10, 'z'), 3};
  RecvBuffer in;
  auto read = [&](char* dst, size_t room) { return stream.Read(dst, room); };
  absl::Status s = in.Fill(16, read, "data server x:1");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("connection closed by data server x:1 after 10 of 16 bytes"));

  FakeStream body_stream{std::string(100, 'z'), 30};
  RecvBuffer in2(64);
  auto read2 = [&](char* dst, size_t room) { return body_stream.Read(dst, room); };
  std::string dst(200, '\0');
  s = in2.Take(dst.data(), dst.size(), read2, "peer");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("after 100 of 200 bytes"));
}

TEST(RecvBufferTest, ReadErrorsPassThrough) {
  RecvBuffer in;
  auto failing = [](char*, size_t) -> absl::StatusOr<size_t> {
    return absl::DeadlineExceededError("timed out receiving from peer");
  };
  EXPECT_EQ(in.Fill(1, failing, "peer").code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(in.ReadOnce(failing).status().code(), absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace croupier::net

// Tests of the TCP transport's wire behaviour that the shared suite cannot express: raw bytes
// sent to the server, and a scripted fake server that sends the client what a real one never
// would.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/protocol.h"
#include "src/net/socket.h"
#include "src/transport/compression.h"
#include "src/transport/frame.h"
#include "src/transport/transport.h"
#include "src/transport/transport_testing.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;

constexpr char kTcpToken[] = "tcp-token";

using ::croupier::testing::In;

net::Socket RawConnect(const std::string& address) {
  auto socket = net::Dial(address, net::IoWait{.deadline = In(absl::Seconds(5))});
  EXPECT_TRUE(socket.ok()) << socket.status();
  return socket.ok() ? *std::move(socket) : net::Socket();
}

// Errors are ignored: a server may rightly close before it has read everything we send.
void SendRaw(const net::Socket& socket, absl::string_view bytes) {
  net::SendAll(socket.fd(), bytes, net::IoWait{.deadline = In(absl::Seconds(5))}, "test peer")
      .IgnoreError();
}

struct RawFrame {
  frame::FrameHeader header;
  std::string body;
};

absl::StatusOr<RawFrame> ReadFrame(const net::Socket& socket) {
  const net::IoWait wait{.deadline = In(absl::Seconds(5))};
  char header[frame::kHeaderBytes];
  absl::Status got = net::RecvAll(socket.fd(), header, sizeof(header), wait, "test peer");
  if (!got.ok()) return got;
  absl::StatusOr<frame::FrameHeader> h = frame::ParseHeader(absl::string_view(header, 16));
  if (!h.ok()) return h.status();
  if (h->length > (1 << 20)) return absl::OutOfRangeError("frame too long for a test");
  std::string body(h->length, '\0');
  got = net::RecvAll(socket.fd(), body.data(), body.size(), wait, "test peer");
  if (!got.ok()) return got;
  return RawFrame{*h, std::move(body)};
}

// True when the peer closes the connection (cleanly or by reset) within `within`; what it sends
// before is discarded.
bool ClosedByPeer(const net::Socket& socket, absl::Duration within = absl::Seconds(5)) {
  const absl::Time until = In(within);
  char sink[4096];
  while (true) {
    auto got =
        net::RecvSome(socket.fd(), sink, sizeof(sink), net::IoWait{.deadline = until}, "test peer");
    if (!got.ok()) return absl::IsUnavailable(got.status());
    if (*got == 0) return true;
  }
}

// A completed handshake with a real server.
net::Socket RawHandshake(const std::string& address) {
  net::Socket socket = RawConnect(address);
  const absl::Status done =
      testing::RawClientHandshake(socket.fd(), frame::kDataProtocolVersion, kTcpToken);
  EXPECT_TRUE(done.ok()) << done;
  return socket;
}

// A one-connection server that plays `script` after the client's HELLO and AUTH (its CHALLENGE
// proves kTcpToken); the script answers AUTH. Thread-compatible.
class FakeServer {
 public:
  explicit FakeServer(std::function<void(net::Socket&)> script) {
    auto listener = net::Listen("127.0.0.1", 0);
    EXPECT_TRUE(listener.ok()) << listener.status();
    listener_ = *std::move(listener);
    address_ = absl::StrCat("127.0.0.1:", net::LocalPort(listener_.fd()));
    thread_ = std::thread([this, script = std::move(script)] {
      pollfd p{listener_.fd(), POLLIN, 0};
      if (::poll(&p, 1, 10000) != 1) return;
      net::Socket socket(::accept4(listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK));
      if (testing::RawServerHandshake(socket.fd(), frame::kDataProtocolVersion, kTcpToken)
              .auth.empty()) {
        return;
      }
      script(socket);
    });
  }
  ~FakeServer() { thread_.join(); }
  const std::string& address() const { return address_; }

 private:
  net::Socket listener_;
  std::string address_;
  std::thread thread_;
};

// Answers the hello, then answers the first request with `response`, then waits for the client
// to close.
std::function<void(net::Socket&)> Respond(std::string response) {
  return [response = std::move(response)](net::Socket& socket) {
    SendRaw(socket, frame::EncodeHelloOk(frame::kDataProtocolVersion));
    if (!ReadFrame(socket).ok()) return;
    SendRaw(socket, response);
    ClosedByPeer(socket);
  };
}

DataClientOptions ClientOptions() {
  DataClientOptions options;
  options.auth_token = kTcpToken;
  return options;
}

// What a client gets fetching batch `index` of job "train" from a fake server that answers with
// `response`: the fetch's status, and the server's address (which its errors name).
struct FetchResult {
  absl::Status status;
  std::string server;
};
FetchResult FetchFromServerAnswering(std::string response, uint64_t index) {
  FakeServer fake(Respond(std::move(response)));
  auto client = Transport::Tcp()->Connect(fake.address(), ClientOptions());
  if (!client.ok()) return {client.status(), fake.address()};
  return {(*client)->Fetch({"train", 0, index}, In(absl::Seconds(5))).status(), fake.address()};
}

class TcpTransportTest : public ::testing::Test {
 protected:
  ~TcpTransportTest() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  void StartServer(DataServerOptions options = {}) {
    options.auth_token = kTcpToken;
    auto server = Transport::Tcp()->StartServer(options, &source_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  // A fetch through a fresh client: the server still serves.
  void ExpectServes() {
    const Batch batch = source_.PutMade({"check", 0, 0}, 8 << 10, 77);
    auto client = Transport::Tcp()->Connect(server_->address(), ClientOptions());
    ASSERT_TRUE(client.ok()) << client.status();
    testing::ExpectFetched(**client, {"check", 0, 0}, batch, absl::Seconds(10));
  }

  testing::TestGuard guard_{absl::Seconds(60)};
  testing::FakeBatchSource source_;
  std::unique_ptr<DataServer> server_;
};

TEST_F(TcpTransportTest, AddressNamesTheBoundPort) {
  StartServer();
  EXPECT_GT(server_->port(), 0);
  EXPECT_EQ(server_->address(), absl::StrCat("127.0.0.1:", server_->port()));
  EXPECT_EQ(Transport::Tcp()->name(), "tcp");
}

TEST_F(TcpTransportTest, PortInUseIsUnavailable) {
  StartServer();
  DataServerOptions options;
  options.port = server_->port();
  auto second = Transport::Tcp()->StartServer(options, &source_);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  EXPECT_THAT(second.status().message(), HasSubstr("Address already in use"));
}

TEST_F(TcpTransportTest, BadAddressIsInvalidArgument) {
  auto client = Transport::Tcp()->Connect("no-port-here", ClientOptions());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument) << client.status();
  EXPECT_THAT(client.status().message(), HasSubstr("no-port-here"));
}

TEST_F(TcpTransportTest, OverlongJobNameIsInvalidArgument) {
  StartServer();
  auto client = Transport::Tcp()->Connect(server_->address(), ClientOptions());
  ASSERT_TRUE(client.ok()) << client.status();
  const std::string job(frame::kMaxJobBytes + 1, 'j');
  auto got = (*client)->Fetch({job, 0, 0}, In(absl::Seconds(5)));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr("job name of 4097 bytes exceeds 4096"));
  auto any = (*client)->FetchAny(job, 0, In(absl::Seconds(5)));
  EXPECT_EQ(any.status().code(), absl::StatusCode::kInvalidArgument) << any.status();
}

TEST_F(TcpTransportTest, VersionMismatchIsRefusedNamingBothVersions) {
  StartServer();
  ::testing::internal::CaptureStderr();
  net::Socket socket = RawConnect(server_->address());
  SendRaw(socket, frame::EncodeHello(frame::kDataProtocolVersion + 1, kTcpToken));
  auto answer = ReadFrame(socket);
  EXPECT_TRUE(ClosedByPeer(socket));
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(answer.ok()) << answer.status();
  ASSERT_EQ(answer->header.type, static_cast<uint32_t>(frame::FrameType::kError));
  auto error = frame::ParseError(answer->body);
  ASSERT_TRUE(error.ok()) << error.status();
  EXPECT_EQ(error->code, absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(error->message,
              HasSubstr(absl::StrCat("speaks version ", frame::kDataProtocolVersion)));
  EXPECT_THAT(error->message,
              HasSubstr(absl::StrCat("client version ", frame::kDataProtocolVersion + 1)));
  EXPECT_THAT(log, HasSubstr("refuses client 127.0.0.1:"));
}

TEST_F(TcpTransportTest, ClientRefusesAServerOfAnotherVersion) {
  FakeServer fake([](net::Socket& socket) {
    SendRaw(socket, frame::EncodeHelloOk(frame::kDataProtocolVersion + 1));
    ClosedByPeer(socket);
  });
  auto client = Transport::Tcp()->Connect(fake.address(), ClientOptions());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kFailedPrecondition) << client.status();
  EXPECT_THAT(client.status().message(),
              HasSubstr(absl::StrCat(fake.address(), " speaks version ",
                                     frame::kDataProtocolVersion + 1)));
  EXPECT_THAT(client.status().message(),
              HasSubstr(absl::StrCat("this client version ", frame::kDataProtocolVersion)));
}

// A server of an older version (2) reads the HELLO prefix and its payload, which are frozen
// across versions, and answers ERROR: the client reports the server's reason, and it sent no token.
TEST_F(TcpTransportTest, AnOlderServerSaysWhyItCannotTalkAndGetsNoToken) {
  auto listener = net::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status();
  const std::string address = absl::StrCat("127.0.0.1:", net::LocalPort(listener->fd()));
  std::string payload;
  std::thread server([&] {
    pollfd p{listener->fd(), POLLIN, 0};
    if (::poll(&p, 1, 10000) != 1) return;
    net::Socket socket(::accept4(listener->fd(), nullptr, nullptr, SOCK_NONBLOCK));
    const net::IoWait wait{.deadline = In(absl::Seconds(5))};
    char prefix[frame::kHelloPrefixBytes];
    if (!net::RecvAll(socket.fd(), prefix, sizeof(prefix), wait, "client").ok()) return;
    auto hello = frame::ParseHelloPrefix(absl::string_view(prefix, sizeof(prefix)));
    if (!hello.ok()) return;
    payload.resize(hello->payload_length);
    if (!net::RecvAll(socket.fd(), payload.data(), payload.size(), wait, "client").ok()) return;
    SendRaw(socket, frame::EncodeError(absl::FailedPreconditionError(absl::StrCat(
                        "protocol version mismatch: the data server speaks version 2 (and down to "
                        "1), the client version ",
                        hello->version))));
    ClosedByPeer(socket);
  });
  auto client = Transport::Tcp()->Connect(address, ClientOptions());
  server.join();
  EXPECT_EQ(client.status().code(), absl::StatusCode::kFailedPrecondition) << client.status();
  EXPECT_THAT(client.status().message(),
              HasSubstr(absl::StrCat("data server ", address,
                                     ": protocol version mismatch: the data server speaks "
                                     "version 2 (and down to 1), the client version 3")));
  EXPECT_EQ(payload.size(), kNonceBytes);
  EXPECT_EQ(payload.find(kTcpToken), std::string::npos);
}

struct Garbage {
  std::string name;
  bool after_handshake;
  std::string bytes;
  std::string logged;  // what the server's warning says
};

std::vector<Garbage> GarbageCases() {
  std::string huge_token = frame::EncodeHello(kProtocolVersion, "");
  huge_token[8] = huge_token[9] = huge_token[10] = huge_token[11] = '\xff';
  std::string reserved = frame::EncodeRequest({frame::FrameType::kGetBatch, "train", 0, 0, 100});
  reserved[4] = 1;
  std::string job_mismatch =
      frame::EncodeRequest({frame::FrameType::kGetBatch, "train", 0, 0, 100});
  job_mismatch[frame::kHeaderBytes + 24] = 4;
  auto header = [](uint32_t type, uint64_t length) {
    auto h = frame::EncodeHeader(static_cast<frame::FrameType>(type), length);
    return std::string(h.data(), h.size());
  };
  std::string noise(64 << 10, '\0');
  for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<char>(i * 131 + 7);
  return {
      {"http", false, "GET / HTTP/1.1\r\nHost: example\r\n\r\n", "bad magic"},
      {"noise", false, noise, "malformed handshake"},
      {"huge_token", false, huge_token, "exceeds the limit"},
      {"unknown_type", true, header(99, 8) + "12345678", "frame type 99"},
      {"response_type", true, header(18, 8) + "12345678", "is not a request"},
      {"huge_length", true, header(1, uint64_t{1} << 40), "exceeds max_request_bytes"},
      {"reserved_bits", true, reserved, "reserved"},
      {"job_mismatch", true, job_mismatch, "does not match"},
  };
}

TEST_F(TcpTransportTest, GarbageClosesThatConnectionOnlyAndIsLogged) {
  StartServer();
  for (const Garbage& garbage : GarbageCases()) {
    SCOPED_TRACE(garbage.name);
    ::testing::internal::CaptureStderr();
    {
      net::Socket socket = garbage.after_handshake ? RawHandshake(server_->address())
                                                   : RawConnect(server_->address());
      SendRaw(socket, garbage.bytes);
      EXPECT_TRUE(ClosedByPeer(socket));
    }
    const std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_THAT(log, HasSubstr(garbage.after_handshake
                                   ? "closing the connection from client 127.0.0.1:"
                                   : "refuses client 127.0.0.1:"));
    EXPECT_THAT(log, HasSubstr(garbage.logged));
    ExpectServes();
  }
}

TEST_F(TcpTransportTest, SilentClientIsDroppedAfterTheHandshakeTimeout) {
  DataServerOptions options;
  options.handshake_timeout = absl::Milliseconds(200);
  StartServer(options);
  for (absl::string_view partial : {"", "CRD"}) {
    net::Socket socket = RawConnect(server_->address());
    SendRaw(socket, partial);
    const absl::Time start = absl::Now();
    EXPECT_TRUE(ClosedByPeer(socket, absl::Seconds(3)));
    EXPECT_GE(absl::Now() - start, absl::Milliseconds(150));
  }
  ExpectServes();
}

// Clients without the token flood the handshake slots, silent ones (held until the server closes
// them) and ones refused for the token, in a loop; a client with the token that connects
// meanwhile gets its batch within 3 s, because a new connection evicts the oldest one still in
// its handshake (of its host when its host's slots are full, of all when all are) instead of
// being refused. The server's threads stay bounded meanwhile.
struct FloodCase {
  std::vector<std::string> sources;  // where the flood comes from
  int silent = 0;                    // threads per source
  int looping = 0;
  std::string eviction;  // the log names the slots that were full
};

void ExpectAFetchThroughTheFlood(DataServer& server, testing::FakeBatchSource& source,
                                 const FloodCase& flood_case) {
  const Batch batch = source.PutMade({"train", 0, 3}, 8 << 10, 5);
  const int threads_before = testing::CountThreads();
  ::testing::internal::CaptureStderr();
  testing::HandshakeFlood flood(server.port(), flood_case.sources, flood_case.silent,
                                flood_case.looping);
  const int flood_threads =
      static_cast<int>(flood_case.sources.size()) * (flood_case.silent + flood_case.looping);
  // The flood takes every handshake slot it can.
  for (const absl::Time until = In(absl::Seconds(5));
       flood.connections() < static_cast<uint64_t>(flood_threads) && absl::Now() < until;) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  absl::SleepFor(absl::Milliseconds(300));
  const testing::Fetched fetched = testing::FetchRetrying(
      Transport::Tcp(), server.address(), ClientOptions(), {"train", 0, 3}, absl::Seconds(10));
  int peak_threads = 0;
  for (int i = 0; i < 20; ++i) {
    peak_threads = std::max(peak_threads, testing::CountThreads());
    absl::SleepFor(absl::Milliseconds(10));
  }
  flood.Stop();
  const std::string log = ::testing::internal::GetCapturedStderr();
  std::printf("first batch after %s in %d attempts (%s); flood: %llu connections, %llu evicted, "
              "%llu refused; threads %d before, %d at most during (%d of them the flood's)\n",
              absl::FormatDuration(fetched.took).c_str(), fetched.attempts,
              fetched.batch.ok() ? "OK" : std::string(fetched.batch.status().message()).c_str(),
              static_cast<unsigned long long>(flood.connections()),
              static_cast<unsigned long long>(flood.dropped()),
              static_cast<unsigned long long>(flood.refused()), threads_before, peak_threads,
              flood_threads);
  ASSERT_TRUE(fetched.batch.ok()) << fetched.batch.status();
  EXPECT_EQ(fetched.batch->ContentHash(), batch.ContentHash());
  EXPECT_LT(fetched.took, absl::Seconds(3)) << fetched.attempts << " attempts";
  EXPECT_GT(flood.dropped(), 0u);
  EXPECT_THAT(log, HasSubstr(flood_case.eviction)) << log;
  // One thread per connection in its handshake (64) or evicted and ending (64 at most), and the
  // client's.
  EXPECT_LE(peak_threads, threads_before + flood_threads + 2 * 64 + 4);
}

TEST_F(TcpTransportTest, AClientWithTheTokenGetsThroughAFloodOfHandshakesFromItsOwnAddress) {
  StartServer();  // 64 handshake slots, 16 per address
  ExpectAFetchThroughTheFlood(
      *server_, source_,
      {.sources = {"127.0.0.1"},
       .silent = 32,
       .looping = 8,
       .eviction = "evicted from its handshake for a newer connection (the data server has 16 "
                   "connections from 127.0.0.1 in their handshake)"});
}

TEST_F(TcpTransportTest, AClientWithTheTokenGetsThroughAFloodOfHandshakesFromManyAddresses) {
  StartServer();
  ExpectAFetchThroughTheFlood(
      *server_, source_,
      {.sources = {"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"},
       .silent = 14,  // under the 16 of an address, over the 64 of all
       .eviction = "evicted from its handshake for a newer connection (the data server has 64 "
                   "connections in their handshake)"});
}

// Clients of versions 1 and 2 (which sent the token in the HELLO) are refused, saying why. And
// requests written back to back (pipelined) are answered in order, the ready ones in one write.
TEST_F(TcpTransportTest, OlderClientsAreRefusedAndPipelinedRequestsAreServed) {
  StartServer();
  for (uint32_t version : {1u, 2u}) {
    SCOPED_TRACE(absl::StrCat("version ", version));
    net::Socket socket = RawConnect(server_->address());
    SendRaw(socket, frame::EncodeHello(version, kTcpToken));
    auto answer = ReadFrame(socket);
    ASSERT_TRUE(answer.ok()) << answer.status();
    ASSERT_EQ(answer->header.type, static_cast<uint32_t>(frame::FrameType::kError));
    auto error = frame::ParseError(answer->body);
    ASSERT_TRUE(error.ok());
    EXPECT_EQ(error->code, absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(error->message, HasSubstr(absl::StrCat("the client version ", version)));
  }
  for (uint64_t i = 0; i < 3; ++i) source_.Put({"train", 0, i}, testing::MakeBatch(4096, i));
  net::Socket socket = RawHandshake(server_->address());
  std::string requests;
  for (uint64_t i = 0; i < 3; ++i) {
    frame::AppendRequest({frame::FrameType::kGetBatch, "train", 0, i, 5000}, &requests);
  }
  SendRaw(socket, requests);
  for (uint64_t i = 0; i < 3; ++i) {
    auto got = ReadFrame(socket);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->header.type, static_cast<uint32_t>(frame::FrameType::kBatch));
    EXPECT_EQ(frame::ParseBatchIndex(got->body.substr(0, 8)), i);
    auto batch = Batch::FromBytes(absl::string_view(got->body).substr(8));
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_EQ(batch->ContentHash(), testing::MakeBatch(4096, i).ContentHash());
  }
}

TEST_F(TcpTransportTest, ClientVanishingMidBatchDoesNotHurtTheServer) {
  StartServer();
  // Large enough to fill both socket buffers, so that the server is still writing when the
  // client goes: without MSG_NOSIGNAL, that write raises SIGPIPE and ends this process.
  const Batch big = testing::MakeBatch(32 << 20, 5);
  source_.Put({"train", 0, 0}, big);
  source_.PutAny("train", 1, 6, big);
  ::testing::internal::CaptureStderr();
  const frame::Request requests[] = {{frame::FrameType::kGetBatch, "train", 0, 0, 5000},
                                     {frame::FrameType::kGetAny, "train", 1, 0, 5000}};
  for (const frame::Request& request : requests) {
    net::Socket socket = RawHandshake(server_->address());
    SendRaw(socket, frame::EncodeRequest(request));
    // Our FIN first, then the reset of the close below, makes the server's next write fail with
    // EPIPE (a reset alone gives ECONNRESET), which is the error that raises SIGPIPE.
    ::shutdown(socket.fd(), SHUT_WR);
    char some[1000];
    ASSERT_TRUE(net::RecvAll(socket.fd(), some, sizeof(some),
                             net::IoWait{.deadline = In(absl::Seconds(5))}, "server")
                    .ok());
    // Unread bytes make the close a reset.
  }
  // Let the server notice before checking its log.
  absl::SleepFor(absl::Milliseconds(300));
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(log, HasSubstr("batch 6 of job 'train' epoch 1 was taken for client 127.0.0.1:"));
  ExpectServes();
  auto client = Transport::Tcp()->Connect(server_->address(), ClientOptions());
  ASSERT_TRUE(client.ok()) << client.status();
  auto got = (*client)->Fetch({"train", 0, 0}, In(absl::Seconds(20)));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->ContentHash(), big.ContentHash());
}

TEST_F(TcpTransportTest, StaleIdleConnectionIsReplaced) {
  StartServer();
  const int port = server_->port();
  auto client = Transport::Tcp()->Connect(server_->address(), ClientOptions());
  ASSERT_TRUE(client.ok()) << client.status();
  server_->Shutdown();  // closes the client's idle pooled connection
  DataServerOptions options;
  options.port = port;
  StartServer(options);
  const Batch batch = source_.PutMade({"train", 0, 9}, 4 << 10, 3);
  testing::ExpectFetched(**client, {"train", 0, 9}, batch, absl::Seconds(10));
}

TEST_F(TcpTransportTest, MalformedBatchFromTheServerIsDataLoss) {
  const std::string garbage(100, 'g');
  const auto prefix = frame::EncodeBatchPrefix(3, garbage.size());
  const FetchResult got =
      FetchFromServerAnswering(std::string(prefix.data(), prefix.size()) + garbage, 3);
  EXPECT_EQ(got.status.code(), absl::StatusCode::kDataLoss) << got.status;
  EXPECT_THAT(got.status.message(),
              HasSubstr("malformed batch 3 from data server " + got.server));
}

TEST_F(TcpTransportTest, WrongBatchIndexFromTheServerIsDataLoss) {
  const Batch batch = testing::MakeBatch(4 << 10, 1);
  const auto prefix = frame::EncodeBatchPrefix(7, batch.bytes().size());
  const FetchResult got = FetchFromServerAnswering(
      std::string(prefix.data(), prefix.size()) + std::string(batch.bytes()), 3);
  EXPECT_EQ(got.status.code(), absl::StatusCode::kDataLoss) << got.status;
  EXPECT_THAT(got.status.message(), HasSubstr("answered batch 7 to a request for batch 3"));
}

TEST_F(TcpTransportTest, UnknownResponseFromTheServerIsDataLoss) {
  const auto header = frame::EncodeHeader(static_cast<frame::FrameType>(99), 0);
  FakeServer fake(Respond(std::string(header.data(), header.size())));
  auto client = Transport::Tcp()->Connect(fake.address(), ClientOptions());
  ASSERT_TRUE(client.ok()) << client.status();
  auto got = (*client)->FetchAny("train", 0, In(absl::Seconds(5)));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr("frame type 99"));
  EXPECT_THAT(got.status().message(), HasSubstr(fake.address()));
}

TEST_F(TcpTransportTest, ErrorFrameWithAnOkCodeIsDataLoss) {
  std::string error = frame::EncodeError(absl::NotFoundError("x"));
  error[frame::kHeaderBytes] = 0;
  const FetchResult got = FetchFromServerAnswering(error, 0);
  EXPECT_EQ(got.status.code(), absl::StatusCode::kDataLoss) << got.status;
  EXPECT_THAT(got.status.message(), HasSubstr("status code 0"));
}

TEST_F(TcpTransportTest, HugeClaimedBatchIsRefusedBeforeAllocating) {
  const auto prefix = frame::EncodeBatchPrefix(0, uint64_t{1} << 62);
  const FetchResult got = FetchFromServerAnswering(std::string(prefix.data(), prefix.size()), 0);
  EXPECT_EQ(got.status.code(), absl::StatusCode::kResourceExhausted) << got.status;
  EXPECT_THAT(got.status.message(), HasSubstr("exceeds max_batch_bytes 4294967296"));
}

// A BATCH_COMPRESSED frame of `batch` with `codec`, its body optionally replaced.
std::string CompressedFrame(uint64_t index, Codec codec, const Batch& batch,
                            std::optional<std::string> body = std::nullopt,
                            std::optional<uint64_t> claimed = std::nullopt) {
  std::string compressed = body.has_value() ? *body : *Compress(codec, batch.bytes());
  const auto prefix = frame::EncodeCompressedBatchPrefix(
      index, static_cast<uint32_t>(codec), claimed.value_or(batch.bytes().size()),
      compressed.size());
  return std::string(prefix.data(), prefix.size()) + compressed;
}

// Small integers, so that every codec shrinks it.
Batch CompressibleBatch(uint64_t seed) {
  constexpr uint64_t kRecords = 4;
  std::vector<int64_t> values(kRecords * 8192);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int64_t>((i * seed) % 13);
  const std::vector<int64_t> dims = {8192};
  const ColumnData columns[] = {testing::FixedColumn("tokens", DType::kInt64, dims, values)};
  absl::StatusOr<Batch> batch = Batch::FromColumns(kRecords, columns);
  EXPECT_TRUE(batch.ok()) << batch.status();
  return *std::move(batch);
}

TEST_F(TcpTransportTest, CompressedJobsDeliverTheSameBytes) {
  StartServer();
  for (Codec codec : {Codec::kNone, Codec::kZstd, Codec::kLz4}) {
    SCOPED_TRACE(CodecName(codec));
    source_.SetCompression(codec);
    const Batch batch = CompressibleBatch(40 + static_cast<uint64_t>(codec));
    source_.Put({"train", 0, 1}, batch);
    auto client = Transport::Tcp()->Connect(server_->address(), ClientOptions());
    ASSERT_TRUE(client.ok()) << client.status();
    testing::ExpectFetched(**client, {"train", 0, 1}, batch, absl::Seconds(10));
  }
}

TEST_F(TcpTransportTest, ServerSendsCompressedFramesOnlyWhenTheyShrink) {
  StartServer();
  for (Codec codec : {Codec::kNone, Codec::kZstd, Codec::kLz4}) {
    source_.SetCompression(codec);
    const Batch small_ints = CompressibleBatch(3);
    source_.Put({"train", 0, 2}, small_ints);
    net::Socket socket = RawHandshake(server_->address());
    SendRaw(socket, frame::EncodeRequest({frame::FrameType::kGetBatch, "train", 0, 2, 5000}));
    auto answer = ReadFrame(socket);
    ASSERT_TRUE(answer.ok()) << answer.status();
    if (codec == Codec::kNone) {
      EXPECT_EQ(answer->header.type, static_cast<uint32_t>(frame::FrameType::kBatch));
      continue;
    }
    ASSERT_EQ(answer->header.type, static_cast<uint32_t>(frame::FrameType::kBatchCompressed));
    auto fixed = frame::ParseCompressedBatchFixed(answer->body);
    ASSERT_TRUE(fixed.ok()) << fixed.status();
    EXPECT_EQ(fixed->index, 2u);
    EXPECT_EQ(fixed->codec, static_cast<uint32_t>(codec));
    EXPECT_EQ(fixed->uncompressed_bytes, small_ints.bytes().size());
    EXPECT_LT(answer->body.size(), small_ints.bytes().size() / 4) << CodecName(codec);
  }
  // Random bytes do not shrink: sent as a plain BATCH even for a compressed job.
  std::string random(64 << 10, '\0');
  std::mt19937_64 rng(1);
  for (char& c : random) c = static_cast<char>(rng());
  const uint64_t offsets[] = {0, random.size()};
  const ColumnData column{"blob", DType::kBytes, false, {}, 1, random, offsets, {}};
  auto blob = Batch::FromColumns(1, absl::MakeConstSpan(&column, 1));
  ASSERT_TRUE(blob.ok()) << blob.status();
  source_.SetCompression(Codec::kLz4);
  source_.Put({"train", 0, 5}, *blob);
  net::Socket socket = RawHandshake(server_->address());
  SendRaw(socket, frame::EncodeRequest({frame::FrameType::kGetBatch, "train", 0, 5, 5000}));
  auto answer = ReadFrame(socket);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->header.type, static_cast<uint32_t>(frame::FrameType::kBatch));
}

TEST_F(TcpTransportTest, ClientDecompressesACompressedFrame) {
  for (Codec codec : {Codec::kZstd, Codec::kLz4}) {
    SCOPED_TRACE(CodecName(codec));
    const Batch batch = CompressibleBatch(5);
    FakeServer fake(Respond(CompressedFrame(4, codec, batch)));
    auto client = Transport::Tcp()->Connect(fake.address(), ClientOptions());
    ASSERT_TRUE(client.ok()) << client.status();
    testing::ExpectFetched(**client, {"train", 0, 4}, batch);
  }
}

TEST_F(TcpTransportTest, CorruptCompressedBatchIsDataLossNamingServerAndBatch) {
  const Batch batch = CompressibleBatch(6);
  std::string body = *Compress(Codec::kZstd, batch.bytes());
  for (size_t i = body.size() / 2; i < body.size() / 2 + 32; ++i) body[i] ^= 0x33;
  body.resize(body.size() - 1);
  const FetchResult got =
      FetchFromServerAnswering(CompressedFrame(8, Codec::kZstd, batch, body), 8);
  EXPECT_EQ(got.status.code(), absl::StatusCode::kDataLoss) << got.status;
  EXPECT_THAT(got.status.message(),
              HasSubstr("corrupt zstd body of batch 8 from data server " + got.server));
}

TEST_F(TcpTransportTest, HugeClaimedUncompressedSizeIsRefusedBeforeAllocating) {
  const Batch batch = CompressibleBatch(7);
  const FetchResult got = FetchFromServerAnswering(
      CompressedFrame(0, Codec::kLz4, batch, std::nullopt, uint64_t{1} << 62), 0);
  EXPECT_EQ(got.status.code(), absl::StatusCode::kResourceExhausted) << got.status;
  EXPECT_THAT(got.status.message(), HasSubstr("exceeds max_batch_bytes 4294967296"));
}

TEST_F(TcpTransportTest, UnknownCodecIsDataLoss) {
  const Batch batch = CompressibleBatch(8);
  std::string frame_bytes = CompressedFrame(0, Codec::kLz4, batch);
  frame_bytes[frame::kHeaderBytes + 8] = 9;  // the codec field
  const FetchResult got = FetchFromServerAnswering(frame_bytes, 0);
  EXPECT_EQ(got.status.code(), absl::StatusCode::kDataLoss) << got.status;
  EXPECT_THAT(got.status.message(), HasSubstr("unknown codec 9"));
}

TEST_F(TcpTransportTest, ServerThatNeverAnswersTheHandshakeIsUnavailable) {
  absl::Notification done;
  FakeServer fake([&](net::Socket&) { done.WaitForNotificationWithTimeout(absl::Seconds(10)); });
  DataClientOptions options = ClientOptions();
  options.connect_timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  auto client = Transport::Tcp()->Connect(fake.address(), options);
  const absl::Duration took = absl::Now() - start;
  done.Notify();
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable) << client.status();
  EXPECT_THAT(client.status().message(), HasSubstr("handshake with data server " + fake.address()));
  EXPECT_GE(took, absl::Milliseconds(250));
  EXPECT_LT(took, absl::Seconds(2));
}

}  // namespace
}  // namespace croupier

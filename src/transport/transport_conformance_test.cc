// The suite every Transport must pass: add a transport to kTransports and it runs all of these.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/net/socket.h"
#include "src/net/token.h"
#include "src/transport/frame.h"
#include "src/transport/shm_socket.h"
#include "src/transport/shm_transport.h"
#include "src/transport/transport.h"
#include "src/transport/transport_testing.h"

namespace croupier {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

constexpr char kToken[] = "s3cret-token";

using ::croupier::testing::In;

// How a server's log names this process as a client: by address over TCP, by pid over a Unix
// socket.
std::string ClientInLogs(const Transport* transport) {
  if (transport->name() == "shm") return absl::StrCat("refuses client pid ", ::getpid());
  return "refuses client 127.0.0.1:";
}

// The version a transport's client speaks.
uint32_t VersionOf(const Transport* transport) {
  return transport->name() == "shm" ? kShmProtocolVersion : frame::kDataProtocolVersion;
}

// A process on a transport's address that is not a croupier server of this cluster: it accepts
// one connection, plays the server's side of the handshake with the CHALLENGE `proof` (forged,
// or none), and records what the client sends. Thread-compatible.
class Squatter {
 public:
  Squatter(const Transport* transport, std::string proof) {
    absl::StatusOr<net::Socket> listener;
    if (transport->name() == "shm") {
      static int n = 0;
      address_ = absl::StrCat("@croupier-test-squatter-", ::getpid(), "-", n++);
      listener = net::ListenUnix(address_);
    } else {
      listener = net::Listen("127.0.0.1", 0);
      if (listener.ok()) address_ = absl::StrCat("127.0.0.1:", net::LocalPort(listener->fd()));
    }
    EXPECT_TRUE(listener.ok()) << listener.status();
    listener_ = *std::move(listener);
    thread_ = std::thread([this, version = VersionOf(transport), proof = std::move(proof)] {
      pollfd p{listener_.fd(), POLLIN, 0};
      if (::poll(&p, 1, 10000) != 1) return;
      net::Socket socket(::accept4(listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK));
      seen_ = testing::RawServerHandshake(socket.fd(), version, "", proof);
      // What a forger would send next, were the client still listening.
      net::SendAll(socket.fd(), frame::EncodeHelloOk(version),
                   net::IoWait{.deadline = In(absl::Seconds(1))}, "client")
          .IgnoreError();
    });
  }
  // What the client sent; waits for the squatter to finish.
  const testing::SeenHandshake& Seen() {
    if (thread_.joinable()) thread_.join();
    return seen_;
  }
  ~Squatter() {
    if (thread_.joinable()) thread_.join();
  }
  const std::string& address() const { return address_; }

 private:
  std::string address_;
  net::Socket listener_;
  std::thread thread_;
  testing::SeenHandshake seen_;
};

class TransportTest : public ::testing::TestWithParam<Transport*> {
 protected:
  ~TransportTest() override {
    source_.Unhold();  // a held source would keep the server's threads from ending
    if (server_ != nullptr) server_->Shutdown();
  }

  void StartServer(DataServerOptions options = {}, bool open = false) {
    options.auth_token = open ? "" : kToken;
    auto server = GetParam()->StartServer(options, &source_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  absl::StatusOr<std::unique_ptr<DataClient>> TryConnect(DataClientOptions options = {}) {
    if (options.auth_token.empty()) options.auth_token = kToken;
    return GetParam()->Connect(server_->address(), options);
  }

  std::unique_ptr<DataClient> Connect(DataClientOptions options = {}) {
    auto client = TryConnect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  // First, so that it outlives everything below.
  testing::TestGuard guard_{absl::Seconds(60)};
  testing::FakeBatchSource source_;
  std::unique_ptr<DataServer> server_;
};

void ExpectSameBatch(const Batch& got, const Batch& want) {
  EXPECT_EQ(got.bytes().size(), want.bytes().size());
  EXPECT_TRUE(got.bytes() == want.bytes()) << "bytes differ";
  EXPECT_EQ(got.ContentHash(), want.ContentHash());
  EXPECT_EQ(got.num_records(), want.num_records());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(got.bytes().data()) % kBatchAlignment, 0u);
}

TEST_P(TransportTest, RoundTripsBatchesBitForBit) {
  StartServer();
  std::vector<Batch> batches;
  if (auto empty = Batch::FromColumns(0, {}); empty.ok()) batches.push_back(*empty);
  batches.push_back(testing::MakeExampleBatch(7));
  batches.push_back(testing::MakeBatch(4 << 10, 1));
  batches.push_back(testing::MakeBatch(1 << 20, 2));
  batches.push_back(testing::MakeBatch(16 << 20, 3));
  for (size_t i = 0; i < batches.size(); ++i) source_.Put({"train", 2, i}, batches[i]);

  std::unique_ptr<DataClient> client = Connect();
  ASSERT_NE(client, nullptr);
  for (size_t i = 0; i < batches.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("batch of ", batches[i].bytes().size(), " bytes"));
    absl::StatusOr<Batch> got = client->Fetch({"train", 2, i}, In(absl::Seconds(10)));
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectSameBatch(*got, batches[i]);
  }
  // OnServed follows the write, which the client may see complete first.
  const absl::Time until = In(absl::Seconds(5));
  while (source_.served().size() < batches.size() && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  auto served = source_.served();
  ASSERT_EQ(served.size(), batches.size());
  for (size_t i = 0; i < batches.size(); ++i) {
    EXPECT_EQ(served[i].first, (BatchKey{"train", 2, i}));
    EXPECT_EQ(served[i].second, batches[i].bytes().size());
  }
}

// FetchBatches pipelines the requests on one connection; the server may write the answers of
// ready batches together. Every batch comes back in order, with the errors of the batches that
// failed in their places, and the connection stays usable.
TEST_P(TransportTest, FetchBatchesAnswersEveryBatchInOrderWithErrorsInPlace) {
  StartServer();
  std::vector<Batch> batches;
  std::vector<uint64_t> keys;
  for (uint64_t i = 0; i < 40; ++i) {
    const size_t bytes = i == 7 ? (2 << 20) : (i % 3 == 0 ? 256 : 4 << 10);  // one large
    batches.push_back(testing::MakeBatch(bytes, i));
    keys.push_back(i);
    if (i == 5 || i == 23) {
      source_.Fail({"train", 1, i}, absl::DataLossError(absl::StrCat("bad record of batch ", i)));
    } else {
      source_.Put({"train", 1, i}, batches.back());
    }
  }
  std::unique_ptr<DataClient> client = Connect();
  ASSERT_NE(client, nullptr);
  for (int round = 0; round < 2; ++round) {  // the second on the same, pooled connection
    std::vector<size_t> order;
    client->FetchBatches("train", 1, keys, In(absl::Seconds(20)),
                         [&](size_t i, absl::StatusOr<Batch> got) {
                           order.push_back(i);
                           SCOPED_TRACE(absl::StrCat("batch ", i));
                           if (i == 5 || i == 23) {
                             EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
                             EXPECT_THAT(got.status().message(),
                                         HasSubstr(absl::StrCat("bad record of batch ", i)));
                             return;
                           }
                           ASSERT_TRUE(got.ok()) << got.status();
                           ExpectSameBatch(*got, batches[i]);
                         });
    ASSERT_EQ(order.size(), keys.size());
    for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], i);
  }
  // Every served batch is reported, once per round.
  const absl::Time until = In(absl::Seconds(5));
  while (source_.served().size() < 2 * 38 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(source_.served().size(), 2u * 38);
}

// A batch not made yet holds up the ones behind it, not the ones before it; one whose deadline
// passes fails DEADLINE_EXCEEDED in its place and the rest still arrive.
TEST_P(TransportTest, FetchBatchesHandsOverEachBatchAsItArrives) {
  StartServer();
  for (uint64_t i : {0, 1, 3}) source_.Put({"train", 0, i}, testing::MakeBatch(4 << 10, i));
  std::unique_ptr<DataClient> client = Connect();
  ASSERT_NE(client, nullptr);
  std::vector<absl::Time> arrived(4);
  std::vector<absl::StatusCode> codes(4, absl::StatusCode::kUnknown);
  const std::vector<uint64_t> keys = {0, 1, 2, 3};
  std::thread maker([&] {
    absl::SleepFor(absl::Milliseconds(400));
    source_.Put({"train", 0, 2}, testing::MakeBatch(4 << 10, 2));
  });
  const absl::Time start = absl::Now();
  client->FetchBatches("train", 0, keys, In(absl::Seconds(10)),
                       [&](size_t i, absl::StatusOr<Batch> got) {
                         arrived[i] = absl::Now();
                         codes[i] = got.status().code();
                       });
  maker.join();
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(codes[i], absl::StatusCode::kOk) << i;
  EXPECT_LT(arrived[1] - start, absl::Milliseconds(300));
  EXPECT_GE(arrived[2] - start, absl::Milliseconds(350));

  // Batch 9 is never made: it fails at the deadline, and batch 3 behind it is still answered.
  std::vector<absl::StatusCode> late(2, absl::StatusCode::kUnknown);
  client->FetchBatches("train", 0, std::vector<uint64_t>{9, 3}, In(absl::Milliseconds(300)),
                       [&](size_t i, absl::StatusOr<Batch> got) { late[i] = got.status().code(); });
  EXPECT_EQ(late[0], absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(late[1], AnyOf(absl::StatusCode::kOk, absl::StatusCode::kDeadlineExceeded));
  EXPECT_TRUE(client->Fetch({"train", 0, 0}, In(absl::Seconds(10))).ok());
}

// More batches than one call pipelines, from threads sharing the client.
TEST_P(TransportTest, FetchBatchesSplitsLongListsAndSharesTheClient) {
  StartServer();
  for (uint64_t i = 0; i < 300; ++i) source_.Put({"train", 0, i}, testing::MakeBatch(512, i));
  std::unique_ptr<DataClient> client = Connect();
  ASSERT_NE(client, nullptr);
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint64_t> keys;
      for (uint64_t i = t; i < 300; i += 3) keys.push_back(i);
      size_t next = 0;
      client->FetchBatches("train", 0, keys, In(absl::Seconds(20)),
                           [&](size_t i, absl::StatusOr<Batch> got) {
                             if (i == next++ && got.ok() &&
                                 got->ContentHash() ==
                                     testing::MakeBatch(512, keys[i]).ContentHash()) {
                               ++good;
                             }
                           });
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(good.load(), 300);
}

// The server stopping while pipelined requests wait: every batch gets an answer or an error,
// promptly.
TEST_P(TransportTest, FetchBatchesFailsTheRestWhenTheServerStops) {
  StartServer();
  source_.Put({"train", 0, 0}, testing::MakeBatch(4 << 10, 0));
  std::unique_ptr<DataClient> client = Connect();
  ASSERT_NE(client, nullptr);
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(300));
    server_->Shutdown();
  });
  std::vector<absl::StatusCode> codes;
  const absl::Time start = absl::Now();
  client->FetchBatches("train", 0, std::vector<uint64_t>{0, 1, 2}, In(absl::Seconds(20)),
                       [&](size_t, absl::StatusOr<Batch> got) {
                         codes.push_back(got.status().code());
                       });
  stopper.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_EQ(codes.size(), 3u);
  EXPECT_EQ(codes[0], absl::StatusCode::kOk);
  EXPECT_EQ(codes[1], absl::StatusCode::kUnavailable);
  EXPECT_EQ(codes[2], absl::StatusCode::kUnavailable);
}

TEST_P(TransportTest, FetchWaitsForABatchMadeWhileItWaits) {
  StartServer();
  std::unique_ptr<DataClient> client = Connect();
  ASSERT_NE(client, nullptr);
  const Batch batch = testing::MakeBatch(4 << 10, 9);
  std::thread maker([&] {
    absl::SleepFor(absl::Milliseconds(300));
    source_.Put({"train", 0, 5}, batch);
  });
  absl::StatusOr<Batch> got = client->Fetch({"train", 0, 5}, In(absl::Seconds(10)));
  maker.join();
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSameBatch(*got, batch);
}

TEST_P(TransportTest, FetchAnyHandsOutEachBatchOnceThenOutOfRange) {
  StartServer();
  absl::flat_hash_map<uint64_t, uint64_t> want;  // index -> content hash
  for (uint64_t i = 10; i < 15; ++i) {
    Batch batch = testing::MakeBatch(4 << 10, i);
    want[i] = batch.ContentHash();
    source_.PutAny("train", 3, i, std::move(batch));
  }
  source_.Finish("train", 3);
  std::unique_ptr<DataClient> client = Connect();
  ASSERT_NE(client, nullptr);
  absl::flat_hash_set<uint64_t> seen;
  for (int i = 0; i < 5; ++i) {
    auto got = client->FetchAny("train", 3, In(absl::Seconds(10)));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(seen.insert(got->first).second) << "batch " << got->first << " handed out twice";
    ASSERT_TRUE(want.contains(got->first));
    EXPECT_EQ(got->second.ContentHash(), want[got->first]);
  }
  auto end = client->FetchAny("train", 3, In(absl::Seconds(10)));
  EXPECT_EQ(end.status().code(), absl::StatusCode::kOutOfRange) << end.status();
  EXPECT_THAT(end.status().message(), HasSubstr("no more batches of job 'train' epoch 3"));
  EXPECT_THAT(end.status().message(), HasSubstr(server_->address()));
}

TEST_P(TransportTest, FetchAnyForwardsDeadlineExceeded) {
  StartServer();
  std::unique_ptr<DataClient> client = Connect();
  ASSERT_NE(client, nullptr);
  const absl::Time start = absl::Now();
  auto got = client->FetchAny("train", 4, start + absl::Milliseconds(400));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr("no batch of job 'train' epoch 4 ready"));
  EXPECT_GE(took, absl::Milliseconds(350));
  EXPECT_LT(took, absl::Seconds(2));
}

TEST_P(TransportTest, EightThreadsShareOneClient) {
  StartServer();
  constexpr int kKeys = 16, kThreads = 8, kFetches = 40;
  std::vector<Batch> batches;
  for (int i = 0; i < kKeys; ++i) {
    batches.push_back(testing::MakeBatch(64 << 10, i));
    source_.Put({"train", 1, static_cast<uint64_t>(i)}, batches.back());
  }
  std::unique_ptr<DataClient> client = Connect();
  ASSERT_NE(client, nullptr);
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kFetches; ++i) {
        const uint64_t key = (t * 7 + i) % kKeys;
        auto got = client->Fetch({"train", 1, key}, In(absl::Seconds(20)));
        if (!got.ok()) {
          ADD_FAILURE() << got.status();
          return;
        }
        if (got->ContentHash() == batches[key].ContentHash()) ++good;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(good.load(), kThreads * kFetches);
}

TEST_P(TransportTest, CallsBeyondMaxConnectionsWaitForAConnection) {
  StartServer();
  const Batch batch = source_.PutMade({"train", 0, 0}, 16 << 10, 1);
  DataClientOptions options;
  options.max_connections = 2;
  std::unique_ptr<DataClient> client = Connect(options);
  ASSERT_NE(client, nullptr);
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10; ++i) {
        auto got = client->Fetch({"train", 0, 0}, In(absl::Seconds(20)));
        if (got.ok() && got->ContentHash() == batch.ContentHash()) {
          ++good;
        } else {
          ADD_FAILURE() << got.status();
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(good.load(), 80);
}

TEST_P(TransportTest, SeveralClientsAtOnce) {
  StartServer();
  std::vector<Batch> batches;
  for (int i = 0; i < 4; ++i) {
    batches.push_back(testing::MakeBatch(256 << 10, 100 + i));
    source_.Put({"train", 0, static_cast<uint64_t>(i)}, batches.back());
  }
  std::vector<std::unique_ptr<DataClient>> clients;
  for (int c = 0; c < 4; ++c) {
    clients.push_back(Connect());
    ASSERT_NE(clients.back(), nullptr);
  }
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      DataClient* client = clients[t % clients.size()].get();
      for (int i = 0; i < 20; ++i) {
        const uint64_t key = (t + i) % batches.size();
        auto got = client->Fetch({"train", 0, key}, In(absl::Seconds(20)));
        if (got.ok() && got->ContentHash() == batches[key].ContentHash()) {
          ++good;
        } else {
          ADD_FAILURE() << got.status();
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(good.load(), 8 * 20);
}

// A client with another token: the server's proof does not match it, so the client refuses the
// server before answering; the server sees the client leave after its challenge.
TEST_P(TransportTest, WrongTokenIsUnauthenticatedAndLogged) {
  StartServer();
  ::testing::internal::CaptureStderr();
  DataClientOptions options;
  options.auth_token = "not-the-token";
  auto client = TryConnect(options);
  absl::SleepFor(absl::Milliseconds(300));  // the server logs once it sees the close
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnauthenticated) << client.status();
  EXPECT_THAT(client.status().message(), HasSubstr("did not prove that it holds"));
  EXPECT_THAT(client.status().message(), HasSubstr(server_->address()));
  EXPECT_THAT(log, HasSubstr(ClientInLogs(GetParam())));
  EXPECT_THAT(log, HasSubstr("the client left after the challenge"));
}

// A client that skips checking the server's proof and answers with a proof of another token is
// refused by the server.
TEST_P(TransportTest, AWrongProofIsRefusedByTheServerAndLogged) {
  StartServer();
  ::testing::internal::CaptureStderr();
  absl::StatusOr<net::Socket> socket =
      GetParam()->name() == "shm"
          ? net::DialUnix(server_->address(), net::IoWait{.deadline = In(absl::Seconds(5))})
          : net::Dial(server_->address(), net::IoWait{.deadline = In(absl::Seconds(5))});
  ASSERT_TRUE(socket.ok()) << socket.status();
  const absl::Status done =
      testing::RawClientHandshake(socket->fd(), VersionOf(GetParam()), "not-the-token");
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(done.code(), absl::StatusCode::kUnauthenticated) << done;
  EXPECT_THAT(done.message(), HasSubstr("refused the auth token"));
  EXPECT_THAT(log, HasSubstr(ClientInLogs(GetParam())));
  EXPECT_THAT(log, HasSubstr("wrong auth token"));
}

TEST_P(TransportTest, MissingTokenIsUnauthenticatedAndLogged) {
  StartServer();
  ::testing::internal::CaptureStderr();
  auto client = GetParam()->Connect(server_->address(), DataClientOptions{});
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnauthenticated) << client.status();
  EXPECT_THAT(client.status().message(), HasSubstr("requires an auth token and none was given"));
  EXPECT_THAT(client.status().message(), HasSubstr(server_->address()));
  EXPECT_THAT(log, HasSubstr(ClientInLogs(GetParam())));
  EXPECT_THAT(log, HasSubstr("no auth token"));
}

// A server without a token serves clients without one, as a dispatcher without a token does; a
// client with a token refuses it, since it cannot prove that it holds the token.
TEST_P(TransportTest, AServerWithoutATokenServesOnlyClientsWithoutOne) {
  StartServer({}, /*open=*/true);
  source_.Put({"job", 0, 3}, testing::MakeBatch(4 << 10, 3));
  auto client = GetParam()->Connect(server_->address(), DataClientOptions{});
  ASSERT_TRUE(client.ok()) << client.status();
  auto batch = (*client)->Fetch({"job", 0, 3}, In(absl::Seconds(10)));
  EXPECT_TRUE(batch.ok()) << batch.status();
  DataClientOptions options;
  options.auth_token = "some-token";
  auto refused = GetParam()->Connect(server_->address(), options);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated) << refused.status();
  EXPECT_THAT(refused.status().message(),
              HasSubstr(absl::StrCat(server_->address(), " has no auth token")));
}

// A server with another token (or a process replaying a proof it does not understand) is refused
// by the client before the client sends anything secret: its HELLO carries a random nonce, not
// the token, and after the CHALLENGE it closes without an AUTH.
TEST_P(TransportTest, AServerWithAnotherTokenIsRefusedBeforeTheClientSendsAnythingSecret) {
  // The squatter proves "other-token", over whatever nonce the client sent.
  Squatter squatter(GetParam(), std::string(kProofBytes, '\x5a'));
  DataClientOptions options;
  options.auth_token = kToken;
  auto client = GetParam()->Connect(squatter.address(), options);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnauthenticated) << client.status();
  EXPECT_THAT(client.status().message(),
              HasSubstr(absl::StrCat("data server ", squatter.address(),
                                     " did not prove that it holds this client's auth token")));
  const testing::SeenHandshake& seen = squatter.Seen();
  ASSERT_EQ(seen.hello.size(), frame::kHelloPrefixBytes + kNonceBytes);
  EXPECT_EQ(seen.hello.find(kToken), std::string::npos) << "the token crossed the connection";
  EXPECT_TRUE(seen.auth.empty()) << "the client answered a server that proved nothing";
  EXPECT_TRUE(seen.closed_after_challenge);

  // And a real server started with another token.
  DataServerOptions other;
  other.auth_token = "other-token";
  auto server = GetParam()->StartServer(other, &source_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto refused = GetParam()->Connect((*server)->address(), options);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr((*server)->address()));
  (*server)->Shutdown();
}

// A process that took a server's address and has no token (it can only claim to have none) is
// refused by a client with a token, which then sent it nothing but its nonce and took no batch.
TEST_P(TransportTest, ASquattingServerIsRefused) {
  Squatter squatter(GetParam(), /*proof=*/"");
  DataClientOptions options;
  options.auth_token = kToken;
  auto client = GetParam()->Connect(squatter.address(), options);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnauthenticated) << client.status();
  EXPECT_THAT(client.status().message(),
              HasSubstr(absl::StrCat("data server ", squatter.address(), " has no auth token")));
  const testing::SeenHandshake& seen = squatter.Seen();
  EXPECT_EQ(seen.hello.find(kToken), std::string::npos);
  EXPECT_TRUE(seen.auth.empty());
  EXPECT_TRUE(seen.closed_after_challenge);
}

// Connections that have not proved the token hold no authenticated slot: clients refused for
// their token, and clients still silent in their handshake, leave every slot to the clients
// with the token. Once the handshake slots are full, each new connection evicts the oldest
// silent one (the server closes it at once), and the refusals and evictions are logged a few at
// a time, not one line each.
TEST_P(TransportTest, UnauthenticatedClientsHoldNoConnectionSlotAndRefusalsAreRateLimited) {
  DataServerOptions options;
  options.max_connections = 2;
  options.max_connections_per_peer = 2;
  options.max_handshakes = 4;
  StartServer(options);
  auto dial = [&]() -> net::Socket {
    absl::StatusOr<net::Socket> socket =
        GetParam()->name() == "shm"
            ? net::DialUnix(server_->address(), net::IoWait{.deadline = In(absl::Seconds(5))})
            : net::Dial(server_->address(), net::IoWait{.deadline = In(absl::Seconds(5))});
    EXPECT_TRUE(socket.ok()) << socket.status();
    return socket.ok() ? *std::move(socket) : net::Socket();
  };
  ::testing::internal::CaptureStderr();
  // Refused for their token, many times over.
  for (int i = 0; i < 40; ++i) {
    net::Socket socket = dial();
    EXPECT_EQ(testing::RawClientHandshake(socket.fd(), VersionOf(GetParam()), "").code(),
              absl::StatusCode::kUnauthenticated);
  }
  absl::SleepFor(absl::Milliseconds(300));  // their threads end once they see the close
  // Three silent ones hold three of the four handshake slots.
  std::vector<net::Socket> silent;
  for (int i = 0; i < 3; ++i) silent.push_back(dial());
  // The clients with the token still get both authenticated slots (each connection of a client
  // takes one), and the next is refused for the limit.
  auto first = TryConnect();
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = TryConnect();
  ASSERT_TRUE(second.ok()) << second.status();
  auto third = TryConnect();
  EXPECT_EQ(third.status().code(), absl::StatusCode::kUnavailable) << third.status();
  EXPECT_THAT(third.status().message(), HasSubstr("limit of 2 connections"));
  // A fourth silent one fills the handshake slots. The next ones, with the token, still get
  // through their handshake, the first in the slot of the oldest silent one, which the server
  // closes (the next ones may find a slot free); then they are refused for the limit of 2.
  silent.push_back(dial());
  absl::SleepFor(absl::Milliseconds(100));
  for (int i = 0; i < 20; ++i) {
    net::Socket socket = dial();
    const absl::Status refused =
        testing::RawClientHandshake(socket.fd(), VersionOf(GetParam()), kToken);
    EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
    EXPECT_THAT(refused.message(), HasSubstr("limit of 2 connections")) << refused;
  }
  char byte;
  absl::StatusOr<size_t> got = net::RecvSome(
      silent[0].fd(), &byte, 1, net::IoWait{.deadline = In(absl::Seconds(1))}, "the server");
  EXPECT_TRUE(absl::IsUnavailable(got.status()) || (got.ok() && *got == 0))
      << "the oldest silent connection was not evicted: " << got.status();
  absl::SleepFor(absl::Milliseconds(300));
  const std::string log = ::testing::internal::GetCapturedStderr();
  size_t lines = 0;
  for (size_t at = log.find("refuses client"); at != std::string::npos;
       at = log.find("refuses client", at + 1)) {
    ++lines;
  }
  // At most 3 for each kind: no token, the limit of 2, the evictions.
  EXPECT_LE(lines, 9u) << log;
  EXPECT_THAT(log, HasSubstr("are only counted"));
  EXPECT_THAT(log, HasSubstr("evicted from its handshake for a newer connection (the data server "
                             "has 4 connections"));
}

TEST_P(TransportTest, UnreachableServerIsUnavailableAtOnce) {
  StartServer();
  const std::string address = server_->address();
  server_->Shutdown();
  const absl::Time start = absl::Now();
  DataClientOptions options;
  options.auth_token = kToken;
  auto client = GetParam()->Connect(address, options);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable) << client.status();
  EXPECT_THAT(client.status().message(),
              HasSubstr(absl::StrCat("cannot connect to data server ", address)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
}

TEST_P(TransportTest, SourceErrorsKeepTheirCodeAndMessage) {
  StartServer();
  const std::vector<absl::Status> errors = {
      absl::NotFoundError("batch 1 is not held by this producer"),
      absl::DataLossError("corrupt record in /data/train-3.tfrecord at byte 1234"),
      absl::DeadlineExceededError("batch 3 not made in time"),
      absl::UnavailableError("producer shutting down"),
      absl::OutOfRangeError("epoch 9 does not exist"),
      absl::InvalidArgumentError("job 'x' has no such epoch"),
      absl::InternalError(std::string(20000, 'm')),  // longer than one error frame carries
  };
  for (size_t i = 0; i < errors.size(); ++i) source_.Fail({"train", 0, i}, errors[i]);
  std::unique_ptr<DataClient> client = Connect();
  ASSERT_NE(client, nullptr);
  for (size_t i = 0; i < errors.size(); ++i) {
    auto got = client->Fetch({"train", 0, i}, In(absl::Seconds(10)));
    EXPECT_EQ(got.status().code(), errors[i].code()) << got.status();
    const std::string want(errors[i].message().substr(0, 1000));
    EXPECT_THAT(got.status().message(), HasSubstr(want));
    EXPECT_THAT(got.status().message(), HasSubstr(server_->address()));
  }
  // The connection survives errors: the next call works.
  source_.Put({"train", 0, 100}, testing::MakeBatch(4 << 10, 1));
  EXPECT_TRUE(client->Fetch({"train", 0, 100}, In(absl::Seconds(10))).ok());
}

TEST_P(TransportTest, BatchOverMaxBatchBytesIsResourceExhausted) {
  StartServer();
  source_.Put({"train", 0, 0}, testing::MakeBatch(1 << 20, 1));
  const Batch small = testing::MakeBatch(4 << 10, 2);
  source_.Put({"train", 0, 1}, small);
  DataClientOptions options;
  options.max_batch_bytes = 64 << 10;
  std::unique_ptr<DataClient> client = Connect(options);
  ASSERT_NE(client, nullptr);
  auto got = client->Fetch({"train", 0, 0}, In(absl::Seconds(10)));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr("exceeds max_batch_bytes 65536"));
  EXPECT_THAT(got.status().message(), HasSubstr(server_->address()));
  auto next = client->Fetch({"train", 0, 1}, In(absl::Seconds(10)));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->ContentHash(), small.ContentHash());
}

TEST_P(TransportTest, DeadlinePassingWhileTheSourceWaitsIsForwarded) {
  StartServer();
  std::unique_ptr<DataClient> client = Connect();
  ASSERT_NE(client, nullptr);
  const absl::Time start = absl::Now();
  auto got = client->Fetch({"train", 0, 42}, start + absl::Milliseconds(400));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
  EXPECT_THAT(got.status().message(),
              HasSubstr("batch 42 of job 'train' epoch 0 not made by the deadline"));
  EXPECT_GE(took, absl::Milliseconds(350));
  EXPECT_LT(took, absl::Seconds(2));
}

TEST_P(TransportTest, HungSourceFailsAtTheDeadlinePlusAShortGrace) {
  StartServer();
  std::unique_ptr<DataClient> client = Connect();
  ASSERT_NE(client, nullptr);
  source_.Hold();
  const absl::Time start = absl::Now();
  auto got = client->Fetch({"train", 0, 1}, start + absl::Milliseconds(200));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr(server_->address()));
  EXPECT_GE(took, absl::Milliseconds(200));
  EXPECT_LT(took, absl::Seconds(3));
}

TEST_P(TransportTest, CancelWakesABlockedFetchAndFailsLaterCalls) {
  StartServer();
  std::unique_ptr<DataClient> client = Connect();
  ASSERT_NE(client, nullptr);
  source_.Hold();
  absl::StatusOr<Batch> got = absl::UnknownError("not run");
  absl::Time returned;
  std::thread fetcher([&] {
    got = client->Fetch({"train", 0, 1}, In(absl::Seconds(30)));
    returned = absl::Now();
  });
  ASSERT_TRUE(source_.AwaitInside(1));
  const absl::Time cancelled = absl::Now();
  client->Cancel();
  fetcher.join();
  EXPECT_EQ(got.status().code(), absl::StatusCode::kCancelled) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr(server_->address()));
  EXPECT_LT(returned - cancelled, absl::Seconds(1));
  auto later = client->Fetch({"train", 0, 1}, In(absl::Seconds(5)));
  EXPECT_EQ(later.status().code(), absl::StatusCode::kCancelled) << later.status();
  auto any = client->FetchAny("train", 0, In(absl::Seconds(5)));
  EXPECT_EQ(any.status().code(), absl::StatusCode::kCancelled) << any.status();
}

TEST_P(TransportTest, ShutdownWhileClientsBlockIsPrompt) {
  StartServer();
  std::unique_ptr<DataClient> client = Connect();
  ASSERT_NE(client, nullptr);
  constexpr int kBlocked = 4;
  std::vector<absl::Status> results(kBlocked);
  std::vector<absl::Time> returned(kBlocked);
  std::vector<std::thread> threads;
  for (int i = 0; i < kBlocked; ++i) {
    threads.emplace_back([&, i] {
      results[i] =
          client->Fetch({"train", 0, static_cast<uint64_t>(100 + i)}, In(absl::Seconds(30)))
              .status();
      returned[i] = absl::Now();
    });
  }
  ASSERT_TRUE(source_.AwaitInside(kBlocked));
  const absl::Time start = absl::Now();
  server_->Shutdown();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  for (auto& thread : threads) thread.join();
  for (int i = 0; i < kBlocked; ++i) {
    EXPECT_THAT(results[i].code(),
                AnyOf(absl::StatusCode::kUnavailable, absl::StatusCode::kCancelled))
        << results[i];
    EXPECT_LT(returned[i] - start, absl::Seconds(1));
  }
  auto again = client->Fetch({"train", 0, 1}, In(absl::Seconds(5)));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable) << again.status();
  server_->Shutdown();  // idempotent
}

TEST_P(TransportTest, ConcurrentShutdownsAreSafe) {
  StartServer();
  std::unique_ptr<DataClient> client = Connect();
  ASSERT_NE(client, nullptr);
  std::thread a([&] { server_->Shutdown(); });
  std::thread b([&] { server_->Shutdown(); });
  a.join();
  b.join();
  server_.reset();  // the destructor's Shutdown is a no-op now
}

TEST_P(TransportTest, ServerRefusesConnectionsBeyondItsLimit) {
  DataServerOptions options;
  options.max_connections = 1;
  StartServer(options);
  auto first = TryConnect();
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = TryConnect();
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  EXPECT_THAT(second.status().message(), HasSubstr("limit of 1 connections"));
  first->reset();  // frees the slot once the server sees the close
  absl::StatusOr<std::unique_ptr<DataClient>> third = absl::UnknownError("not tried");
  for (const absl::Time until = In(absl::Seconds(5)); absl::Now() < until;) {
    third = TryConnect();
    if (third.ok()) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(third.ok()) << third.status();
}

TEST_P(TransportTest, StartServerChecksItsOptions) {
  DataServerOptions options;
  options.max_connections = 0;
  auto bad = GetParam()->StartServer(options, &source_);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  EXPECT_THAT(bad.status().message(), HasSubstr("max_connections"));
}

INSTANTIATE_TEST_SUITE_P(AllTransports, TransportTest, ::testing::Values(Transport::Tcp(), Transport::Shm()),
                         [](const ::testing::TestParamInfo<Transport*>& info) {
                           return std::string(info.param->name());
                         });

}  // namespace
}  // namespace croupier

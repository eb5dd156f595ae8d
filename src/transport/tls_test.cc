// The TCP transport over TLS (src/net/tls_stream.h): a fetch over mutual TLS, and every refusal
// with its cause and the peer's address. Certificates are made at test time by tests/tls_certs.sh
// (the openssl command-line tool, src/net/net_testing.h).
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/protocol.h"
#include "src/net/net_testing.h"
#include "src/net/socket.h"
#include "src/transport/frame.h"
#include "src/transport/transport.h"
#include "src/transport/transport_testing.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;

using ::croupier::testing::In;

class TlsTest : public testing::TlsFilesTest {
 protected:
  static std::string File(absl::string_view name) { return files_->File(name); }
  static TlsConfig Config(absl::string_view cert, absl::string_view ca) {
    return files_->Config(cert, ca);
  }

  ~TlsTest() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  void StartServer(TlsConfig tls, size_t per_peer = 128) {
    DataServerOptions options;
    options.auth_token = "tls-token";
    options.tls = std::move(tls);
    options.max_connections_per_peer = per_peer;
    auto server = Transport::Tcp()->StartServer(options, &source_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  absl::StatusOr<std::unique_ptr<DataClient>> Connect(TlsConfig tls) {
    DataClientOptions options;
    options.auth_token = "tls-token";
    options.tls = std::move(tls);
    options.connect_timeout = absl::Seconds(5);
    return Transport::Tcp()->Connect(server_->address(), options);
  }

  testing::TestGuard guard_{absl::Seconds(60)};
  testing::FakeBatchSource source_;
  std::unique_ptr<DataServer> server_;
};

TEST_F(TlsTest, MutualTlsCarriesBatchesOfEverySize) {
  StartServer(Config("server", "ca"));
  auto client = Connect(Config("client", "ca"));
  ASSERT_TRUE(client.ok()) << client.status();
  // Small, and large enough that a write is split across many TLS records and partial writes.
  for (size_t bytes : {size_t{600}, size_t{3} << 20, size_t{24} << 20}) {
    const Batch batch = source_.PutMade({"job", 0, bytes}, bytes, bytes);
    testing::ExpectFetched(**client, {"job", 0, bytes}, batch, absl::Seconds(20));
  }
  // A source error crosses TLS with its code, and the connection stays usable.
  source_.Fail({"job", 0, 7}, absl::NotFoundError("no batch 7"));
  auto missing = (*client)->Fetch({"job", 0, 7}, In(absl::Seconds(5)));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  auto again = (*client)->Fetch({"job", 0, 600}, In(absl::Seconds(5)));
  EXPECT_TRUE(again.ok()) << again.status();
}

TEST_F(TlsTest, PipelinedFetchesCrossTls) {
  StartServer(Config("server", "ca"));
  auto client = Connect(Config("client", "ca"));
  ASSERT_TRUE(client.ok()) << client.status();
  std::vector<uint64_t> keys;
  for (uint64_t i = 0; i < 20; ++i) {
    keys.push_back(i);
    if (i == 4) {
      source_.Fail({"job", 0, i}, absl::NotFoundError("no batch 4"));
    } else {
      source_.Put({"job", 0, i}, testing::MakeBatch(i == 9 ? (3 << 20) : 4096, i));
    }
  }
  size_t next = 0;
  (*client)->FetchBatches("job", 0, keys, In(absl::Seconds(20)),
                          [&](size_t i, absl::StatusOr<Batch> got) {
                            EXPECT_EQ(i, next++);
                            if (i == 4) {
                              EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
                              return;
                            }
                            ASSERT_TRUE(got.ok()) << got.status();
                            EXPECT_EQ(got->ContentHash(),
                                      testing::MakeBatch(i == 9 ? (3 << 20) : 4096, i)
                                          .ContentHash());
                          });
  EXPECT_EQ(next, keys.size());
}

TEST_F(TlsTest, ServerOnlyTlsNeedsNoClientCertificate) {
  StartServer(Config("server", ""));
  const Batch batch = source_.PutMade({"job", 1, 2}, 4096, 1);
  auto client = Connect(Config("", "ca"));
  ASSERT_TRUE(client.ok()) << client.status();
  testing::ExpectFetched(**client, {"job", 1, 2}, batch);
}

TEST_F(TlsTest, IdlePooledConnectionIsReusedNotReplaced) {
  // The server sends no session tickets, so an idle TLS connection stays quiet (not Stale).
  StartServer(Config("server", "ca"));
  source_.PutMade({"job", 0, 0}, 4096, 2);
  auto client = Connect(Config("client", "ca"));
  ASSERT_TRUE(client.ok()) << client.status();
  for (int i = 0; i < 5; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
    auto got = (*client)->Fetch({"job", 0, 0}, In(absl::Seconds(5)));
    ASSERT_TRUE(got.ok()) << got.status();
  }
}

TEST_F(TlsTest, WrongCaIsUnauthenticatedNamingTheServer) {
  StartServer(Config("server", ""));
  auto client = Connect(Config("", "other_ca"));
  ASSERT_EQ(client.status().code(), absl::StatusCode::kUnauthenticated) << client.status();
  EXPECT_THAT(client.status().message(), HasSubstr(server_->address()));
  EXPECT_THAT(client.status().message(), HasSubstr("does not verify"));
}

TEST_F(TlsTest, ExpiredServerCertificateIsUnauthenticated) {
  StartServer(Config("expired", ""));
  auto client = Connect(Config("", "ca"));
  ASSERT_EQ(client.status().code(), absl::StatusCode::kUnauthenticated) << client.status();
  EXPECT_THAT(client.status().message(), HasSubstr("certificate has expired"));
  EXPECT_THAT(client.status().message(), HasSubstr(server_->address()));
}

TEST_F(TlsTest, ServerRefusesClientCertificatesItCannotVerify) {
  StartServer(Config("server", "ca"));
  for (const TlsConfig& tls : {Config("expired", "ca"), Config("other", "ca"), Config("", "ca")}) {
    auto client = Connect(tls);
    ASSERT_EQ(client.status().code(), absl::StatusCode::kUnauthenticated)
        << tls.cert_file << ": " << client.status();
    EXPECT_THAT(client.status().message(), HasSubstr(server_->address()));
  }
  auto good = Connect(Config("client", "ca"));
  EXPECT_TRUE(good.ok()) << good.status();
}

TEST_F(TlsTest, ServerNameMustMatchTheCertificate) {
  // The CA's own certificate chains to the CA but names neither 127.0.0.1 nor localhost.
  StartServer(Config("ca", ""));
  auto client = Connect(Config("", "ca"));
  ASSERT_EQ(client.status().code(), absl::StatusCode::kUnauthenticated) << client.status();
  EXPECT_THAT(client.status().message(), HasSubstr("mismatch"));
}

TEST_F(TlsTest, PlaintextClientOnATlsPortIsToldWhy) {
  StartServer(Config("server", "ca"));
  auto client = Connect(TlsConfig{});
  ASSERT_EQ(client.status().code(), absl::StatusCode::kFailedPrecondition) << client.status();
  EXPECT_THAT(client.status().message(), HasSubstr("requires TLS"));
  EXPECT_THAT(client.status().message(), HasSubstr(server_->address()));
}

TEST_F(TlsTest, GarbageOnATlsPortClosesThatConnectionOnly) {
  StartServer(Config("server", "ca"));
  auto raw = net::Dial(server_->address(), net::IoWait{.deadline = In(absl::Seconds(5))});
  ASSERT_TRUE(raw.ok());
  ASSERT_TRUE(net::SendAll(raw->fd(), std::string(300, 'x'),
                           net::IoWait{.deadline = In(absl::Seconds(5))}, "test")
                  .ok());
  char sink[64];
  auto got = net::RecvSome(raw->fd(), sink, sizeof(sink),
                           net::IoWait{.deadline = In(absl::Seconds(5))}, "test");
  EXPECT_TRUE(!got.ok() || *got == 0) << "the server answered garbage";
  // A ClientHello cut short, then silence: dropped at the handshake timeout, others unaffected.
  auto client = Connect(Config("client", "ca"));
  EXPECT_TRUE(client.ok()) << client.status();
}

// A flood from the client's own address whose silent connections start a TLS handshake and
// stall in it (a record header, then nothing), with plaintext HELLOs looping besides: a new
// connection evicts the oldest in its handshake, whose thread wakes inside the TLS handshake and
// closes it, so a TLS client with the token still gets its batch within 3 s.
TEST_F(TlsTest, AClientWithTheTokenGetsThroughAFloodStalledInTheTlsHandshake) {
  StartServer(Config("server", ""));
  const Batch batch = source_.PutMade({"job", 0, 0}, 4096, 3);
  ::testing::internal::CaptureStderr();
  testing::HandshakeFlood flood(server_->port(), {"127.0.0.1"}, /*silent=*/32, /*looping=*/4,
                                frame::kDataProtocolVersion,
                                std::string("\x16\x03\x01\x00\x80", 5));
  for (const absl::Time until = In(absl::Seconds(5));
       flood.connections() < 36 && absl::Now() < until;) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  absl::SleepFor(absl::Milliseconds(300));
  DataClientOptions options;
  options.auth_token = "tls-token";
  options.tls = Config("", "ca");
  options.connect_timeout = absl::Seconds(5);
  const testing::Fetched fetched = testing::FetchRetrying(
      Transport::Tcp(), server_->address(), options, {"job", 0, 0}, absl::Seconds(10));
  flood.Stop();
  const std::string log = ::testing::internal::GetCapturedStderr();
  std::printf("first batch over TLS after %s in %d attempts; flood: %llu connections, %llu "
              "evicted\n",
              absl::FormatDuration(fetched.took).c_str(), fetched.attempts,
              static_cast<unsigned long long>(flood.connections()),
              static_cast<unsigned long long>(flood.dropped()));
  ASSERT_TRUE(fetched.batch.ok()) << fetched.batch.status();
  EXPECT_EQ(fetched.batch->ContentHash(), batch.ContentHash());
  EXPECT_LT(fetched.took, absl::Seconds(3)) << fetched.attempts << " attempts";
  EXPECT_GT(flood.dropped(), 0u);
  EXPECT_THAT(log, HasSubstr("evicted from its handshake for a newer connection (the data server "
                             "has 16 connections from 127.0.0.1 in their handshake)"));
}

TEST_F(TlsTest, TlsClientOnAPlaintextPortFailsNamingTheServer) {
  StartServer(TlsConfig{});
  auto client = Connect(Config("client", "ca"));
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable) << client.status();
  EXPECT_THAT(client.status().message(),
              HasSubstr("TLS handshake with data server " + server_->address()));
}

TEST_F(TlsTest, ServerWithBadFilesDoesNotStart) {
  // Which files and why: src/net/tls_context_test.cc.
  DataServerOptions options;
  options.tls = Config("server", "ca");
  options.tls.key_file = File("client.key");
  auto mismatched = Transport::Tcp()->StartServer(options, &source_);
  EXPECT_EQ(mismatched.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mismatched.status().message(), HasSubstr("client.key"));
}

TEST_F(TlsTest, ConnectionsPerPeerAreBounded) {
  StartServer(TlsConfig{}, /*per_peer=*/2);
  DataClientOptions options;
  options.auth_token = "tls-token";
  auto a = Transport::Tcp()->Connect(server_->address(), options);
  auto b = Transport::Tcp()->Connect(server_->address(), options);
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = Transport::Tcp()->Connect(server_->address(), options);
  ASSERT_EQ(c.status().code(), absl::StatusCode::kUnavailable) << c.status();
  EXPECT_THAT(c.status().message(), HasSubstr("limit of 2 connections from 127.0.0.1"));
  a->reset();
  // The slot comes back once the server has seen the close.
  absl::StatusOr<std::unique_ptr<DataClient>> d = absl::UnavailableError("not tried");
  for (int i = 0; i < 100 && !d.ok(); ++i) {
    absl::SleepFor(absl::Milliseconds(20));
    d = Transport::Tcp()->Connect(server_->address(), options);
  }
  EXPECT_TRUE(d.ok()) << d.status();
}

TEST_F(TlsTest, ARetiredClientGivesItsConnectionSlotsBack) {
  StartServer(Config("server", ""), /*per_peer=*/2);
  const Batch batch = source_.PutMade({"job", 0, 0}, 4096, 3);
  auto retired = Connect(Config("", "ca"));
  auto busy = Connect(Config("", "ca"));
  ASSERT_TRUE(retired.ok() && busy.ok());
  (*retired)->Retire();  // its idle connection closes now
  // A retired client still answers, over a connection it closes after the call.
  absl::StatusOr<Batch> got = absl::UnavailableError("not tried");
  for (int i = 0; i < 100 && !got.ok(); ++i) {
    absl::SleepFor(absl::Milliseconds(20));
    got = (*retired)->Fetch({"job", 0, 0}, In(absl::Seconds(5)));
  }
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->ContentHash(), batch.ContentHash());
  // So its slot is free again once the server has seen the close.
  absl::StatusOr<std::unique_ptr<DataClient>> next = absl::UnavailableError("not tried");
  for (int i = 0; i < 100 && !next.ok(); ++i) {
    absl::SleepFor(absl::Milliseconds(20));
    next = Connect(Config("", "ca"));
  }
  EXPECT_TRUE(next.ok()) << next.status();
}

}  // namespace
}  // namespace croupier

#include "src/net/tls_stream.h"

#include <sys/socket.h>

#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/net/net_testing.h"
#include "src/net/socket.h"
#include "src/net/tls_context.h"

namespace croupier::net {
namespace {

using ::testing::HasSubstr;

using ::croupier::testing::Within;

class TlsStreamTest : public testing::TlsFilesTest {
 protected:
  // Two ends of a loopback connection, plaintext so far.
  void SetUp() override {
    auto [client, server] = testing::LoopbackPair();
    ASSERT_TRUE(client.valid() && server.valid());
    client_ = Stream(std::move(client));
    server_ = Stream(std::move(server));
  }

  static std::shared_ptr<const TlsContext> Context(bool server, absl::string_view cert,
                                                   absl::string_view ca) {
    const TlsConfig config = files_->Config(cert, ca);
    auto context = server ? TlsContext::ForServer(config) : TlsContext::ForClient(config);
    EXPECT_TRUE(context.ok()) << context.status();
    return context.ok() ? *std::move(context) : nullptr;
  }

  // The handshake: the server's side on a thread, the client's (dialling 127.0.0.1) here.
  // Returns the client's status; the server's is in server_status_.
  absl::Status Handshake(const TlsContext& client, const TlsContext& server) {
    std::thread accept(
        [&] { server_status_ = server_.StartTls(server, "", Within(absl::Seconds(5)), "client"); });
    absl::Status status = client_.StartTls(client, "127.0.0.1", Within(absl::Seconds(5)), "server");
    if (!status.ok()) client_ = Stream();  // so that the server's side does not wait for us
    accept.join();
    return status;
  }

  Stream client_;
  Stream server_;
  absl::Status server_status_;
};

TEST_F(TlsStreamTest, MutualTlsCarriesBytesBothWaysAndStaysQuietWhenIdle) {
  auto server = Context(true, "server", "ca");
  auto client = Context(false, "client", "ca");
  ASSERT_TRUE(server && client);
  ASSERT_TRUE(Handshake(*client, *server).ok());
  ASSERT_TRUE(server_status_.ok()) << server_status_;
  EXPECT_TRUE(client_.tls() && server_.tls());
  // No session tickets: after the handshake nothing is pending for an idle client.
  EXPECT_FALSE(client_.PeerHungUpOrSpoke());

  // Larger than a TLS record and than the socket buffers: partial writes on the way.
  const std::string big(3 << 20, 'b');
  std::thread sender(
      [&] { EXPECT_TRUE(client_.SendAll(big, Within(absl::Seconds(20)), "server").ok()); });
  std::string got(big.size(), '\0');
  absl::Status received = server_.RecvAll(got.data(), got.size(), Within(absl::Seconds(20)), "c");
  sender.join();
  ASSERT_TRUE(received.ok()) << received;
  EXPECT_TRUE(got == big);

  ASSERT_TRUE(server_.SendAll("ok", Within(absl::Seconds(5)), "client").ok());
  char reply[2];
  ASSERT_TRUE(client_.RecvAll(reply, 2, Within(absl::Seconds(5)), "server").ok());
  EXPECT_EQ(std::string(reply, 2), "ok");

  // A close (with close_notify) reads as the end of the stream.
  Stream::CloseGracefully(std::move(server_), absl::Milliseconds(100));
  auto end = client_.RecvSome(reply, 2, Within(absl::Seconds(5)), "server");
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(*end, 0u);
}

TEST_F(TlsStreamTest, ACertificateThatDoesNotVerifyIsUnauthenticatedNamingThePeer) {
  auto server = Context(true, "server", "");
  auto client = Context(false, "", "other_ca");
  ASSERT_TRUE(server && client);
  absl::Status status = Handshake(*client, *server);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated) << status;
  EXPECT_THAT(status.message(),
              HasSubstr("TLS handshake with server failed: its certificate does not verify"));
}

TEST_F(TlsStreamTest, AClientWithoutACertificateIsRefusedUnderMutualTls) {
  auto server = Context(true, "server", "ca");
  auto client = Context(false, "", "ca");
  ASSERT_TRUE(server && client);
  (void)Handshake(*client, *server);  // TLS 1.3: the client learns only at its first read
  EXPECT_EQ(server_status_.code(), absl::StatusCode::kUnauthenticated) << server_status_;
  EXPECT_THAT(server_status_.message(), HasSubstr("client failed: it presented no certificate"));
}

TEST_F(TlsStreamTest, APeerThatDoesNotSpeakTlsIsFailedPrecondition) {
  auto client = Context(false, "", "ca");
  ASSERT_TRUE(client);
  ASSERT_TRUE(server_.SendAll(std::string(300, 'x'), Within(absl::Seconds(5)), "client").ok());
  absl::Status status = client_.StartTls(*client, "127.0.0.1", Within(absl::Seconds(5)), "server");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(status.message(), HasSubstr("server failed: it does not speak TLS"));
}

TEST_F(TlsStreamTest, AConnectionClosedDuringTheHandshakeIsUnavailable) {
  auto client = Context(false, "", "ca");
  ASSERT_TRUE(client);
  ::shutdown(server_.fd(), SHUT_WR);  // a close, without the reset that unread input would cause
  absl::Status status = client_.StartTls(*client, "127.0.0.1", Within(absl::Seconds(5)), "server");
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr("closed during the TLS handshake"));
}

TEST_F(TlsStreamTest, PeekTellsAClientHelloFromPlaintextWithoutConsumingIt) {
  ASSERT_TRUE(client_.SendAll("HELLO", Within(absl::Seconds(5)), "server").ok());
  auto plaintext = PeekIsTls(server_.fd(), Within(absl::Seconds(5)), "client");
  ASSERT_TRUE(plaintext.ok()) << plaintext.status();
  EXPECT_FALSE(*plaintext);
  char hello[5];
  ASSERT_TRUE(server_.RecvAll(hello, 5, Within(absl::Seconds(5)), "client").ok());
  EXPECT_EQ(std::string(hello, 5), "HELLO");

  auto silent = PeekIsTls(server_.fd(), Within(absl::Milliseconds(50)), "client");
  EXPECT_EQ(silent.status().code(), absl::StatusCode::kDeadlineExceeded) << silent.status();

  auto server = Context(true, "server", "");
  auto client = Context(false, "", "ca");
  ASSERT_TRUE(server && client);
  std::thread dial([&] {
    EXPECT_TRUE(client_.StartTls(*client, "127.0.0.1", Within(absl::Seconds(5)), "server").ok());
  });
  auto tls = PeekIsTls(server_.fd(), Within(absl::Seconds(5)), "client");
  EXPECT_TRUE(server_.StartTls(*server, "", Within(absl::Seconds(5)), "client").ok());
  dial.join();
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_TRUE(*tls);
}

}  // namespace
}  // namespace croupier::net

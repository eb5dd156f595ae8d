// DispatcherClient against servers that are not a dispatcher: what its connection attempts cost
// the server.
#include "src/rpc/dispatcher_client.h"

#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <string>
#include <chrono>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/net/socket.h"
#include "src/node/dispatcher_node.h"
#include "src/rpc/grpc_util.h"
#include "src/testing/tcp_proxy.h"

namespace croupier::rpc {
namespace {

// Accepts every connection and reads its first byte: gRPC's connections (which begin "PRI *") are
// closed at once, so that every gRPC attempt fails as if the server were overloaded or spoke
// another protocol; a TLS ClientHello (0x16, the client's probe) is counted and held open without
// an answer, as an overloaded server would.
class ClosingServer {
 public:
  ClosingServer() {
    absl::StatusOr<net::Socket> listener = net::Listen("127.0.0.1", 0);
    EXPECT_TRUE(listener.ok()) << listener.status();
    listener_ = *std::move(listener);
    thread_ = std::thread([this] { Run(); });
  }
  ~ClosingServer() {
    stop_ = true;
    thread_.join();
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", net::LocalPort(listener_.fd())); }
  int probes() const { return probes_.load(); }

 private:
  void Run() {
    std::vector<net::Socket> pending, held;
    while (!stop_) {
      pollfd p{listener_.fd(), POLLIN, 0};
      ::poll(&p, 1, 20);
      for (int fd; (fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK)) >= 0;) {
        pending.emplace_back(fd);
      }
      for (auto it = pending.begin(); it != pending.end();) {
        char first = 0;
        const ssize_t n = ::recv(it->fd(), &first, 1, MSG_PEEK);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
          ++it;
          continue;
        }
        if (n == 1 && first == 0x16) {
          ++probes_;
          held.push_back(std::move(*it));
        }
        it = pending.erase(it);  // closed, unless held
      }
    }
  }

  net::Socket listener_;
  std::atomic<bool> stop_{false};
  std::atomic<int> probes_{0};
  std::thread thread_;
};

// After a dispatcher restart, every client whose connection failed used to make a connection of
// its own to learn why (net::ProbeTls), on every call, each waiting up to 5 s for an answer past
// the call's own deadline: thousands of clients doubled the connections a restarted dispatcher
// had to accept.
TEST(DispatcherClientTest, AFailedConnectionIsProbedOnceAndNeverPastTheCallsDeadline) {
  ClosingServer server;
  auto client = DispatcherClient::Create(
      server.address(), {.auth_token = "",
                         .call_timeout = absl::Seconds(5),
                         .timeout = absl::Milliseconds(800),
                         .tls = {}});
  for (int i = 0; i < 4; ++i) {
    const auto start = std::chrono::steady_clock::now();
    auto status = client->GetStatus(v1::StatusRequest());
    EXPECT_FALSE(status.ok());
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2500))
        << "call " << i << ": " << status.status();
  }
  EXPECT_EQ(server.probes(), 1);
  EXPECT_EQ(client->probes(), 1u);
}

// A dispatcher that keeps a connection in its handshake longer than the client waits for it holds
// connections nobody waits for: after a restart, clients that gave up every second, while the
// dispatcher held each connection up to 10 s, left it thousands of them, until it ran out of
// descriptors.
// The integer a client's channel arguments give `key`, or -1.
int ChannelArg(bool own_connection, const char* key) {
  const grpc::ChannelArguments args =
      DispatcherClient::ChannelArgs({.own_connection = own_connection});
  const grpc_channel_args c = args.c_channel_args();
  for (size_t i = 0; i < c.num_args; ++i) {
    if (std::string(c.args[i].key) == key) return c.args[i].value.integer;
  }
  return -1;
}

TEST(DispatcherClientTest, TheDispatcherHoldsAHandshakeNoLongerThanItsClientsWaitForIt) {
  for (bool own : {false, true}) {
    EXPECT_GE(absl::Milliseconds(ChannelArg(own, GRPC_ARG_MIN_RECONNECT_BACKOFF_MS)),
              DispatcherNodeOptions().handshake_timeout);
  }
}

// A control-plane connection sends no bandwidth-delay probes: each is a ping the other side must
// answer, for flow-control windows that small messages never fill. With a connection per consumer
// they cost the dispatcher a quarter of its CPU and the clients a third of theirs
// (benchmarks.md, "A connection per consumer").
TEST(DispatcherClientTest, AConnectionSendsNoBandwidthProbes) {
  for (bool own : {false, true}) {
    EXPECT_EQ(ChannelArg(own, GRPC_ARG_HTTP2_BDP_PROBE), 0)
        << (own ? "a connection of its own" : "a shared connection");
  }
}

// A connection that stays open and carries nothing (a NAT or load balancer that dropped it, an
// address moved to another host) is given up by the keepalive pings and made again: without them
// every call after the stall timed out, for as long as the connection stayed open.
TEST(DispatcherClientTest, AConnectionThatGoesSilentIsGivenUpAndMadeAgain) {
  absl::StatusOr<std::unique_ptr<DispatcherNode>> node =
      DispatcherNode::Start({.port = 0, .work_dir = ::testing::TempDir() + "/keepalive"});
  ASSERT_TRUE(node.ok()) << node.status();
  absl::StatusOr<std::unique_ptr<testing::TcpProxy>> proxy = testing::TcpProxy::Start((*node)->port());
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  auto client = DispatcherClient::Create(
      absl::StrCat("127.0.0.1:", (*proxy)->port()),
      {.call_timeout = absl::Milliseconds(500), .timeout = absl::Milliseconds(500),
       .own_connection = true, .keepalive_time = absl::Seconds(1),
       .keepalive_timeout = absl::Seconds(1)});
  ASSERT_TRUE(client->GetStatus({}).ok());
  EXPECT_EQ((*proxy)->connections(), 1);

  (*proxy)->Stall();
  const absl::Time stalled = absl::Now();
  absl::Status status = client->GetStatus({}).status();
  EXPECT_FALSE(status.ok()) << "answered through a stalled connection";
  while (!status.ok() && absl::Now() - stalled < absl::Seconds(20)) {
    absl::SleepFor(absl::Milliseconds(200));
    status = client->GetStatus({}).status();
  }
  EXPECT_TRUE(status.ok()) << "no answer " << absl::Now() - stalled << " after the stall: "
                           << status;
  // Within the keepalive's time and timeout, and one reconnection's backoff.
  EXPECT_LT(absl::Now() - stalled, absl::Seconds(6));
  EXPECT_EQ((*proxy)->connections(), 2);
}

// A client pings no more often than the dispatcher accepts, or it would close the connections of
// well-behaved clients (gRPC's "too_many_pings").
TEST(DispatcherClientTest, ClientsPingNoMoreOftenThanTheDispatcherAccepts) {
  EXPECT_GT(kKeepaliveTime, kMinPingInterval);
  for (bool own : {false, true}) {
    EXPECT_EQ(absl::Milliseconds(ChannelArg(own, GRPC_ARG_KEEPALIVE_TIME_MS)), kKeepaliveTime);
    EXPECT_EQ(ChannelArg(own, GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS), 1);
  }
}

}  // namespace
}  // namespace croupier::rpc

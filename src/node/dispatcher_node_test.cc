// The dispatcher behind real gRPC on loopback: the call checks (token, protocol version) and a
// prompt shutdown.
#include "src/node/dispatcher_node.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/protocol.h"
#include "src/common/testing.h"
#include "src/net/socket.h"
#include "src/rpc/dispatcher_client.h"

namespace croupier {
namespace {

using ::croupier::testing::ScopedTempDir;
using ::testing::HasSubstr;

std::unique_ptr<DispatcherNode> StartNode(const ScopedTempDir& tmp, std::string token) {
  DispatcherNodeOptions options;
  options.port = 0;
  options.work_dir = tmp.Join("work");
  options.auth_token = std::move(token);
  auto node = DispatcherNode::Start(options);
  EXPECT_TRUE(node.ok()) << node.status();
  return node.ok() ? *std::move(node) : nullptr;
}

std::unique_ptr<rpc::DispatcherClient> Client(const DispatcherNode& node, std::string token) {
  return rpc::DispatcherClient::Create(
      node.address(), {.auth_token = std::move(token), .call_timeout = absl::Seconds(5),
                       .timeout = absl::Seconds(5), .tls = {}});
}

TEST(DispatcherNodeTest, TheRightTokenIsServedAndAWrongOneRefused) {
  ScopedTempDir tmp;
  auto node = StartNode(tmp, "s3cret");
  ASSERT_NE(node, nullptr);
  EXPECT_GT(node->port(), 0);
  auto ok = Client(*node, "s3cret")->GetStatus(v1::StatusRequest());
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->protocol_version(), kProtocolVersion);
  auto wrong = Client(*node, "guess")->GetStatus(v1::StatusRequest());
  EXPECT_TRUE(absl::IsUnauthenticated(wrong.status())) << wrong.status();
  EXPECT_THAT(wrong.status().message(), HasSubstr("wrong auth token"));
  EXPECT_THAT(wrong.status().message(), HasSubstr(node->address()));
  auto none = Client(*node, "")->GetStatus(v1::StatusRequest());
  EXPECT_TRUE(absl::IsUnauthenticated(none.status())) << none.status();
  EXPECT_THAT(none.status().message(), HasSubstr("no auth token"));
}

TEST(DispatcherNodeTest, AnUnwritableWorkDirectoryIsRefusedAtStart) {
  ScopedTempDir tmp;
  DispatcherNodeOptions options;
  options.port = 0;
  options.work_dir = "/proc/croupier-cannot-be-here";
  auto node = DispatcherNode::Start(options);
  EXPECT_FALSE(node.ok());
  EXPECT_THAT(node.status().message(), HasSubstr("/proc/croupier-cannot-be-here"));
}

TEST(DispatcherNodeTest, ShutdownIsPromptAndIdempotent) {
  ScopedTempDir tmp;
  auto node = StartNode(tmp, "");
  ASSERT_NE(node, nullptr);
  auto start = std::chrono::steady_clock::now();
  node->Shutdown();
  node->Shutdown();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(DispatcherNodeTest, AnUnreachableDispatcherIsDeadlineExceededNamingItsAddress) {
  auto client = rpc::DispatcherClient::Create(
      "127.0.0.1:1", {.auth_token = "",
                       .call_timeout = absl::Milliseconds(300),
                       .timeout = absl::Seconds(1),
                       .tls = {}});
  auto start = std::chrono::steady_clock::now();
  auto status = client->GetStatus(v1::StatusRequest());
  EXPECT_TRUE(absl::IsDeadlineExceeded(status.status())) << status.status();
  EXPECT_THAT(status.status().message(), HasSubstr("dispatcher 127.0.0.1:1"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// A restarted dispatcher under thousands of reconnecting clients ran out of descriptors, and
// gRPC's own listener (1.51) stopped accepting for good after its first failed accept4: the
// dispatcher served nobody again. Here the process runs out of descriptors with connections
// waiting, and the dispatcher must accept again once descriptors are free.
TEST(DispatcherNodeTest, ItAcceptsAgainAfterRunningOutOfDescriptors) {
  ScopedTempDir tmp;
  auto node = StartNode(tmp, "");
  ASSERT_NE(node, nullptr);
  ASSERT_TRUE(Client(*node, "")->GetStatus(v1::StatusRequest()).ok());

  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  // A low soft limit, so that filling the table is quick whatever the hard limit.
  int lowest = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(lowest, 0);
  ::close(lowest);
  rlimit low = saved;
  low.rlim_cur = std::min<rlim_t>(saved.rlim_cur, lowest + 256);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);

  // Every descriptor the process has left taken, then connections made one at a time, each in a
  // descriptor given back for it: the listener's accept fails with EMFILE.
  std::vector<int> filler;
  for (int fd; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) filler.push_back(fd);
  ASSERT_GE(filler.size(), 16u);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(node->port()));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::vector<net::Socket> waiting;
  for (int i = 0; i < 8; ++i) {
    ::close(filler.back());
    filler.pop_back();
    net::Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!s.valid()) continue;  // one of gRPC's threads took it first
    ::connect(s.fd(), reinterpret_cast<const sockaddr*>(&to), sizeof(to));
    waiting.push_back(std::move(s));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(waiting.empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (int fd : filler) ::close(fd);
  waiting.clear();
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);

  // Accepting again: a new client is answered.
  const auto start = std::chrono::steady_clock::now();
  auto status = Client(*node, "")->GetStatus(v1::StatusRequest());
  EXPECT_TRUE(status.ok()) << status.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace croupier

// The dispatcher behind real gRPC on loopback: the call checks (token, protocol version) and a
// prompt shutdown.
#include "src/node/dispatcher_node.h"

#include <chrono>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/protocol.h"
#include "src/common/testing.h"
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

}  // namespace
}  // namespace croupier

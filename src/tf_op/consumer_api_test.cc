// The C table of consumer_api.h: status codes and messages cross it intact (cut to the caller's
// buffer), and bad options are refused before any call.
#include "src/tf_op/consumer_api.h"

#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/testing.h"
#include "src/node/dispatcher_node.h"

namespace croupier {
namespace {

using ::croupier::testing::ScopedTempDir;
using ::testing::HasSubstr;

// The options point into `dispatcher`, which must outlive them.
CroupierConnectOptions Options(const std::string& dispatcher, double timeout) {
  CroupierConnectOptions o{};
  o.dispatcher = dispatcher.c_str();
  o.job = "train";
  o.rank = 0;
  o.world = 1;
  o.auth_token = "";
  o.prefetch_batches = 2;
  o.prefetch_bytes = 1 << 20;
  o.timeout_seconds = timeout;
  o.resume = 1;
  return o;
}

// connect() to an address no one listens at with `timeout`: its code, its message in `error`.
int ConnectToNowhere(double timeout, char* error, size_t size) {
  const std::string address = "127.0.0.1:1";
  CroupierConnectOptions o = Options(address, timeout);
  CroupierConsumer* consumer = nullptr;
  const int code = croupier_consumer_api()->connect(&o, &consumer, error, size);
  EXPECT_EQ(consumer, nullptr);
  return code;
}

TEST(ConsumerApiTest, TheTableDescribesItself) {
  const CroupierConsumerApi* api = croupier_consumer_api();
  ASSERT_NE(api, nullptr);
  EXPECT_EQ(api->version, CROUPIER_CONSUMER_API_VERSION);
  EXPECT_EQ(api->size, sizeof(CroupierConsumerApi));
}

TEST(ConsumerApiTest, AnUnknownJobIsNotFoundWithTheDispatchersMessage) {
  ScopedTempDir tmp;
  DispatcherNodeOptions options;
  options.port = 0;
  options.work_dir = tmp.Join("work");
  auto node = DispatcherNode::Start(options);
  ASSERT_TRUE(node.ok()) << node.status();
  const std::string address = (*node)->address();
  const CroupierConsumerApi* api = croupier_consumer_api();
  CroupierConnectOptions o = Options(address, 5);
  CroupierConsumer* consumer = reinterpret_cast<CroupierConsumer*>(&o);  // must be reset
  char error[512];
  const int code = api->connect(&o, &consumer, error, sizeof error);
  EXPECT_EQ(code, static_cast<int>(absl::StatusCode::kNotFound));
  EXPECT_EQ(consumer, nullptr);
  EXPECT_THAT(std::string(error), HasSubstr("train"));
}

TEST(ConsumerApiTest, AnUnreachableDispatcherIsDeadlineExceededCutToTheBuffer) {
  char error[2048];
  const int code = ConnectToNowhere(0.5, error, sizeof error);
  EXPECT_EQ(code, static_cast<int>(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(std::string(error), HasSubstr("127.0.0.1:1"));
  char small[8];
  std::memset(small, 'x', sizeof small);
  EXPECT_EQ(ConnectToNowhere(0.5, small, sizeof small), code);
  EXPECT_EQ(std::strlen(small), sizeof small - 1);  // cut, and NUL-terminated
}

TEST(ConsumerApiTest, ABadTimeoutIsRefusedBeforeAnyCall) {
  char error[256];
  EXPECT_EQ(ConnectToNowhere(0, error, sizeof error),
            static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(error), HasSubstr("timeout"));
}

}  // namespace
}  // namespace croupier

#include "src/rpc/grpc_util.h"

#include <cstdlib>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace croupier::rpc {
namespace {

using ::testing::HasSubstr;

TEST(GrpcUtilTest, StatusCodesSurviveTheRoundTripAndTheMessageNamesTheCall) {
  for (auto code : {absl::StatusCode::kInvalidArgument, absl::StatusCode::kUnavailable,
                    absl::StatusCode::kDataLoss, absl::StatusCode::kUnauthenticated,
                    absl::StatusCode::kFailedPrecondition}) {
    absl::Status s = FromGrpcStatus(ToGrpcStatus(absl::Status(code, "why")),
                                    "dispatcher 127.0.0.1:5050: Locate");
    EXPECT_EQ(s.code(), code);
    EXPECT_EQ(s.message(), "dispatcher 127.0.0.1:5050: Locate: why");
  }
  EXPECT_TRUE(FromGrpcStatus(ToGrpcStatus(absl::OkStatus()), "x").ok());
}

TEST(GrpcUtilTest, AuthTokenComesFromTheFlagThenTheEnvironment) {
  ::unsetenv("CROUPIER_AUTH_TOKEN");
  EXPECT_EQ(ResolveAuthToken(""), "");
  ::setenv("CROUPIER_AUTH_TOKEN", "from-env", 1);
  EXPECT_EQ(ResolveAuthToken(""), "from-env");
  EXPECT_EQ(ResolveAuthToken("from-flag"), "from-flag");
  ::unsetenv("CROUPIER_AUTH_TOKEN");
}

}  // namespace
}  // namespace croupier::rpc

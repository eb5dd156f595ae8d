#include "src/s3/s3_error.h"

#include <gtest/gtest.h>

namespace croupier::s3 {
namespace {

constexpr char kBadKey[] =
    "<Error><Code>InvalidAccessKeyId</Code><Message>The AWS Access Key Id you provided does not "
    "exist in our records.</Message></Error>";
constexpr char kSlowDown[] =
    "<Error><Code>SlowDown</Code><Message>Reduce your rate.</Message></Error>";

TEST(S3ErrorTest, MessageNamesObjectRangeAndServerCode) {
  absl::Status s = AnswerToStatus(403, kBadKey, "s3://b/k bytes [0, 4096)");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "s3://b/k bytes [0, 4096): 403 InvalidAccessKeyId: The AWS Access Key Id you provided "
            "does not exist in our records.");
}

TEST(S3ErrorTest, RetryableAnswersAreUnavailable) {
  for (int status : {408, 429, 500, 502, 503, 504}) {
    EXPECT_EQ(AnswerToStatus(status, "", "x").code(), absl::StatusCode::kUnavailable) << status;
  }
  EXPECT_EQ(AnswerToStatus(400, "<Error><Code>RequestTimeout</Code></Error>", "x").code(),
            absl::StatusCode::kUnavailable);
}

TEST(S3ErrorTest, PermanentAnswersAreNot) {
  EXPECT_EQ(AnswerToStatus(404, "<Error><Code>NoSuchKey</Code></Error>", "x").code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(AnswerToStatus(400, "<Error><Code>InvalidArgument</Code></Error>", "x").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AnswerToStatus(412, "", "x").code(), absl::StatusCode::kAborted);
  EXPECT_EQ(AnswerToStatus(416, "", "x").code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(AnswerToStatus(301, "", "x").code(), absl::StatusCode::kUnknown);
}

TEST(S3ErrorTest, BodilessAnswersAreNamedByTheirReason) {
  EXPECT_EQ(AnswerToStatus(404, "", "s3://b/k").message(), "s3://b/k: 404 NotFound");
  EXPECT_EQ(AnswerToStatus(403, "", "s3://b/k").message(),
            "s3://b/k: 403 Forbidden: refused without a reason (the answer has no body); check "
            "the access key and secret, the region and the bucket's policy");
}

TEST(S3ErrorTest, ThrottlesAreTold) {
  EXPECT_TRUE(IsThrottle(503, kSlowDown));
  EXPECT_TRUE(IsThrottle(429, ""));
  EXPECT_FALSE(IsThrottle(503, "<Error><Code>ServiceUnavailable</Code></Error>"));
  EXPECT_FALSE(IsThrottle(500, kSlowDown));
}

TEST(S3ErrorTest, TransportFailures) {
  absl::Status s = TransportToStatus("Connection", true, "http://127.0.0.1:1", "listing s3://b/*");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "listing s3://b/*: Connection (endpoint http://127.0.0.1:1)");
  EXPECT_EQ(TransportToStatus("SSLServerVerification", false, "https://h", "x").code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace croupier::s3

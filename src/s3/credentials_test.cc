#include "src/s3/credentials.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>

#include "src/s3/s3_options.h"

namespace croupier::s3 {
namespace {

GetEnv Vars(std::map<std::string, std::string> vars) {
  return [vars](absl::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

constexpr char kFile[] = R"(# a comment
[default]
aws_access_key_id = AKDEFAULT
aws_secret_access_key = secretdefault

[training]
aws_access_key_id=AKTRAIN
; another comment
aws_secret_access_key=secrettrain
aws_session_token = tok
)";

TEST(CredentialsTest, EnvironmentComesFirst) {
  absl::StatusOr<Credentials> c =
      ResolveCredentials(Vars({{"AWS_ACCESS_KEY_ID", "AK"},
                               {"AWS_SECRET_ACCESS_KEY", "SK"},
                               {"AWS_SESSION_TOKEN", "T"},
                               {"AWS_SHARED_CREDENTIALS_FILE", "/nonexistent"}}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->access_key_id, "AK");
  EXPECT_EQ(c->secret_access_key, "SK");
  EXPECT_EQ(c->session_token, "T");
}

TEST(CredentialsTest, SharedFileProfiles) {
  absl::StatusOr<Credentials> c = ParseSharedCredentials(kFile, "default", "creds");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->access_key_id, "AKDEFAULT");
  EXPECT_EQ(c->session_token, "");
  c = ParseSharedCredentials(kFile, "training", "creds");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->access_key_id, "AKTRAIN");
  EXPECT_EQ(c->secret_access_key, "secrettrain");
  EXPECT_EQ(c->session_token, "tok");
  c = ParseSharedCredentials(kFile, "absent", "creds");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("[absent]"), std::string::npos);
}

TEST(CredentialsTest, SharedFileFromTheEnvironmentWithProfile) {
  const std::string path = ::testing::TempDir() + "/croupier_s3_credentials";
  std::ofstream(path) << kFile;
  absl::StatusOr<Credentials> c = ResolveCredentials(
      Vars({{"AWS_SHARED_CREDENTIALS_FILE", path}, {"AWS_PROFILE", "training"}}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->access_key_id, "AKTRAIN");
  std::remove(path.c_str());
}

TEST(CredentialsTest, NothingFoundSaysWhereItLooked) {
  absl::StatusOr<Credentials> c =
      ResolveCredentials(Vars({{"AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/creds"}}));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("/nonexistent/creds"), std::string::npos);
}

TEST(S3OptionsTest, EndpointRegionAndAddressingFromTheEnvironment) {
  auto base = std::map<std::string, std::string>{{"AWS_ACCESS_KEY_ID", "AK"},
                                                 {"AWS_SECRET_ACCESS_KEY", "SK"}};
  absl::StatusOr<S3Options> o = S3OptionsFromEnvironment(Vars(base));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->endpoint, "");
  EXPECT_EQ(o->region, "us-east-1");
  EXPECT_FALSE(o->path_style);  // AWS itself: virtual-host style

  auto custom = base;
  custom["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9000/";
  custom["AWS_DEFAULT_REGION"] = "eu-west-1";
  custom["CROUPIER_S3_MAX_ATTEMPTS"] = "3";
  o = S3OptionsFromEnvironment(Vars(custom));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->endpoint, "http://127.0.0.1:9000");
  EXPECT_EQ(o->region, "eu-west-1");
  EXPECT_TRUE(o->path_style);
  EXPECT_EQ(o->max_attempts, 3);

  custom["AWS_REGION"] = "auto";
  custom["CROUPIER_S3_ADDRESSING"] = "virtual";
  o = S3OptionsFromEnvironment(Vars(custom));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->region, "auto");
  EXPECT_FALSE(o->path_style);

  custom["CROUPIER_S3_ADDRESSING"] = "sideways";
  EXPECT_EQ(S3OptionsFromEnvironment(Vars(custom)).status().code(),
            absl::StatusCode::kInvalidArgument);
  custom["CROUPIER_S3_ADDRESSING"] = "path";
  custom["AWS_ENDPOINT_URL"] = "ftp://x";
  EXPECT_EQ(S3OptionsFromEnvironment(Vars(custom)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace croupier::s3

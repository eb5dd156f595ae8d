#include "src/net/tls_context.h"

#include <memory>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/net/net_testing.h"

namespace croupier::net {
namespace {

using ::testing::HasSubstr;

class TlsContextTest : public testing::TlsFilesTest {};

TEST_F(TlsContextTest, AServerWithACaRequiresClientCertificates) {
  auto mutual = TlsContext::ForServer(files_->Config("server", "ca"));
  ASSERT_TRUE(mutual.ok()) << mutual.status();
  EXPECT_TRUE((*mutual)->server());
  EXPECT_TRUE((*mutual)->requires_client_cert());
  auto server_only = TlsContext::ForServer(files_->Config("server", ""));
  ASSERT_TRUE(server_only.ok()) << server_only.status();
  EXPECT_FALSE((*server_only)->requires_client_cert());
  auto client = TlsContext::ForClient(files_->Config("", "ca"));
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_FALSE((*client)->server());
}

TEST_F(TlsContextTest, MissingOrMismatchedFilesAreInvalidArgumentNamingTheFile) {
  TlsConfig config = files_->Config("server", "ca");
  config.key_file = files_->File("client.key");
  auto mismatched = TlsContext::ForServer(config);
  EXPECT_EQ(mismatched.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mismatched.status().message(), HasSubstr("the TLS key"));
  EXPECT_THAT(mismatched.status().message(), HasSubstr("client.key"));
  config.cert_file = files_->File("nonexistent.pem");
  auto missing = TlsContext::ForClient(config);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), HasSubstr("nonexistent.pem"));
  auto no_cert = TlsContext::ForServer(files_->Config("", "ca"));
  EXPECT_EQ(no_cert.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_cert.status().message(), HasSubstr("--tls-cert"));
}

}  // namespace
}  // namespace croupier::net

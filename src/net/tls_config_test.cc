#include "src/net/tls_config.h"

#include <stdlib.h>

#include <fstream>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/net/net_testing.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;

TEST(TlsConfigTest, EnvironmentSuppliesTheFilesWhenNoneAreGiven) {
  ::setenv(kTlsCaEnv, "/env/ca.pem", 1);
  ::setenv(kTlsCertEnv, "/env/cert.pem", 1);
  ::setenv(kTlsKeyEnv, "/env/key.pem", 1);
  const TlsConfig from_env = ResolveTlsConfig(TlsConfig{});
  TlsConfig flag;
  flag.ca_file = "/flag/ca.pem";
  const TlsConfig given = ResolveTlsConfig(flag);
  ::unsetenv(kTlsCaEnv);
  ::unsetenv(kTlsCertEnv);
  ::unsetenv(kTlsKeyEnv);
  EXPECT_EQ(from_env.ca_file, "/env/ca.pem");
  EXPECT_EQ(from_env.cert_file, "/env/cert.pem");
  EXPECT_EQ(from_env.key_file, "/env/key.pem");
  EXPECT_EQ(given.ca_file, "/flag/ca.pem");
  EXPECT_EQ(given.cert_file, "");
  EXPECT_FALSE(ResolveTlsConfig(TlsConfig{}).enabled());
}

class LoadTlsPemTest : public testing::TlsFilesTest {};

TEST_F(LoadTlsPemTest, ReadsEveryFileGiven) {
  auto pem = LoadTlsPem(files_->Config("client", "ca"));
  ASSERT_TRUE(pem.ok()) << pem.status();
  EXPECT_THAT(pem->cert, HasSubstr("-----BEGIN CERTIFICATE-----"));
  EXPECT_THAT(pem->key, HasSubstr("PRIVATE KEY-----"));
  EXPECT_THAT(pem->ca, HasSubstr("-----BEGIN CERTIFICATE-----"));
  auto ca_only = LoadTlsPem(files_->Config("", "ca"));
  ASSERT_TRUE(ca_only.ok()) << ca_only.status();
  EXPECT_EQ(ca_only->cert, "");
  EXPECT_EQ(ca_only->ca, pem->ca);
}

TEST_F(LoadTlsPemTest, AMissingOrNonPemFileIsInvalidArgumentNamingIt) {
  TlsConfig config = files_->Config("client", "");
  config.ca_file = files_->File("nonexistent.pem");
  auto missing = LoadTlsPem(config);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), HasSubstr("cannot read the TLS CA file"));
  EXPECT_THAT(missing.status().message(), HasSubstr("nonexistent.pem"));

  config.ca_file = files_->File("not_pem.txt");
  std::ofstream(config.ca_file) << "not a certificate\n";
  auto not_pem = LoadTlsPem(config);
  EXPECT_EQ(not_pem.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(not_pem.status().message(),
              HasSubstr("the TLS CA file " + config.ca_file + " holds no PEM block"));
}

TEST_F(LoadTlsPemTest, ACertificateNeedsItsKeyAndAKeyItsCertificate) {
  TlsConfig cert_only = files_->Config("client", "ca");
  cert_only.key_file.clear();
  auto no_key = LoadTlsPem(cert_only);
  EXPECT_EQ(no_key.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_key.status().message(), HasSubstr("only the certificate was given"));
  TlsConfig key_only = files_->Config("client", "ca");
  key_only.cert_file.clear();
  auto no_cert = LoadTlsPem(key_only);
  EXPECT_EQ(no_cert.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_cert.status().message(), HasSubstr("only the key was given"));
}

}  // namespace
}  // namespace croupier

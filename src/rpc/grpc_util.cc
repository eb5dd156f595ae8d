#include "src/rpc/grpc_util.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "src/common/protocol.h"

namespace croupier::rpc {
namespace {

// Lets the tests pose as a peer of another protocol version. Never set in production.
uint32_t ClientProtocolVersion() {
  static const uint32_t version = [] {
    uint32_t v = kProtocolVersion;
    if (const char* s = std::getenv("CROUPIER_TEST_PROTOCOL_VERSION")) {
      if (!absl::SimpleAtoi(s, &v)) v = kProtocolVersion;
    }
    return v;
  }();
  return version;
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

absl::string_view Metadata(const grpc::ServerContextBase& context, absl::string_view key) {
  const auto& md = context.client_metadata();
  auto it = md.find(grpc::string_ref(key.data(), key.size()));
  if (it == md.end()) return {};
  return absl::string_view(it->second.data(), it->second.size());
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message()));
}

absl::Status CheckCallMetadata(const grpc::ServerContextBase& context, const std::string& token) {
  absl::string_view version = Metadata(context, kProtocolMetadataKey);
  uint32_t v = 0;
  if (!absl::SimpleAtoi(version, &v) || v != kProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "protocol version mismatch: the peer ", context.peer(), " speaks version '", version,
        "', this server speaks version ", kProtocolVersion, "; run the same croupier release"));
  }
  if (token.empty()) return absl::OkStatus();
  absl::string_view auth = Metadata(context, kAuthMetadataKey);
  if (!ConstantTimeEquals(auth, absl::StrCat("Bearer ", token))) {
    return absl::UnauthenticatedError(
        auth.empty() ? "no auth token: this server requires --auth-token or CROUPIER_AUTH_TOKEN"
                     : "wrong auth token");
  }
  return absl::OkStatus();
}

std::unique_ptr<grpc::ClientContext> MakeClientContext(absl::Duration timeout,
                                                       const std::string& token) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  context->AddMetadata(kProtocolMetadataKey, std::to_string(ClientProtocolVersion()));
  if (!token.empty()) context->AddMetadata(kAuthMetadataKey, absl::StrCat("Bearer ", token));
  return context;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsConfig& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  if (tls.cert_file.empty()) {
    return absl::InvalidArgumentError(
        "a TLS server needs a certificate and a key (--tls-cert and --tls-key)");
  }
  absl::StatusOr<TlsPem> pem = LoadTlsPem(tls);
  if (!pem.ok()) return pem.status();
  grpc::SslServerCredentialsOptions options(
      pem->ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                      : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = pem->ca;
  options.pem_key_cert_pairs.push_back({pem->key, pem->cert});
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsConfig& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  absl::StatusOr<TlsPem> pem = LoadTlsPem(tls);
  if (!pem.ok()) return pem.status();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = pem->ca;  // empty: gRPC's default roots
  options.pem_private_key = pem->key;
  options.pem_cert_chain = pem->cert;
  return grpc::SslCredentials(options);
}

std::string ResolveAuthToken(const std::string& flag) {
  if (!flag.empty()) return flag;
  const char* env = std::getenv(kAuthTokenEnv);
  return env ? env : "";
}

}  // namespace croupier::rpc

// The edge between gRPC and the rest of croupier: only this folder sees grpc::Status.
#ifndef CROUPIER_SRC_RPC_GRPC_UTIL_H_
#define CROUPIER_SRC_RPC_GRPC_UTIL_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "src/net/tls_config.h"

namespace croupier::rpc {

grpc::Status ToGrpcStatus(const absl::Status& status);
// `what` says which call to which peer failed, e.g. "dispatcher 127.0.0.1:5050: Locate"; it
// prefixes the message so that the error names the address.
absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view what);

// Server side: the protocol version and the auth token of an incoming call. FAILED_PRECONDITION
// for a version mismatch (naming both versions), UNAUTHENTICATED for a missing or wrong token
// (compared in constant time). An empty `token` accepts every call.
absl::Status CheckCallMetadata(const grpc::ServerContextBase& context, const std::string& token);

// Client side: a context with a deadline `timeout` from now, the protocol version and the token.
std::unique_ptr<grpc::ClientContext> MakeClientContext(absl::Duration timeout,
                                                       const std::string& token);

// The auth token to use: `flag` if not empty, else $CROUPIER_AUTH_TOKEN, else none.
std::string ResolveAuthToken(const std::string& flag);

// Bounds on every message of the control plane.
inline constexpr int kMaxControlMessageBytes = 16 << 20;

// gRPC credentials for `tls` (policy in src/net/tls_config.h: a server with a CA requires client
// certificates). Insecure ones when `tls` names no file. INVALID_ARGUMENT naming a file that
// cannot be read.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsConfig& tls);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsConfig& tls);

}  // namespace croupier::rpc

#endif  // CROUPIER_SRC_RPC_GRPC_UTIL_H_

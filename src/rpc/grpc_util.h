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

// How long one attempt to connect to the dispatcher may take, TCP and HTTP/2 handshake
// (GRPC_ARG_MIN_RECONNECT_BACKOFF_MS of every DispatcherClient), and how long the dispatcher keeps
// a connection in its handshake by default (DispatcherNodeOptions::handshake_timeout). Short,
// since an attempt made while the dispatcher restarts can hang until this bound (with 5 s, a
// third of 5,000 hollow clients' connections came back 5 s late). The same on both sides: a
// client gives up no later than the server, which holds no connection longer than its client
// waits for it (a dispatcher restarted under 10,000 clients that gave up after 1 s, while it held
// each connection up to 10 s, ran out of descriptors in their reconnection: bench/notes.md).
inline constexpr absl::Duration kConnectTimeout = absl::Seconds(1);
// A client pings its connection to the dispatcher after kKeepaliveTime without a ping, and gives
// the connection up (and connects again) when no answer comes within kKeepaliveTimeout: a
// connection that stays open but carries nothing (a NAT or load balancer that dropped it, the
// dispatcher's address moved to another host) would otherwise take every call until its deadline,
// for as long as the kernel keeps it (a proxy that acknowledges: forever), and the client would
// never reconnect. The dispatcher accepts pings as often as kMinPingInterval from clients with no
// call outstanding; it must be below kKeepaliveTime, or the dispatcher would close the
// connections of well-behaved clients for pinging too often (gRPC's "too_many_pings"). At 10,000
// clients: 500 pings a second.
inline constexpr absl::Duration kKeepaliveTime = absl::Seconds(20);
inline constexpr absl::Duration kKeepaliveTimeout = absl::Seconds(10);
inline constexpr absl::Duration kMinPingInterval = absl::Seconds(10);
// How often one client may make a connection of its own to learn why gRPC cannot connect
// (net::ProbeTls). A client that the dispatcher has answered once needs no such probe.
inline constexpr absl::Duration kProbeEvery = absl::Seconds(30);

// gRPC credentials for `tls` (policy in src/net/tls_config.h: a server with a CA requires client
// certificates). Insecure ones when `tls` names no file. INVALID_ARGUMENT naming a file that
// cannot be read.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsConfig& tls);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsConfig& tls);

}  // namespace croupier::rpc

#endif  // CROUPIER_SRC_RPC_GRPC_UTIL_H_

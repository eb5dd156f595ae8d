// Why a connection to a server fails, learnt by a TLS handshake of our own: for a client library
// such as gRPC's (the control plane) whose errors do not say. Uses the data plane's stream
// (tls_stream.h) for the handshake; thread-safe (each call has its own connection).
#ifndef CROUPIER_SRC_NET_TLS_PROBE_H_
#define CROUPIER_SRC_NET_TLS_PROBE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "src/net/tls_config.h"

namespace croupier::net {

// Explains why a TLS or plaintext connection to `address` fails, by trying a TLS handshake of its
// own. `peer` names the server in messages, e.g. "dispatcher 10.0.0.1:5050". Returns
// UNAUTHENTICATED or FAILED_PRECONDITION with the cause (a certificate refused either way; a
// server that speaks TLS to a plaintext client, or not TLS to a TLS one), OK when the handshake
// agrees with `tls`, UNAVAILABLE when the address cannot be reached (nothing learnt). Bounded by
// `timeout`.
absl::Status ProbeTls(const std::string& address, const TlsConfig& tls, absl::string_view peer,
                      absl::Duration timeout);

}  // namespace croupier::net

#endif  // CROUPIER_SRC_NET_TLS_PROBE_H_

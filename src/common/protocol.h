// The version of croupier's wire protocols (control plane and data plane together). Peers state
// it when they connect and are refused, with both versions named, when it differs. Bump it on
// any incompatible change to proto/croupier.proto or to the data-plane frames.
#ifndef CROUPIER_SRC_COMMON_PROTOCOL_H_
#define CROUPIER_SRC_COMMON_PROTOCOL_H_

#include <cstdint>

namespace croupier {

inline constexpr uint32_t kProtocolVersion = 1;

// gRPC metadata keys (lower case, as gRPC requires).
inline constexpr char kProtocolMetadataKey[] = "croupier-protocol";
inline constexpr char kAuthMetadataKey[] = "authorization";

// The environment variable that gives every component its auth token when --auth-token is not
// given.
inline constexpr char kAuthTokenEnv[] = "CROUPIER_AUTH_TOKEN";

}  // namespace croupier

#endif  // CROUPIER_SRC_COMMON_PROTOCOL_H_

// The version of croupier's wire protocols (control plane and data plane together). Peers state
// it when they connect and are refused, with both versions named, when it differs. Bump it on
// any incompatible change to proto/croupier.proto or to the data-plane frames.
//   1  the first.
//   2  JobSpec carries its settings (source, mode, shuffle, remainder, compression) as enums, no
//      longer as text, and a map source and num_records are added. The data-plane frames did not
//      change: they keep their own versions (src/transport/frame.h).
#ifndef CROUPIER_SRC_COMMON_PROTOCOL_H_
#define CROUPIER_SRC_COMMON_PROTOCOL_H_

#include <cstdint>

namespace croupier {

inline constexpr uint32_t kProtocolVersion = 2;

// gRPC metadata keys (lower case, as gRPC requires).
inline constexpr char kProtocolMetadataKey[] = "croupier-protocol";
inline constexpr char kAuthMetadataKey[] = "authorization";

// The environment variable that gives every component its auth token when --auth-token is not
// given.
inline constexpr char kAuthTokenEnv[] = "CROUPIER_AUTH_TOKEN";

}  // namespace croupier

#endif  // CROUPIER_SRC_COMMON_PROTOCOL_H_

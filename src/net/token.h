// The auth token: comparing it without a timing side channel, and proving that a peer holds it
// without sending it (challenge and response, docs/protocol.md "Handshake").
#ifndef CROUPIER_SRC_NET_TOKEN_H_
#define CROUPIER_SRC_NET_TOKEN_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace croupier {

// True when `presented` equals `expected`. The time taken depends only on expected.size(), never
// on where a guess first differs, so that a client cannot find the token byte by byte.
bool TokenMatches(absl::string_view presented, absl::string_view expected);

// The bytes of a nonce and of a proof (HMAC-SHA256).
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kProofBytes = 32;

// `n` bytes from the operating system's cryptographic generator (OpenSSL RAND_bytes). INTERNAL
// when it fails. Thread-safe.
absl::StatusOr<std::string> RandomBytes(size_t n);

// The proof that a peer holds `token`: HMAC-SHA256 keyed with the token over `label` (who proves,
// to whom, in which protocol), the client's nonce and the server's nonce, each preceded by its
// length (u32 little-endian) so that no two inputs encode alike. kProofBytes bytes. Requires a
// non-empty token. Thread-safe.
std::string TokenProof(absl::string_view token, absl::string_view label,
                       absl::string_view client_nonce, absl::string_view server_nonce);

// True when `proof` is TokenProof(token, label, client_nonce, server_nonce), compared in constant
// time. False for an empty token.
bool ProofMatches(absl::string_view proof, absl::string_view token, absl::string_view label,
                  absl::string_view client_nonce, absl::string_view server_nonce);

}  // namespace croupier

#endif  // CROUPIER_SRC_NET_TOKEN_H_

// OpenSSL's errors as statuses that name the peer and the cause, for the TLS code of this folder
// (tls_context.cc, tls_stream.cc); nothing outside src/net needs them.
//
// The classification of a failed handshake, read or write:
//   - UNAUTHENTICATED for a certificate that does not verify (the peer's or, as the peer's alert
//     says, ours) or a client that presents none to a server requiring one;
//   - UNAVAILABLE for a connection closed, reset or timed out;
//   - FAILED_PRECONDITION for a peer that does not speak TLS.
// The functions read and clear this thread's OpenSSL error queue; they are thread-safe in the
// sense that the queue is per thread.
#ifndef CROUPIER_SRC_NET_TLS_ERROR_H_
#define CROUPIER_SRC_NET_TLS_ERROR_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

typedef struct ssl_st SSL;

namespace croupier::net {

// OpenSSL's queued errors, oldest first, as their reason strings joined by "; " ("unknown TLS
// error" when none is queued); clears the queue.
std::string TakeTlsErrorText();

// The error of a failed SSL call on `ssl`: `ssl_error` is SSL_get_error's answer, `saved_errno`
// errno right after the call. Classified as above; the message is "<doing> <peer> failed: <cause>",
// e.g. doing "TLS handshake with". Clears the queue.
absl::Status TlsError(SSL* ssl, int ssl_error, int saved_errno, absl::string_view doing,
                      absl::string_view peer);

}  // namespace croupier::net

#endif  // CROUPIER_SRC_NET_TLS_ERROR_H_
